"""Local files read and written as a shared folder requires (docs/security.md): nothing in a run
folder is trusted to be what its name says.

- a key is a plain relative path: one with `..`, a NUL or a backslash is refused, naming it;
- a read opens with `O_NONBLOCK | O_NOFOLLOW`: a symlink, FIFO, socket or device is refused, naming it, and
  a read is bounded (`max_bytes`): a file past its bound is a StorageError, never read whole;
- a write goes to a temporary file made with `O_EXCL | O_NOFOLLOW` under a random name, never
  through a path someone could have planted, then is renamed over its target.

storage.py builds the run folder's backends (local, file://, object stores) on these; checkpoints,
metrics and the reasoning-mode record use them directly.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from rlfactory_nb.errors import StorageError

MAX_READ_BYTES = 64 * 1024 * 1024
"""what a read holds at most unless told otherwise (job.json, pointers, a copied job.log)"""


def check_key(relative: str) -> str:
    """`relative` as a key below a folder ("" for the folder itself), or a StorageError naming it when
    it could resolve elsewhere: a `..` part, a NUL, a backslash.

    >>> check_key("/checkpoints/step_000001/"), check_key(".")
    ('checkpoints/step_000001', '')
    >>> check_key("checkpoints/../../.bashrc")
    Traceback (most recent call last):
    ...
    rlfactory_nb.errors.StorageError: key 'checkpoints/../../.bashrc' would resolve outside its folder; refused
    """
    text = str(relative)
    parts = [part for part in text.strip("/").split("/") if part not in ("", ".")]
    if any(part == ".." for part in parts) or "\x00" in text or "\\" in text:
        raise StorageError(f"key {text!r} would resolve outside its folder; refused")
    return "/".join(parts)


def open_regular(path: str | Path, what: str | None = None) -> IO[bytes]:
    """Open a local file for reading without following a symlink at its last part and without
    blocking on a FIFO (`O_NOFOLLOW | O_NONBLOCK`); anything but a regular file (a socket too, which
    no open() reads) is a StorageError naming `what` (default: the path). FileNotFoundError when
    there is none."""
    what = what or str(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        descriptor = os.open(path, flags)
    except OSError as error:
        if error.errno == errno.ELOOP:  # the last part is a symlink
            raise StorageError(f"{what} is a symbolic link; refused (a run folder's files are read as they are)") from None
        if error.errno == errno.ENXIO:  # a socket, or a device with no driver behind it
            raise StorageError(f"{what} is {_kind_at(path)}, not a regular file; refused") from None
        raise
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(what)
        raise StorageError(f"{what} is {file_kind(mode)}, not a regular file; refused")
    os.set_blocking(descriptor, True)
    return os.fdopen(descriptor, "rb")


def read_regular(path: str | Path, max_bytes: int = MAX_READ_BYTES, what: str | None = None) -> bytes:
    """A local regular file's bytes (`open_regular`), at most `max_bytes` of them: a longer file is a
    StorageError naming it."""
    with open_regular(path, what) as file:
        data = file.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise StorageError(f"{what or path} is larger than {max_bytes:,} bytes; refused")
    return data


def open_append(path: str | Path) -> IO[bytes]:
    """Open a local file for appending (created when missing) without following a symlink or
    blocking on a FIFO; anything but a regular file is a StorageError naming it."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        descriptor = os.open(path, flags, 0o666)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENXIO):  # a symlink; a FIFO without a reader
            raise StorageError(f"{path} is not a regular file; refused") from None
        raise
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        raise StorageError(f"{path} is {file_kind(mode)}, not a regular file; refused")
    os.set_blocking(descriptor, True)
    return os.fdopen(descriptor, "ab")


def write_atomic(target: str | Path, data: bytes | Callable[[IO[bytes]], object]) -> None:
    """Write `target` whole: a temporary file created beside it with `O_CREAT | O_EXCL | O_NOFOLLOW`
    under a random name (so a planted `.NAME.tmp-*` link is never written through, and the file gets
    the usual permissions), then renamed over it. `data`: the bytes, or a function writing them to
    the open file."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    descriptor, name = create_exclusive(target.parent, f".{target.name}.tmp-")
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data) if isinstance(data, bytes) else data(file)
        os.replace(name, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise


def create_exclusive(folder: str | Path, prefix: str) -> tuple[int, Path]:
    """A new file in `folder` named `prefix` + random hex, created with `O_EXCL | O_NOFOLLOW` (it
    cannot be anything that was there before) and mode 0666 less the umask; (descriptor, path)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        path = Path(folder) / f"{prefix}{secrets.token_hex(8)}"
        try:
            return os.open(path, flags, 0o666), path
        except FileExistsError:
            continue
    raise StorageError(f"{folder}: could not create a temporary file {prefix}* (100 names taken)")


def walk_files(folder: Path) -> Iterator[Path]:
    """Every regular file below `folder`, links not followed; a link, FIFO or device is a StorageError."""
    for path in folder.rglob("*"):
        mode = path.lstat().st_mode
        if stat.S_ISREG(mode):
            yield path
        elif not stat.S_ISDIR(mode):
            raise StorageError(f"{path} is {file_kind(mode)}; only regular files and folders are uploaded")


def _kind_at(path: str | Path) -> str:
    try:
        return file_kind(os.lstat(path).st_mode)
    except OSError:
        return "a special file"


def file_kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a directory" if stat.S_ISDIR(mode) else "a regular file"
