"""A model folder's reasoning_mode.json is a file anyone who shares the folder can write: a link, a
FIFO, a huge or deeply nested or undecodable file reads as "no record" (the template's default), at
once, and is never followed or read whole."""

import json
import os
import time

import pytest

from rlfactory_nb.reasoning_mode import MODE_FILE, trained_mode


@pytest.mark.parametrize("plant", ["symlink", "fifo", "huge", "deep", "invalid-utf8", "not-a-bool", "a-list"])
def test_a_hostile_record_is_no_record(tmp_path, plant):
    record = tmp_path / MODE_FILE
    if plant == "symlink":
        target = tmp_path / "elsewhere.json"
        target.write_text(json.dumps({"enable_thinking": True}))
        record.symlink_to(target)
    elif plant == "fifo":
        os.mkfifo(record)  # nobody writes: a blocking open would hang
    elif plant == "huge":
        record.write_bytes(b'{"enable_thinking": true, "pad": "' + b"x" * (8 << 20) + b'"}')
    elif plant == "deep":
        record.write_text("[" * 2_000 + "]" * 2_000)  # inside the 4 KiB bound: json recursion, not size
    elif plant == "invalid-utf8":
        record.write_bytes(b'{"enable_thinking": \xff\xfe}')
    elif plant == "not-a-bool":
        record.write_text('{"enable_thinking": "yes"}')
    else:
        record.write_text("[true]")
    started = time.monotonic()
    assert trained_mode(str(tmp_path)) is None
    assert time.monotonic() - started < 2


def test_a_plain_record_is_read(tmp_path):
    (tmp_path / MODE_FILE).write_text('{"enable_thinking": false}')
    assert trained_mode(str(tmp_path)) is False
