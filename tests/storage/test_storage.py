"""storage.py: one way to read and write a run, on a local path, a file:// URI and an object store
(fsspec's memory:// stands in for s3:// here: no put can append or rename there either)."""

from __future__ import annotations

import uuid
from pathlib import Path

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from rlfactory_nb.errors import StorageError
from rlfactory_nb.node_cache import COMPLETE, cache_root, local_copy
from rlfactory_nb.storage import Storage


@pytest.fixture(params=["path", "file", "memory"])
def location(request, tmp_path) -> str | Path:
    if request.param == "path":
        return tmp_path / "run"
    if request.param == "file":
        return f"file://{tmp_path}/run"
    return f"memory://{uuid.uuid4().hex}/run"


def test_reads_what_it_wrote_on_every_backend(location, tmp_path):
    store = Storage.at(location)
    assert store.read_text("job.json") is None and store.list("checkpoints") == [] and not store.exists("")
    store.write_text("job.json", '{"state": "running"}')
    store.write_text("job.json", '{"state": "finished"}')  # replaced whole
    assert store.read_text("job.json") == '{"state": "finished"}'
    store.write_bytes("job.log", b"line 1\nline 2\nline 3\n")
    assert store.tail("job.log", 7) == b"line 3\n" and store.tail("missing.log", 7) == b""
    assert store.list(".") == ["job.json", "job.log"]

    folder = tmp_path / "step_000002"
    (folder / "sub").mkdir(parents=True)
    for name, data in {"model.safetensors": b"w" * 1000, "trainer_state.pt": b"s", "sub/x.json": b"{}"}.items():
        (folder / name).write_bytes(data)
    store.put_folder(folder, "checkpoints/step_000002", last=("trainer_state.pt",))
    assert store.list("checkpoints/step_000002") == ["model.safetensors", "sub", "trainer_state.pt"]
    copy = store.get_folder("checkpoints/step_000002", tmp_path / "back")
    assert (copy / "model.safetensors").read_bytes() == b"w" * 1000 and (copy / "sub" / "x.json").read_bytes() == b"{}"
    store.remove("checkpoints/step_000002")
    assert not store.exists("checkpoints/step_000002")


def test_put_folder_writes_the_completing_file_last(tmp_path):
    """A reader takes a checkpoint as whole once trainer_state.pt is there: it must come last."""
    order = []

    class Recording(MemoryFileSystem):
        protocol = "recordingmem"

        def put_file(self, lpath, rpath, **kwargs):
            order.append(Path(rpath).name)
            return super().put_file(lpath, rpath, **kwargs)

    fsspec.register_implementation("recordingmem", Recording, clobber=True)
    for name in ("trainer_state.pt", "a.safetensors", "z.json"):
        (tmp_path / name).write_bytes(b"x")
    Storage.at(f"recordingmem://{uuid.uuid4().hex}").put_folder(tmp_path, "ckpt", last=("trainer_state.pt",))
    assert order[-1] == "trainer_state.pt" and sorted(order) == ["a.safetensors", "trainer_state.pt", "z.json"]


def test_probe_names_the_location_and_what_failed(tmp_path):
    Storage.at(f"file://{tmp_path}/ok").probe()  # created, written, read, deleted
    assert list((tmp_path / "ok").iterdir()) == []

    with pytest.raises(StorageError, match=r"output_dir file:///proc/rlfactory-runs: could not create the folder"):
        Storage.at("file:///proc/rlfactory-runs").probe()  # not writable, even for root

    class ReadOnly(MemoryFileSystem):
        protocol = "readonlymem"

        def pipe_file(self, path, value, **kwargs):
            raise PermissionError(13, "Permission denied", path)

    fsspec.register_implementation("readonlymem", ReadOnly, clobber=True)
    with pytest.raises(StorageError, match=r"readonlymem://bucket/runs: could not write a file there: it is read-only"):
        Storage.at("readonlymem://bucket/runs").probe()

    class NoCredentials(MemoryFileSystem):
        protocol = "nocredsmem"

        def pipe_file(self, path, value, **kwargs):
            raise OSError("Unable to locate credentials")

    fsspec.register_implementation("nocredsmem", NoCredentials, clobber=True)
    with pytest.raises(StorageError, match="no credentials were found"):
        Storage.at("nocredsmem://bucket/runs").probe()


