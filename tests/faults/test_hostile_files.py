"""Hostile dataset, run-folder and tools config files: each reader streams, stays within its bounds
and fails with its one documented error (DatasetError for datasets, ConfigError for tools configs)
naming the file and the line or row; metrics.jsonl skips what it cannot read, as it skips a torn line.
"""

import json
import time
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlfactory_nb.config_schema import ConfigError
from rlfactory_nb.data.rows import DatasetError, load_rows, read_records
from rlfactory_nb.errors import StorageError
from rlfactory_nb.tools.config import load_tools_config
from rlfactory_nb.train.metrics import METRICS_FILE, read_metrics
from rlfactory_nb.train.run_folder import JOB_FILE, LOG_FILE, RunFolder

pytestmark = pytest.mark.timeout(120)

ROW = {"prompt": "What is 2+2?", "ground_truth": "4"}
DEEP = "[" * 100_000 + "]" * 100_000


def jsonl(path, *lines: bytes):
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


@pytest.mark.parametrize(
    "bad_line, problem",
    [
        (b'{"prompt": "caf\xe9", "ground_truth": "1"}', "not valid UTF-8"),
        (DEEP.encode(), "nested too deeply"),
        (b'{"prompt": "x", "ground_truth": ' + b"9" * 5000 + b"}", "unreadable JSON value"),
    ],
    ids=["invalid-utf8", "100k-deep", "5000-digit-integer"],
)
def test_a_bad_jsonl_line_is_a_dataset_error_naming_the_file_and_line(tmp_path, bad_line, problem):
    path = jsonl(tmp_path / "data.jsonl", json.dumps(ROW).encode(), bad_line)
    with pytest.raises(DatasetError, match=problem) as info:
        load_rows(path)
    assert f"{path}:2" in str(info.value)


