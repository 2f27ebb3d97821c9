"""Where a run lives: a local folder, or a storage URI that every node of a cluster can reach.

    runs/calc                          a local path, exactly as always
    file:///shared/nfs/runs/calc       a file system every node mounts
    s3://bucket/runs/calc  gs://...    object storage, through fsspec (install s3fs or gcsfs)

`Storage.at(location)` reads and writes files under one location, whichever it is; paths inside it
are relative and use "/". Writes are whole: a reader sees the old file or the new one, never half
(a local file is written beside and renamed; an object store's put is atomic). A folder uploaded with
`put_folder` gets the file named `last` written last, so a reader that asks for it (a checkpoint's
trainer_state.pt, models/checkpoint.py) never takes half a folder for a whole one.

`local_copy(uri)` gives a local folder for one on storage (a checkpoint or a model that
transformers must open from disk), downloaded once per node into the cache and reused.

>>> store = Storage.at("memory://doc/run")
>>> store.write_text("job.json", '{"state": "running"}')
>>> store.read_text("job.json"), store.read_text("missing.json")
('{"state": "running"}', None)
>>> store.list("."), str(store)
(['job.json'], 'memory://doc/run')
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rlfactory_nb.errors import StorageError

_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_BACKENDS = {
    "s3": "s3fs",
    "s3a": "s3fs",
    "gs": "gcsfs",
    "gcs": "gcsfs",
    "az": "adlfs",
    "abfs": "adlfs",
    "hdfs": "pyarrow",
}
"""the package fsspec needs for a protocol, named in the error when it is missing"""
COMPLETE = ".complete"
"""the suffix of the file written beside a local copy once it is whole (not inside it: a checkpoint's
digests list every file it holds); a copy without one was cut short and is fetched again"""


def is_uri(location: str | Path) -> bool:
    """Whether `location` names storage by URI (`scheme://...`) rather than a local path.

    >>> is_uri("s3://bucket/runs"), is_uri("file:///nfs/runs"), is_uri("runs/calc"), is_uri(Path("/tmp"))
    (True, True, False, False)
    """
    return isinstance(location, str) and bool(_URI.match(location))


def join(location: str | Path, *parts: str) -> str | Path:
    """`location` / parts: a URI stays a string, a path stays a Path.

    >>> join("s3://b/runs/", "calc", "job.json"), join(Path("runs"), "calc")
    ('s3://b/runs/calc/job.json', PosixPath('runs/calc'))
    """
    if is_uri(location):
        return "/".join([str(location).rstrip("/"), *(p.strip("/") for p in parts)])
    return Path(location).joinpath(*parts)


def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rlfactory_nb" / "storage"


class Storage:
    """Files under one location (module docstring). `Storage.at` builds one; `probe` checks it can
    be written, with an error naming the location and what failed."""

    def __init__(self, location: str | Path, fs: Any, root: str):
        self.location = location
        self.fs = fs
        self.root = root.rstrip("/") or "/"

    @classmethod
    def at(cls, location: str | Path) -> Storage:
        if not is_uri(location):
            from fsspec.implementations.local import LocalFileSystem

            return cls(Path(location), LocalFileSystem(), str(Path(location).expanduser().resolve()))
        try:
            from fsspec.core import url_to_fs

            fs, root = url_to_fs(str(location))
        except ImportError as error:
            protocol = str(location).split("://", 1)[0]
            package = _BACKENDS.get(protocol, f"the fsspec backend for {protocol}://")
            raise StorageError(
                f"output_dir {location}: reading {protocol}:// needs {package} (pip install {package})"
            ) from error
        except ValueError as error:  # fsspec: "Protocol not known"
            raise StorageError(
                f"output_dir {location}: {error}; use a local path, file://, s3:// or gs://"
            ) from error
        return cls(str(location), fs, root)

    @property
    def local(self) -> bool:
        return "file" in _protocols(self.fs)

    def __str__(self) -> str:
        return str(self.location)

    def __repr__(self) -> str:
        return f"Storage({str(self.location)!r})"

    def _path(self, relative: str) -> str:
        relative = relative.strip("/")
        return self.root if relative in ("", ".") else f"{self.root}/{relative}"

    def uri(self, relative: str = "") -> str | Path:
        """The location of `relative`, as a user names it (a URI, or a local Path)."""
        relative = relative.strip("/")
        return join(self.location, *([relative] if relative and relative != "." else []))

    # ------------------------------------------------------------------ reading

    def exists(self, relative: str) -> bool:
        return bool(self.fs.exists(self._path(relative)))

    def isdir(self, relative: str) -> bool:
        return bool(self.fs.isdir(self._path(relative)))

    def read_bytes(self, relative: str) -> bytes | None:
        """The file's bytes, or None when there is none."""
        try:
            return self.fs.cat_file(self._path(relative))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    def read_text(self, relative: str) -> str | None:
        data = self.read_bytes(relative)
        return None if data is None else data.decode("utf-8", errors="replace")

    def tail(self, relative: str, max_bytes: int) -> bytes:
        """The last `max_bytes` of the file (empty when there is none)."""
        try:
            size = self.fs.size(self._path(relative))
            with self.fs.open(self._path(relative), "rb") as file:
                file.seek(max(0, size - max_bytes))
                return file.read()
        except (FileNotFoundError, IsADirectoryError):
            return b""

    def list(self, relative: str) -> list[str]:
        """Names directly under the folder `relative`, sorted (empty when there is no such folder)."""
        try:
            entries = self.fs.ls(self._path(relative), detail=False)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted({str(entry).rstrip("/").rsplit("/", 1)[-1] for entry in entries})

    def get_folder(self, relative: str, destination: str | Path) -> Path:
        """Download the folder `relative` into `destination` (created); returns it."""
        destination = Path(destination)
        destination.mkdir(parents=True, exist_ok=True)
        for name in self.list(relative):
            source = f"{relative.strip('/')}/{name}"
            if self.isdir(source):
                self.get_folder(source, destination / name)
            else:
                self.fs.get_file(self._path(source), str(destination / name))
        return destination

    # ------------------------------------------------------------------ writing

    def write_bytes(self, relative: str, data: bytes) -> None:
        """Write the whole file at once (a reader sees the old or the new one, never half)."""
        path = self._path(relative)
        if self.local:
            _write_beside(Path(path), lambda temporary: temporary.write_bytes(data))
            return
        self.fs.pipe_file(path, data)

    def write_text(self, relative: str, text: str) -> None:
        self.write_bytes(relative, text.encode("utf-8"))

    def put_file(self, source: str | Path, relative: str) -> None:
        path = self._path(relative)
        if self.local:  # streamed: weights are large
            _write_beside(Path(path), lambda temporary: shutil.copyfile(source, temporary))
            return
        self.fs.put_file(str(source), path)

    def put_folder(self, source: str | Path, relative: str, last: Iterable[str] = ()) -> None:
        """Upload the local folder `source` to `relative`, the files named in `last` after the rest."""
        source = Path(source)
        files = sorted(p for p in source.rglob("*") if p.is_file())
        late = set(last)
        for file in [f for f in files if f.name not in late] + [f for f in files if f.name in late]:
            self.put_file(file, f"{relative.strip('/')}/{file.relative_to(source).as_posix()}")

    def remove(self, relative: str) -> None:
        """Delete the file or folder `relative` (nothing when it is not there)."""
        path = self._path(relative)
        if self.local:  # not fsspec's rm: it reads the working directory, which a Ray worker may have lost
            shutil.rmtree(path, ignore_errors=True) if Path(path).is_dir() else Path(path).unlink(missing_ok=True)
        elif self.fs.exists(path):
            self.fs.rm(path, recursive=True)

    def probe(self) -> None:
        """Write, read back and delete a small file here; StorageError naming the location and the
        step that failed (unreachable, read-only, no credentials) instead of a failure at the first
        checkpoint."""
        name = f".probe-{os.getpid()}-{time.time_ns()}"
        step = "create the folder"
        try:
            if self.local:
                Path(self.root).mkdir(parents=True, exist_ok=True)
            step = "write a file"
            self.write_bytes(name, b"rlfactory-nb")
            step = "read it back"
            if self.read_bytes(name) != b"rlfactory-nb":
                raise OSError("the file read back differs from the one written")
            step = "delete it"
            self.remove(name)
        except StorageError:
            raise
        except Exception as error:
            raise StorageError(_probe_failure(self.location, step, error)) from error


