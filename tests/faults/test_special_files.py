"""Issue #50, item 7: a run folder on storage (`file://`) whose files are not regular files. Every
reader of a run folder (a resume's `pull`, `upload_for`, the job's metrics, logs and status, the
trajectory readers, `Storage`'s reads) finishes at once, and refuses the special file with a
StorageError that names it; none blocks, and none raises a bare OSError.

Before: a socket, or a device with no driver behind it, at metrics.jsonl or job.log made
`RunFolder.metrics()`, `.logs()` and `Storage.read_bytes` raise a bare `OSError(6, 'No such device
or address')` naming nothing. FIFOs were refused already (test_run_storage_hostile.py); they are
walked through the same readers here, each in a thread with a deadline, so a reader that blocks
fails the test instead of hanging it.
"""

from __future__ import annotations

import os
import socket
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from rlfactory_nb.errors import StorageError
from rlfactory_nb.train.run_folder import JOB_FILE, LOG_FILE, METRICS_FILE, RunFolder, trajectory_file
from rlfactory_nb.train.run_storage import RunUpload, upload_for

from .conftest import finishes

pytestmark = pytest.mark.timeout(120)
UNUSED_DEVICE = os.makedev(240, 0)
"""a character device number reserved for local use: no driver answers it, so open() gives ENXIO"""


@pytest.fixture
def plant(tmp_path):
    """plant(path, kind): a FIFO, a listening socket or a driverless device at `path`; released after."""
    sockets, fifos = [], []

    def make(path: Path, kind: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind == "FIFO":
            os.mkfifo(path)
            fifos.append(path)
        elif kind == "socket":
            server = socket.socket(socket.AF_UNIX)
            short = Path(tempfile.mkdtemp(prefix="rf-sock-")) / "s"  # a socket path is limited to 107 bytes
            server.bind(str(short))
            server.listen()
            short.rename(path)  # the bound socket file moves; xdist's tmp paths are longer than the limit
            short.parent.rmdir()
            sockets.append(server)
        else:
            try:
                os.mknod(path, 0o600 | stat.S_IFCHR, UNUSED_DEVICE)
            except PermissionError:
                pytest.skip("making a device file needs CAP_MKNOD")

    yield make
    for server in sockets:
        server.close()
    for path in fifos:  # release any reader still blocked in open()
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass


def readers(location: str, local: Path) -> dict[str, Callable[[], object]]:
    """Every way a run folder's files are read from storage (`load_trajectories` only when step 1's
    file is there: a missing one is its FileNotFoundError)."""
    folder = RunFolder(location)
    return {
        "pull": lambda: RunUpload(local, folder.store).pull(),
        "metrics": folder.metrics,
        "logs": folder.logs,
        "status": folder.status,
        "trajectory_records": lambda: folder.trajectory_records(4),
        "load_trajectories": lambda: folder.store.exists(trajectory_file(1)) and folder.load_trajectories(1),
        **{f"read_bytes {name}": (lambda n=name: folder.store.read_bytes(n)) for name in PLANTED},
        **{f"tail {name}": (lambda n=name: folder.store.tail(n, 1024)) for name in PLANTED},
    }


PLANTED = (METRICS_FILE, LOG_FILE, JOB_FILE, trajectory_file(1))
KINDS = ("FIFO", "socket", "device")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", PLANTED)
def test_no_reader_of_a_stored_run_blocks_or_fails_bare_on_a_special_file(tmp_path, plant, kind, name):
    shared = tmp_path / "shared" / "run"
    plant(shared / name, kind)
    for reader, read in readers(f"file://{shared}", tmp_path / "local").items():
        done, result = finishes(read)
        assert done, f"{reader} blocked on {name}, {kind}"
        if isinstance(result, BaseException):
            assert isinstance(result, StorageError), f"{reader}: {result!r}"
            assert name in str(result) and kind in str(result), f"{reader}: {result}"
        if reader == f"read_bytes {name}" or (reader == "pull" and name != trajectory_file(1)):
            assert isinstance(result, StorageError), f"{reader} read {name}, {kind}, without refusing it"
        if reader == "status" and name == JOB_FILE:
            assert f"{name} is a {kind}" in result["error"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_resume_of_a_file_uri_run_with_a_special_metrics_file_is_refused_naming_it(make_cfg, tmp_path, plant, kind):
    """`train_sync(cfg, resume=True)`'s first step for a run on storage (`upload_for`): refused at
    once, the file and its kind named."""
    cfg = make_cfg().replace({"output_dir": f"file://{tmp_path / 'shared'}"})
    plant(Path(RunFolder(cfg.run_dir).store.root) / METRICS_FILE, kind)
    done, result = finishes(lambda: upload_for(cfg, resume=True))
    assert done, f"the resume blocked on a {kind} metrics.jsonl"
    assert isinstance(result, StorageError) and f"{METRICS_FILE} is a {kind}" in str(result)
