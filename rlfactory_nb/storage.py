"""Where a run lives: a local folder, or a storage URI that every node of a cluster can reach.

    runs/calc                          a local path, exactly as always
    file:///shared/nfs/runs/calc       a file system every node mounts
    s3://bucket/runs/calc  gs://...    object storage, through fsspec (install s3fs or gcsfs)

`Storage.at(location)` reads and writes files under one location, whichever it is; paths inside it
are relative and use "/". Writes are whole: a reader sees the old file or the new one, never half
(a local file is written beside and renamed; an object store's put is atomic). A folder uploaded with
`put_folder` gets the file named `last` written last, so a reader that asks for it (a checkpoint's
trainer_state.pt, models/checkpoint.py) never takes half a folder for a whole one.

`local_copy(uri)` (node_cache.py) gives a local folder for one on storage, downloaded into this
node's cache.

A run folder is shared, so nothing in it is trusted to be what its name says (docs/security.md; the
local file rules live in local_files.py):
- a key is a plain relative path: one with `..`, a NUL or an empty part is refused, naming it, and
  so is a listed name that would resolve outside its folder (an object-store key `a/../../x`);
- a symlink, FIFO, socket or device where a file or folder is read is refused, naming the key; a local
  read never follows a link out of the folder, and opens with `O_NONBLOCK | O_NOFOLLOW`;
- reads are bounded (`max_bytes`); a file past its bound is a StorageError, never read whole;
- a local write goes to a temporary file made with `O_EXCL` under a random name (`mkstemp`),
  never through a path someone could have planted, then is renamed over its target.

>>> store = Storage.at("memory://doc/run")
>>> store.write_text("job.json", '{"state": "running"}')
>>> store.read_text("job.json"), store.read_text("missing.json")
('{"state": "running"}', None)
>>> store.list("."), str(store)
(['job.json'], 'memory://doc/run')
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from rlfactory_nb.errors import StorageError
from rlfactory_nb.local_files import (
    MAX_READ_BYTES,
    check_key,
    file_kind,
    open_regular,
    walk_files,
    write_atomic,
)

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
_STAMP_KEYS = ("ETag", "etag", "md5Hash", "crc32c", "mtime", "LastModified", "last_modified", "updated", "created")
"""fields of an fsspec listing that change when an object is written again (the first found is used)"""


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
        relative = check_key(relative)
        return self.root if not relative else f"{self.root}/{relative}"

    def _local_path(self, relative: str) -> str:
        """The local path of `relative`, checked: no folder on the way there is a link out of the
        run folder (the last part is checked when it is opened)."""
        path = self._path(relative)
        parent = os.path.realpath(os.path.dirname(path)) if path != self.root else os.path.realpath(path)
        root = os.path.realpath(self.root)
        if parent != root and not parent.startswith(root.rstrip("/") + "/"):
            raise StorageError(f"{self.uri(relative)}: a folder on its path is a link out of {self.location}; refused")
        return path

    def uri(self, relative: str = "") -> str | Path:
        """The location of `relative`, as a user names it (a URI, or a local Path)."""
        relative = check_key(relative)
        return join(self.location, *([relative] if relative else []))

    # ------------------------------------------------------------------ reading

    def exists(self, relative: str) -> bool:
        if self.local:
            return os.path.lexists(self._local_path(relative))
        return bool(self.fs.exists(self._path(relative)))

    def isdir(self, relative: str) -> bool:
        if self.local:
            path = self._local_path(relative)
            return os.path.isdir(path) and not os.path.islink(path)
        return bool(self.fs.isdir(self._path(relative)))

    @contextlib.contextmanager
    def open(self, relative: str) -> Iterator[IO[bytes]]:
        """The file `relative`, open for reading in binary; FileNotFoundError when there is none. A
        symlink, FIFO or device is a StorageError naming it (module docstring)."""
        if self.local:
            with open_regular(self._local_path(relative), str(self.uri(relative))) as file:
                yield file
            return
        path = self._path(relative)
        info = self.fs.info(path)
        if info.get("type") == "directory":
            raise IsADirectoryError(str(self.uri(relative)))
        if info.get("type") not in ("file", None):
            raise StorageError(f"{self.uri(relative)} is a {info.get('type')}, not a file; refused")
        with self.fs.open(path, "rb") as file:
            yield file

    def read_bytes(self, relative: str, max_bytes: int = MAX_READ_BYTES) -> bytes | None:
        """The file's bytes, or None when there is none; a file past `max_bytes` is a StorageError."""
        try:
            with self.open(relative) as file:
                data = file.read(max_bytes + 1)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        if len(data) > max_bytes:
            raise StorageError(f"{self.uri(relative)} is larger than {max_bytes:,} bytes; refused")
        return data

    def read_text(self, relative: str, max_bytes: int = MAX_READ_BYTES) -> str | None:
        data = self.read_bytes(relative, max_bytes)
        return None if data is None else data.decode("utf-8", errors="replace")

    def tail(self, relative: str, max_bytes: int) -> bytes:
        """The last `max_bytes` of the file (empty when there is none)."""
        try:
            with self.open(relative) as file:
                size = file.seek(0, io.SEEK_END)
                file.seek(max(0, size - max_bytes))
                return file.read(max_bytes)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return b""

    def list(self, relative: str) -> list[str]:
        """Names directly under the folder `relative`, sorted (empty when there is no such folder).
        A name that is not one plain path part (`..`, an object key's `a/../b`) is a StorageError."""
        return sorted(name for name, _, _ in self._entries(relative))

    def _entries(self, relative: str) -> list[tuple[str, str, dict[str, Any]]]:
        """(name, kind, listing entry) under the folder `relative`; kind is "file" or "directory",
        anything else (a link, a FIFO, a device) is a StorageError naming it. The folder the user
        named (`relative` empty) may itself be a link; nothing below it may."""
        path = self._path(relative) if not self.local else self._local_path(relative)
        if self.local and check_key(relative) and os.path.islink(path):
            raise StorageError(f"{self.uri(relative)} is a symbolic link; refused")
        try:
            entries = self.fs.ls(path, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return []
        found = []
        for entry in entries:
            name = str(entry["name"]).rstrip("/").rsplit("/", 1)[-1]
            key = f"{check_key(relative)}/{name}".strip("/")
            if name in ("", ".", "..") or "\x00" in name or "\\" in name:
                raise StorageError(f"key {str(entry['name'])!r} under {self.location} would resolve outside its folder; refused")
            kind = "link" if entry.get("islink") else str(entry.get("type", "file"))
            if self.local and kind == "other":
                kind = file_kind(os.lstat(os.path.join(path, name)).st_mode)
            if kind not in ("file", "directory"):
                raise StorageError(f"{self.uri(key)} is {_article(kind)}, not a file or folder; refused")
            found.append((name, kind, entry))
        return found

    def files(self, relative: str = "") -> dict[str, tuple[int, str]]:
        """Every file below the folder `relative`, by key relative to it: (size, stamp), where the
        stamp changes when the file is written again (an ETag or a modification time, from the
        listing itself: no request per file)."""
        found: dict[str, tuple[int, str]] = {}
        base = check_key(relative)
        for name, kind, entry in self._entries(relative):
            if kind == "directory":
                found.update({f"{name}/{inner}": stamp for inner, stamp in self.files(f"{base}/{name}").items()})
                continue
            if self.local:
                status = os.lstat(self._local_path(f"{base}/{name}"))
                found[name] = (status.st_size, str(status.st_mtime_ns))
            else:
                stamp = next((entry[k] for k in _STAMP_KEYS if entry.get(k)), "")
                found[name] = (int(entry.get("size") or 0), str(stamp))
        return found

    def get_folder(self, relative: str, destination: str | Path) -> Path:
        """Download the folder `relative` into `destination` (created); returns it. Every name is
        checked (`list`), so nothing lands outside `destination`, and no link is followed."""
        destination = Path(destination)
        destination.mkdir(parents=True, exist_ok=True)
        base = check_key(relative)
        for name, kind, _ in self._entries(relative):
            source = f"{base}/{name}".strip("/")
            if kind == "directory":
                self.get_folder(source, destination / name)
            else:
                self.get_file(source, destination / name)
        return destination

    def get_file(self, relative: str, destination: str | Path) -> Path:
        """Download the file `relative` to `destination`, streamed and written whole (`open`'s checks)."""
        with self.open(relative) as file:
            write_atomic(destination, lambda out: shutil.copyfileobj(file, out, 1 << 20))
        return Path(destination)

    # ------------------------------------------------------------------ writing

    def write_bytes(self, relative: str, data: bytes) -> None:
        """Write the whole file at once (a reader sees the old or the new one, never half)."""
        if self.local:
            write_atomic(self._local_path(relative), data)
            return
        self.fs.pipe_file(self._path(relative), data)

    def write_text(self, relative: str, text: str) -> None:
        self.write_bytes(relative, text.encode("utf-8"))

    def put_file(self, source: str | Path, relative: str) -> None:
        """Upload the local file `source` (a regular file: a link or FIFO is refused) to `relative`."""
        with open_regular(source) as file:
            if self.local:  # streamed: weights are large
                write_atomic(self._local_path(relative), lambda out: shutil.copyfileobj(file, out, 1 << 20))
                return
        self.fs.put_file(str(source), self._path(relative))

    def put_folder(self, source: str | Path, relative: str, last: Iterable[str] = ()) -> None:
        """Upload the local folder `source` to `relative`, the files named in `last` after the rest.
        A link or FIFO inside it is refused, naming it (nothing is followed)."""
        source = Path(source)
        files = sorted(walk_files(source))
        late = set(last)
        for file in [f for f in files if f.name not in late] + [f for f in files if f.name in late]:
            self.put_file(file, f"{check_key(relative)}/{file.relative_to(source).as_posix()}")

    def remove(self, relative: str) -> None:
        """Delete the file or folder `relative` (nothing when it is not there; a link itself, not
        what it points at)."""
        if self.local:  # not fsspec's rm: it reads the working directory, which a Ray worker may have lost
            path = Path(self._local_path(relative))
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            return
        path = self._path(relative)
        if self.fs.exists(path):
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


def _article(kind: str) -> str:
    return kind if kind.startswith("a ") else {"link": "a symbolic link"}.get(kind, f"a {kind}")


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
