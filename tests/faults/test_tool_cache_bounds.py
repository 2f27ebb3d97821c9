"""Issue 44, findings 15 and 16: the tool cache is bounded in bytes, and its record file is untrusted.

- 15: bounded by entry count only, the cache held 200 MiB in memory and 204 MiB on disk while the
  model was shown 0.8 MiB. Entries now keep only what the model can read (`max_result_chars`), and
  the in-memory LRU has a byte budget.
- 16: a damaged or hostile record file (`cache_path`) made `ToolSet.call` raise, or return bytes.
  It is now treated as empty, with one warning, and the call runs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
from pathlib import Path

import pytest

from rlfactory_nb.tools import ToolCache, ToolSet
from rlfactory_nb.tools.cache import Recorded

BIG = 100_000
CACHE_LOG = "rlfactory_nb.tools.cache"


def big_page(n: int) -> str:
    """A tool returning 100,000 characters, of which the model reads the first 4,000."""
    return f"page {n} " + "x" * BIG


def echo(text: str) -> str:
    """Echoes its text."""
    return f"echo: {text}"


async def test_the_cache_holds_what_the_model_reads_not_what_the_tool_wrote(tmp_path: Path) -> None:
    path = tmp_path / "tools.sqlite"
    async with ToolSet.from_functions(big_page, cache_path=str(path)) as tools:
        results = [await tools.call("big_page", {"n": n}) for n in range(60)]
        again = await tools.call("big_page", {"n": 0})
        cache = tools.cache
    shown = sum(len(result.content) for result in results)
    assert shown < 60 * 4_100
    on_disk = sum(file.stat().st_size for file in tmp_path.glob("tools.sqlite*"))  # the WAL too
    assert on_disk < 8 * shown < BIG * 60 / 3, f"the record holds {on_disk:,} bytes for {shown:,} shown"
    assert cache.bytes < 2 * shown, f"memory holds {cache.bytes:,} bytes for {shown:,} shown"
    assert again.cached and again.content == results[0].content
    assert again.content.endswith(f"[... truncated: showing 4000 of {BIG + 7} characters]")
    async with ToolSet.from_functions(big_page, cache_path=str(path), replay=True) as replaying:
        replayed = await replaying.call("big_page", {"n": 1})
    assert replayed.content == results[1].content, "a replay shows exactly what the run showed"


def test_the_lru_keeps_within_its_byte_budget() -> None:
    cache = ToolCache(max_entries=10_000, max_bytes=1 << 20)
    for n in range(100):
        cache.put("t", {"n": n}, Recorded("ok", "y" * 50_000))
    assert cache.bytes <= 1 << 20 and 10 <= len(cache) <= 21
    assert cache.get("t", {"n": 99}) is not None and cache.get("t", {"n": 0}) is None
    cache.put("t", {"n": "huge"}, Recorded("ok", "z" * (2 << 20)))  # over the whole budget: not kept
    assert cache.get("t", {"n": "huge"}) is None and cache.bytes <= 1 << 20


def garbage(path: Path) -> None:
    path.write_bytes(b"\x00not a database\xff" * 1000)


def wrong_table(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE tool_results (key TEXT PRIMARY KEY, status INTEGER)")


def fifo(path: Path) -> None:
    os.mkfifo(path)


def truncated(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE filler (x TEXT)")
        db.executemany("INSERT INTO filler VALUES (?)", [("f" * 4000,) for _ in range(200)])
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


@pytest.mark.parametrize("damage", [garbage, wrong_table, fifo, truncated])
async def test_a_damaged_record_file_is_treated_as_empty_with_one_warning(tmp_path, caplog, damage) -> None:
    path = tmp_path / "tools.sqlite"
    damage(path)
    with caplog.at_level(logging.WARNING, logger=CACHE_LOG):
        async with ToolSet.from_functions(echo, cache_path=str(path)) as tools:
            results = await asyncio.wait_for(
                asyncio.gather(*(tools.call("echo", {"text": str(n)}) for n in range(3))), timeout=30
            )
    assert [(r.status, r.content) for r in results] == [("ok", f"echo: {n}") for n in range(3)]
    warnings = [record for record in caplog.records if record.name == CACHE_LOG]
    assert len(warnings) == 1 and str(path) in warnings[0].getMessage()


async def test_hostile_rows_are_misses_and_never_come_back_as_bytes(tmp_path, caplog) -> None:
    path = tmp_path / "tools.sqlite"
    async with ToolSet.from_functions(echo, cache_path=str(path)) as tools:
        for text in ("blob", "status", "null"):
            await tools.call("echo", {"text": text})
    with sqlite3.connect(path) as db:
        db.execute("UPDATE tool_results SET content = X'00FFFE' WHERE arguments LIKE '%blob%'")
        db.execute("UPDATE tool_results SET status = 'pwned' WHERE arguments LIKE '%status%'")
        db.execute("UPDATE tool_results SET status = 7 WHERE arguments LIKE '%null%'")
    with caplog.at_level(logging.WARNING, logger=CACHE_LOG):
        async with ToolSet.from_functions(echo, cache_path=str(path)) as tools:
            results = [await tools.call("echo", {"text": text}) for text in ("blob", "status", "null")]
    assert [(r.status, r.content, r.cached) for r in results] == [
        ("ok", f"echo: {text}", False) for text in ("blob", "status", "null")
    ]
    assert len([record for record in caplog.records if record.name == CACHE_LOG]) == 1