def test_a_csv_field_past_the_128_kb_field_limit_names_the_file_and_line(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text("prompt,ground_truth\nWhat is 1+1?,2\n" + "x" * 200_000 + ",4\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="field larger than field limit") as info:
        load_rows(path)
    assert f"{path}:3" in str(info.value)


def test_invalid_utf8_in_a_csv_is_a_dataset_error(tmp_path):
    path = tmp_path / "data.csv"
    path.write_bytes(b"prompt,ground_truth\ncaf\xe9,1\n")
    with pytest.raises(DatasetError, match=f"{path}.*not valid UTF-8"):
        load_rows(path)


def test_a_limited_load_reads_only_the_rows_it_needs(tmp_path):
    path = jsonl(tmp_path / "data.jsonl", json.dumps(ROW).encode())
    with path.open("r+b") as file:
        file.truncate(1024**3)  # a sparse GiB after the first row: no disk, one NUL-filled line
    tracemalloc.start()
    rows = load_rows(path, 1)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert [r["ground_truth"] for r in rows] == ["4"]
    assert peak < 64 * 1024**2, f"peak {peak:,} bytes (before: the whole file, 2.4 GiB)"
    with pytest.raises(DatasetError, match=f"{path}:2: line longer than"):
        load_rows(path)


def test_a_limited_parquet_load_decodes_only_a_batch(tmp_path):
    pyarrow = pytest.importorskip("pyarrow")
    parquet = pytest.importorskip("pyarrow.parquet")

    path = tmp_path / "data.parquet"
    group = pyarrow.table({"prompt": ["What is 2+2?"] * 200_000, "ground_truth": ["4"] * 200_000})
    with parquet.ParquetWriter(path, group.schema) as writer:
        for _ in range(20):  # 4M rows in a file of a few KB
            writer.write_table(group)
    assert path.stat().st_size < 1024**2
    started = time.perf_counter()
    assert len(load_rows(path, 1)) == 1
    assert time.perf_counter() - started < 10, "before: every row became a dict (GBs, minutes)"


def test_a_saved_dataset_cannot_point_at_another_dataset(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list([{"prompt": "secret question", "ground_truth": "secret"}]).save_to_disk(
        tmp_path / "other"
    )
    datasets.Dataset.from_list([ROW]).save_to_disk(tmp_path / "mine")
    state = json.loads((tmp_path / "mine" / "state.json").read_text())
    other_file = next((tmp_path / "other").glob("*.arrow"))
    state["_data_files"] = [{"filename": str(other_file)}]
    (tmp_path / "mine" / "state.json").write_text(json.dumps(state))
    with pytest.raises(DatasetError, match="not a plain file name inside the folder"):
        load_rows(tmp_path / "mine")


def test_a_deep_line_in_metrics_jsonl_is_skipped(tmp_path):
    (tmp_path / METRICS_FILE).write_bytes(
        b'{"step": 1}\n' + DEEP.encode() + b'\n\xff\xfe\n[1]\n{"step": 2}\n'
    )
    assert [row["step"] for row in RunFolder(tmp_path).metrics()] == [1, 2]


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_deep_tools_config_is_a_config_error(tmp_path, suffix):
    path = tmp_path / f"tools{suffix}"
    path.write_text('{"mcpServers": ' + DEEP + "}")
    with pytest.raises(ConfigError, match="nested too deeply"):
        load_tools_config(path)


def test_invalid_utf8_in_a_tools_config_is_a_config_error(tmp_path):
    path = tmp_path / "tools.yaml"
    path.write_bytes(b"servers: [{name: caf\xe9}]\n")
    with pytest.raises(ConfigError, match="not valid UTF-8"):
        load_tools_config(path)


# -- random bytes to every reader -----------------------------------------------------------------


def read_dataset(path):
    return read_records(path, 10)


def read_saved_dataset(path):
    folder = path.parent / "saved"
    folder.mkdir(exist_ok=True)
    (folder / "state.json").write_bytes(path.read_bytes())
    return read_records(folder, 10)


def read_metrics_file(path):
    path.rename(path.with_name(METRICS_FILE))
    return read_metrics(path.parent)


def read_status(path):
    """job.json: never raises; what cannot be read is state "unknown" with an error naming the file."""
    path.rename(path.with_name(JOB_FILE))
    status = RunFolder(path.parent).status()
    assert isinstance(status, dict) and "state" in status
    assert status["state"] != "unknown" or "error" not in status or JOB_FILE in status["error"]
    return status


def read_trajectories(path):
    folder = path.parent / "trajectories"
    folder.mkdir(exist_ok=True)
    path.rename(folder / "step_000001.jsonl")
    return RunFolder(path.parent).trajectory_records(4)


def read_log(path):
    path.rename(path.with_name(LOG_FILE))
    return RunFolder(path.parent).logs(100)


READERS = [
    (".jsonl", read_dataset, DatasetError),
    (".json", read_dataset, DatasetError),
    (".csv", read_dataset, DatasetError),
    (".parquet", read_dataset, DatasetError),
    (".state", read_saved_dataset, DatasetError),
    (".yaml", load_tools_config, ConfigError),
    (".json", load_tools_config, ConfigError),
    (".metrics", read_metrics_file, ()),
    (".status", read_status, ()),
    (".trajectories", read_trajectories, DatasetError),
    (".log", read_log, ()),
]
CONTENT = st.one_of(
    st.binary(max_size=2000),
    st.text(alphabet='[]{}",:0123456789 \n-ab\\', max_size=2000).map(str.encode),
    st.sampled_from(
        [DEEP.encode(), b"9" * 5000, b'{"a": ' + b"[" * 5000 + b"}", b"PAR1" + b"\x00" * 100 + b"PAR1"]
    ),
)


@pytest.mark.parametrize(
    "suffix, reader, documented", READERS, ids=[f"{r.__name__}{s}" for s, r, _ in READERS]
)
@settings(max_examples=60, deadline=5000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=CONTENT)
def test_random_bytes_raise_only_the_documented_error(tmp_path, suffix, reader, documented, content):
    path = tmp_path / f"input{suffix}"
    path.write_bytes(content)
    try:
        reader(path)
    except documented:
        pass


def test_a_run_config_with_a_nul_byte_is_a_config_error(tmp_path):
    """Found by the random-bytes test of the tools config: YAML's reader raised before the parse."""
    from rlfactory_nb.config import ConfigError, RunConfig

    path = tmp_path / "config.yaml"
    path.write_bytes(b"name: x\x00\n")
    with pytest.raises(ConfigError, match="cannot parse"):
        RunConfig.from_yaml(path)


# -- the run folder's readers on what is not a file (issue #44, finding 7) -------------------------

RUN_FOLDER_READERS = {
    METRICS_FILE: lambda folder: folder.metrics(),
    JOB_FILE: lambda folder: folder.status(),
    LOG_FILE: lambda folder: folder.logs(),
    "trajectories/step_000001.jsonl": lambda folder: folder.trajectory_records(4),
}


@pytest.mark.parametrize("name", list(RUN_FOLDER_READERS))
@pytest.mark.parametrize("kind", ["fifo", "link-out", "dangling-link"])
def test_run_folder_readers_refuse_what_is_not_a_plain_file(tmp_path, name, kind):
    """A FIFO would block `open`; a link would read a file outside the folder. Each reader either
    refuses it with a StorageError naming the file, or (job.json) reports state "unknown" naming it."""
    import os

    outside = tmp_path / "secret"
    outside.write_text('{"step": 1, "state": "running", "id": "leaked"}\n')
    run = tmp_path / "run"
    target = run / name
    target.parent.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(target)
    else:
        os.symlink(outside if kind == "link-out" else tmp_path / "nowhere", target)
    try:
        result = RUN_FOLDER_READERS[name](RunFolder(run))
    except StorageError as error:
        assert name.rsplit("/", 1)[-1] in str(error)
        return
    finally:
        if kind == "fifo":
            try:
                os.close(os.open(target, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
    assert "leaked" not in str(result) and "running" not in str(result)
    if name == JOB_FILE and kind != "dangling-link":
        assert result["state"] == "unknown" and JOB_FILE in result["error"]
