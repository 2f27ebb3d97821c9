"""Issue #44, findings 1, 2, 3, 6, 7, 13 and 14: run storage, stored runs and run-folder readers
against a shared folder or bucket that someone else can write. Each test failed on the code before
the fix (said in its docstring); the promises are listed in docs/security.md ("Run storage").

fsspec's memory:// stands in for an object store (keys may hold `..` there, as on S3); file:// and
plain paths are real folders with real symlinks and FIFOs.
"""

from __future__ import annotations

import json
import os
import tempfile
import tracemalloc
import uuid
from pathlib import Path

import pytest
from tiny_models import random_qwen3

from rlfactory_nb.errors import CheckpointError, DatasetError, RunExistsError, StorageError
from rlfactory_nb.models.checkpoint import CHECKPOINTS, TRAINER_STATE, load_latest, save_checkpoint
from rlfactory_nb.node_cache import local_copy
from rlfactory_nb.storage import Storage
from rlfactory_nb.train.run_folder import JOB_FILE, LOG_FILE, METRICS_FILE, RunFolder
from rlfactory_nb.train.run_storage import RunUpload, upload_for
from rlfactory_nb.types import Trajectory, save_jsonl

from .conftest import finishes

pytestmark = pytest.mark.timeout(300)
SECRET = b"-----BEGIN OPENSSH PRIVATE KEY----- not for the shared folder"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.delenv("RLFACTORY_NB_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "deep" / "er" / "cache"))
    return tmp_path / "deep" / "er" / "cache"


def memory_uri(path: str = "run") -> str:
    return f"memory://{uuid.uuid4().hex}/{path}"


@pytest.fixture
def fifo(tmp_path):
    made = []

    def make(path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(path)
        made.append(path)
        return path

    yield make
    for path in made:  # release any reader still blocked in open()
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass


# -- finding 1: keys with `..` ----------------------------------------------------------------------


def test_a_stored_key_with_dotdot_is_refused_and_writes_nothing_outside(tmp_path, cache):
    """Before: `local_copy` (Policy.load of a storage URI, compare through job.json's model, a resume)
    wrote `escaped` six folders above its copy."""
    uri = memory_uri("runs/x/checkpoints/step_000001")
    store = Storage.at(uri)
    store.write_bytes("config.json", b"{}")
    store.fs.pipe_file(f"{store.root}/sub/../../../../../../escaped", b"planted")
    with pytest.raises(StorageError, match=r"sub/\.\.. under .* would resolve outside its folder"):
        local_copy(uri)
    assert not [path for path in tmp_path.rglob("escaped")]


def test_a_resume_refuses_a_dotdot_key_in_the_stored_run(tmp_path):
    store = Storage.at(memory_uri())
    store.write_bytes(METRICS_FILE, b'{"step": 1}\n')
    store.fs.pipe_file(f"{store.root}/code/../../../../escaped.py", b"import os")
    with pytest.raises(StorageError, match="would resolve outside its folder"):
        RunUpload(tmp_path / "a" / "b" / "local", store).pull()
    assert not [path for path in tmp_path.rglob("escaped.py")]


@pytest.mark.parametrize("key", ["../x", "a/../../x", "a/\x00b", "a\\..\\x"])
def test_a_key_given_to_storage_cannot_leave_its_folder(tmp_path, key):
    store = Storage.at(tmp_path / "run")
    for operation in (lambda: store.write_bytes(key, b"x"), lambda: store.read_bytes(key), lambda: store.remove(key)):
        with pytest.raises(StorageError, match="would resolve outside its folder"):
            operation()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# -- finding 2: planted temporary names ------------------------------------------------------------


def plant_temporary_links(folder: Path, name: str, victim: Path) -> None:
    """Links at every temporary name the old writers used (`.NAME.tmp-<pid>` of this process)."""
    folder.mkdir(parents=True, exist_ok=True)
    os.symlink(victim, folder / f".{name}.tmp-{os.getpid()}")


def test_a_planted_temporary_link_does_not_redirect_job_json(tmp_path):
    """Before: the driver's job.json write went through the link and overwrote the victim."""
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious")
    run = tmp_path / "run"
    plant_temporary_links(run, JOB_FILE, victim)
    RunFolder(run).write_status(state="running", step=1)
    assert victim.read_bytes() == b"precious"
    assert not (run / JOB_FILE).is_symlink() and RunFolder(run).status()["state"] == "running"


def test_a_planted_temporary_link_does_not_redirect_an_upload(tmp_path):
    """Before: the trainer's upload to a file:// run wrote the victim through the link."""
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious")
    shared = tmp_path / "shared" / "run"
    plant_temporary_links(shared, METRICS_FILE, victim)
    local = tmp_path / "local"
    local.mkdir()
    (local / METRICS_FILE).write_text('{"step": 1}\n')
    RunUpload(local, Storage.at(f"file://{shared}")).push()
    assert victim.read_bytes() == b"precious" and (shared / METRICS_FILE).read_text() == '{"step": 1}\n'


def test_planted_temporary_links_do_not_fail_or_redirect_a_checkpoint(tmp_path, make_cfg):
    """Before: a link at `.tmp-step_000001-<pid>` made every save fail (mkdir: File exists)."""
    from rlfactory_nb.models.presets.tokenizer import build_tokenizer

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious")
    root = tmp_path / "run" / CHECKPOINTS
    root.mkdir(parents=True)
    os.symlink(elsewhere, root / f".tmp-step_000001-{os.getpid()}")
    os.symlink(victim, root / f".latest.tmp-{os.getpid()}")
    saved = save_checkpoint(tmp_path / "run", 1, random_qwen3(), build_tokenizer(), {})
    assert load_latest(tmp_path / "run").path == saved.path and (saved.path / TRAINER_STATE).is_file()
    assert victim.read_bytes() == b"precious" and list(elsewhere.iterdir()) == []
    (tmp_path / "linked").mkdir()
    os.symlink(elsewhere, tmp_path / "linked" / CHECKPOINTS)
    with pytest.raises(CheckpointError, match="symbolic link"):
        save_checkpoint(tmp_path / "linked", 1, random_qwen3(), None, {})
    assert list(elsewhere.iterdir()) == []


# -- finding 3: reads through symlinks -------------------------------------------------------------


def test_a_file_uri_run_never_reads_through_a_link(tmp_path):
    """Before: a resume of a file:// run read job.log and metrics.jsonl through links to a private
    key, and the upload then wrote the key into the shared folder as a plain file."""
    secret = tmp_path / "id_ed25519"
    secret.write_bytes(SECRET)
    shared = tmp_path / "shared" / "run"
    shared.mkdir(parents=True)
    os.symlink(secret, shared / LOG_FILE)
    os.symlink(secret, shared / METRICS_FILE)
    store = Storage.at(f"file://{shared}")
    with pytest.raises(StorageError, match=f"{LOG_FILE} is a symbolic link"):
        store.read_bytes(LOG_FILE)
    with pytest.raises(StorageError, match=METRICS_FILE):
        RunUpload(tmp_path / "local", store).pull()
    assert not any(SECRET in p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink() and p != secret)


def test_a_linked_folder_in_a_run_is_not_followed(tmp_path):
    private = tmp_path / "private"
    private.mkdir()
    (private / "key").write_bytes(SECRET)
    shared = tmp_path / "shared" / "run"
    shared.mkdir(parents=True)
    os.symlink(private, shared / "code")
    store = Storage.at(f"file://{shared}")
    with pytest.raises(StorageError, match="link"):
        store.read_bytes("code/key")
    with pytest.raises(StorageError, match="symbolic link"):
        store.get_folder("", tmp_path / "copy")
    assert not (tmp_path / "copy" / "code" / "key").exists()


# -- finding 6: an incomplete `latest` on storage --------------------------------------------------


def stored_checkpoint(store: Storage, name: str, complete: bool) -> None:
    store.write_bytes(f"{CHECKPOINTS}/{name}/model.safetensors", b"w")
    if complete:
        store.write_bytes(f"{CHECKPOINTS}/{name}/{TRAINER_STATE}", b"s")


def test_a_resume_falls_back_to_the_newest_complete_stored_checkpoint(tmp_path):
    """Before: `pull` found `latest` incomplete and returned None, so the run restarted at step 1 over
    the stored run and pruning deleted the complete checkpoint."""
    store = Storage.at(memory_uri())
    store.write_bytes(METRICS_FILE, b'{"step": 1}\n{"step": 2}\n')
    stored_checkpoint(store, "step_000001", complete=True)
    stored_checkpoint(store, "step_000002", complete=False)
    store.write_text(f"{CHECKPOINTS}/latest", "step_000002\n")
    local = tmp_path / "local"
    assert RunUpload(local, store).pull() == 1
    assert (local / CHECKPOINTS / "latest").read_text().strip() == "step_000001"
    assert (local / CHECKPOINTS / "step_000001" / TRAINER_STATE).is_file()


def test_a_resume_over_checkpoints_none_complete_is_refused(tmp_path):
    store = Storage.at(memory_uri())
    stored_checkpoint(store, "step_000003", complete=False)
    store.write_text(f"{CHECKPOINTS}/latest", "step_000003\n")
    with pytest.raises(RunExistsError, match="none is complete.*replace=True"):
        RunUpload(tmp_path / "local", store).pull()


def test_a_new_run_is_never_started_over_a_stored_run(make_cfg):
    """Before: `train(cfg)` without resume on a stored run trained from step 1 over it."""
    uri = memory_uri("runs")
    cfg = make_cfg().replace({"output_dir": uri})
    Storage.at(cfg.run_dir).write_bytes(METRICS_FILE, b'{"step": 1}\n')
    with pytest.raises(RunExistsError, match="already holds a run.*replace=True"):
        upload_for(cfg, resume=False)
    upload = upload_for(cfg, resume=False, replace=True)
    assert not Storage.at(cfg.run_dir).exists(METRICS_FILE)
    upload.discard()


@pytest.mark.slow
def test_a_stored_run_with_an_incomplete_latest_resumes_and_leaves_no_staging(make_cfg):
    """Findings 6 and 14 end to end: two steps on storage, the second checkpoint cut short there; the
    resume continues from step 1 (trains steps 2 and 3, not 1 to 3), and neither run leaves its
    local folder in $TMPDIR (before: one per run and per resume, checkpoints included)."""
    from rlfactory_nb.train.loop import train_sync

    cfg = make_cfg(grpo__checkpoint_every=1, grpo__keep_last=2).replace({"output_dir": memory_uri("runs")})
    before = set(Path(tempfile.gettempdir()).glob("rlfactory-nb-*"))
    train_sync(cfg)
    store = Storage.at(cfg.run_dir)
    store.remove(f"{CHECKPOINTS}/step_000002/{TRAINER_STATE}")  # latest still names step 2
    steps = []
    resumed = train_sync(cfg.replace({"grpo.steps": 3}), resume=True, on_step=lambda row: steps.append(row["step"]))
    assert steps == [2, 3] and resumed.step == 3
    assert [row["step"] for row in RunFolder(cfg.run_dir).metrics()] == [1, 2, 3]
    assert set(Path(tempfile.gettempdir()).glob("rlfactory-nb-*")) == before


# -- finding 7: hostile files for the readers ------------------------------------------------------


@pytest.mark.parametrize("name", [JOB_FILE, LOG_FILE, METRICS_FILE])
def test_a_fifo_in_the_run_folder_does_not_hang_attach(tmp_path, fifo, name):
    """Before: `TrainingJob.attach(...).status`, `.logs()` and `.metrics()` blocked forever."""
    from rlfactory_nb.cluster.jobs import TrainingJob

    run = tmp_path / "runs" / "x"
    if name != JOB_FILE:
        RunFolder(run).write_status(state="finished", step=1)
    fifo(run / name)
    job = TrainingJob.attach("x", output_dir=tmp_path / "runs")
    for read in (lambda: job.status, job.logs, job.metrics, job.info):
        done, result = finishes(read)
        assert done, f"reading {name} hung"
        if isinstance(result, BaseException):
            assert isinstance(result, StorageError) and "FIFO" in str(result) and name in str(result)
    if name == JOB_FILE:
        assert job.status == "unknown" and f"{name} is a FIFO" in job.info()["error"]


def test_a_fifo_metrics_file_does_not_hang_a_resume(tmp_path, fifo):
    from rlfactory_nb.train.metrics import MetricsWriter

    fifo(tmp_path / METRICS_FILE)
    done, result = finishes(lambda: MetricsWriter(tmp_path, tensorboard=False).truncate_after(0))
    assert done and isinstance(result, StorageError) and METRICS_FILE in str(result)


def test_deep_json_is_an_error_naming_the_file(tmp_path):
    """Before: a bare RecursionError from job.json and from a trajectory file."""
    deep = "[" * 100_000 + "]" * 100_000
    run = RunFolder(tmp_path)
    (tmp_path / JOB_FILE).write_text(deep)
    status = run.status()
    assert status["state"] == "unknown" and JOB_FILE in status["error"] and "nested too deeply" in status["error"]
    (tmp_path / "trajectories").mkdir()
    (tmp_path / "trajectories" / "step_000001.jsonl").write_text(deep + "\n")
    with pytest.raises(DatasetError, match=r"step_000001\.jsonl:1: JSON nested too deeply"):
        run.trajectory_records(4)


def test_a_huge_trajectory_file_is_streamed(tmp_path):
    """Before: the whole file was read and decoded (2.5x its size in memory)."""
    path = save_jsonl([Trajectory([1], id=f"t{i}") for i in range(3)], tmp_path / "trajectories" / "step_000001.jsonl")
    with path.open("r+b") as file:
        file.truncate(path.stat().st_size + 200 * 1024**2)  # a sparse 200 MiB line of NULs after them
    tracemalloc.start()
    records = RunFolder(tmp_path).trajectory_records(8)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert [record["id"] for record in records] == ["t0", "t1", "t2"]
    assert peak < 96 * 1024**2, f"peak {peak:,} bytes (a few lines of MAX_LINE_BYTES at most)"


def test_an_oversized_job_json_is_not_read_whole(tmp_path):
    (tmp_path / JOB_FILE).write_bytes(b'{"state": "running", "pad": "' + b"x" * (4 * 1024**2) + b'"}')
    status = RunFolder(tmp_path).status()
    assert status["state"] == "unknown" and "larger than" in status["error"]


# -- finding 13: local copies refreshed ------------------------------------------------------------


def test_a_local_copy_taken_mid_upload_is_refreshed(cache):
    """Before: the first copy was kept for ever: one taken mid-upload lacked trainer_state.pt, and a
    new run under the same name served the old run's weights."""
    uri = memory_uri("runs/x/checkpoints/step_000001")
    store = Storage.at(uri)
    store.write_bytes("model.safetensors", b"old weights")
    first = local_copy(uri)
    assert not (first / TRAINER_STATE).exists()
    store.write_bytes(TRAINER_STATE, b"state")  # the upload finishes
    assert (local_copy(uri) / TRAINER_STATE).read_bytes() == b"state"
    store.remove("")
    store.write_bytes("model.safetensors", b"new weights")  # a new run under the same name
    assert (local_copy(uri) / "model.safetensors").read_bytes() == b"new weights"
    assert not (local_copy(uri) / TRAINER_STATE).exists()
    assert json.loads(first.with_name(first.name + ".complete").read_text())["location"] == uri


def test_a_linked_checkpoint_folder_is_not_a_checkpoint_of_the_run(tmp_path):
    """A `checkpoints/step_*` link (or a linked `checkpoints/`) would make the run serve, and a resume
    load, another folder's weights."""
    elsewhere = tmp_path / "elsewhere" / "step_000009"
    elsewhere.mkdir(parents=True)
    (elsewhere / TRAINER_STATE).write_bytes(b"s")
    run = tmp_path / "run"
    (run / CHECKPOINTS).mkdir(parents=True)
    os.symlink(elsewhere, run / CHECKPOINTS / "step_000009")
    (run / CHECKPOINTS / "latest").write_text("step_000009\n")
    assert RunFolder(run).checkpoints() == []
    with pytest.raises(CheckpointError, match="symbolic link"):
        load_latest(run)
    other = tmp_path / "other"
    other.mkdir()
    os.symlink(elsewhere.parent, other / CHECKPOINTS, target_is_directory=True)
    with pytest.raises(StorageError, match="not a folder"):
        RunFolder(other).checkpoints()


@pytest.mark.parametrize("name", [LOG_FILE, METRICS_FILE])
def test_a_fifo_in_a_stored_run_does_not_hang_its_resume(tmp_path, fifo, name):
    """Before: a resume of a file:// run blocked for ever in `pull` (and the driver in copying job.log)."""
    from rlfactory_nb.cluster.driver import _previous_log

    shared = tmp_path / "shared" / "run"
    fifo(shared / name)
    store = Storage.at(f"file://{shared}")
    done, result = finishes(lambda: RunUpload(tmp_path / "local", store).pull())
    assert done and isinstance(result, StorageError) and f"{name} is a FIFO" in str(result)
    done, result = finishes(lambda: _previous_log(RunFolder(f"file://{shared}")))
    assert done and isinstance(result, bytes) and (name != LOG_FILE or b"was not copied" in result)