def test_an_unknown_or_uninstalled_backend_is_named():
    with pytest.raises(StorageError, match=r"nosuchproto://x.*use a local path, file://, s3:// or gs://"):
        Storage.at("nosuchproto://x/runs")
    try:
        import gcsfs  # noqa: F401
    except ImportError:
        with pytest.raises(StorageError, match=r"gs://bucket/runs: reading gs:// needs gcsfs \(pip install gcsfs\)"):
            Storage.at("gs://bucket/runs")


def test_local_copy_downloads_once_and_refetches_a_changed_or_cut_copy(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("RLFACTORY_NB_CACHE", raising=False)
    uri = f"memory://{uuid.uuid4().hex}/ckpt"
    store = Storage.at(uri)
    store.write_bytes("config.json", b"{}")
    assert local_copy(tmp_path) == tmp_path and local_copy(f"file://{tmp_path}") == tmp_path  # local: as is
    downloads = []
    copy = local_copy(uri, log=downloads.append)
    assert copy.is_relative_to(tmp_path / "cache" / "rlfactory_nb") and (copy / "config.json").read_bytes() == b"{}"
    assert [path.name for path in copy.iterdir()] == ["config.json"]  # nothing added inside (checkpoint digests)
    assert local_copy(uri, log=downloads.append) == copy and len(downloads) == 1  # unchanged: reused
    store.write_bytes("config.json", b'{"changed": 1}')  # written again (a new run under the same name)
    assert (local_copy(uri, log=downloads.append) / "config.json").read_bytes() == b'{"changed": 1}'
    copy.with_name(copy.name + COMPLETE).unlink()  # a copy cut short
    assert (local_copy(uri, log=downloads.append) / "config.json").read_bytes() == b'{"changed": 1}'
    assert len(downloads) == 3
    with pytest.raises(StorageError, match="no such folder"):
        local_copy(f"memory://{uuid.uuid4().hex}/missing")


def test_the_cache_folder_honours_rlfactory_nb_cache(tmp_path, monkeypatch):
    """One cache-folder function (issue #40 item 6): storage copies, presets and the NL2SQL database."""
    from rlfactory_nb.models.presets import cache_dir as presets_cache
    from rlfactory_nb.node_cache import package_cache
    from rlfactory_nb.recipes.nl2sql.database import cache_dir as nl2sql_cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("RLFACTORY_NB_CACHE", str(tmp_path / "mine"))
    assert package_cache() == presets_cache() == nl2sql_cache() == tmp_path / "mine"
    assert cache_root().is_relative_to(tmp_path / "mine")
    monkeypatch.delenv("RLFACTORY_NB_CACHE")
    assert package_cache() == presets_cache() == nl2sql_cache() == tmp_path / "xdg" / "rlfactory_nb"


def test_launch_refuses_a_storage_uri_it_cannot_write_before_anything_starts(tmp_path):
    """Bad input (issue #31): an unreachable, read-only or credential-less output_dir is refused at
    launch, naming it, before Ray is joined or anything is shipped."""
    import ray

    from rlfactory_nb.cluster import launch
    from rlfactory_nb.config import RunConfig

    cfg = RunConfig(name="nowhere", output_dir="file:///proc/rlfactory-runs")
    with pytest.raises(StorageError, match=r"output_dir file:///proc/rlfactory-runs/nowhere: could not create the folder"):
        launch(cfg, tools=None)
    assert not ray.is_initialized()