def local_copy(location: str | Path, log: Any = None) -> Path:
    """A local folder holding what `location` holds: the folder itself when it is local (a path or a
    file:// URI), else a copy in this node's cache, downloaded once (a copy cut short is fetched
    again). For checkpoints and models, which never change once written."""
    if not is_uri(location):
        return Path(location)
    store = Storage.at(location)
    if store.local:
        return Path(store.root)
    folder = cache_root() / hashlib.sha256(str(location).rstrip("/").encode()).hexdigest()[:24]
    marker = folder.with_name(folder.name + COMPLETE)
    if marker.exists() and folder.is_dir():
        return folder
    if not store.exists(""):
        raise StorageError(f"{location}: no such folder on storage")
    if log is not None:
        log(f"downloading {location} to {folder}")
    partial = Path(tempfile.mkdtemp(prefix=".partial-", dir=_ensure(folder.parent)))
    try:
        store.get_folder("", partial)
        marker.unlink(missing_ok=True)
        if folder.exists():
            shutil.rmtree(folder)
        partial.rename(folder)
        marker.write_text(str(location), encoding="utf-8")
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return folder


def _write_beside(target: Path, write: Callable[[Path], object]) -> None:
    """`write` a temporary file beside `target`, then rename it over `target`: whole or not at all."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    write(temporary)
    os.replace(temporary, target)


def _ensure(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _protocols(fs: Any) -> tuple[str, ...]:
    protocol = fs.protocol
    return tuple(protocol) if isinstance(protocol, (tuple, list)) else (protocol,)


def _probe_failure(location: str | Path, step: str, error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    lowered = text.lower()
    if (
        isinstance(error, PermissionError)
        or "read-only" in lowered
        or "permission" in lowered
        or "denied" in lowered
    ):
        why = "it is read-only for this user"
    elif "credential" in lowered or "nocredentials" in lowered or "token" in lowered or "auth" in lowered:
        why = (
            "no credentials were found (set the backend's environment variables or config, e.g. AWS_PROFILE)"
        )
    else:
        why = "it is unreachable from this node"
    return f"output_dir {location}: could not {step} there: {why} ({text})"
