"""Removing a sandbox run's folder, whatever the snippet left in it.

The snippet decides the tree's shape, so removal must not depend on it: `shutil.rmtree` recurses once
per level (a 3,000-deep chain raised RecursionError, in Python 3.11) and a path-based walk fails past
PATH_MAX. Here every folder is emptied through a descriptor: its files are unlinked and its subfolders
renamed to the top of the tree, to be emptied in turn, so the work list stays flat, at most two folders
are open at once, and no path grows. Nothing is followed: entries are opened with O_NOFOLLOW and
symlinks are unlinked like files. The server calls this in a worker thread, never on its event loop.
"""

from __future__ import annotations

import fcntl
import os
import stat
import struct
import sys
from collections.abc import Callable

_FS_IOC_GETFLAGS, _FS_IOC_SETFLAGS = 0x80086601, 0x40086602
_FS_IMMUTABLE_FL, _FS_APPEND_FL = 0x10, 0x20
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MOVED = ".rlf-remove-{}"


def remove(folder: str) -> None:
    """Delete `folder` and everything beneath it. Never raises: what resists (an immutable file the
    flags could not be cleared on, say) is reported on stderr and left."""
    try:
        top = os.open(folder, _FOLDER)
    except FileNotFoundError:
        return
    except OSError as error:
        _report(folder, error)
        return
    errors: list[OSError] = []
    try:
        moved = _Renamer(top, {entry.name for entry in os.scandir(top)})
        pending = [_empty(top, None, moved, errors)]
        while pending:
            for name in pending.pop():
                pending.append(_empty(top, name, moved, errors))
                _retry(lambda name=name: os.rmdir(name, dir_fd=top), top, name, errors)
    except OSError as error:
        errors.append(error)
    finally:
        os.close(top)
    _retry(lambda: os.rmdir(folder), None, folder, errors)
    if errors:
        _report(folder, errors[0], len(errors))


class _Renamer:
    """Fresh names at the top of the tree for subfolders moved there (none the snippet left)."""

    def __init__(self, top: int, taken: set[str]):
        self.top, self.taken, self.count = top, taken, 0

    def move(self, parent: int, name: str) -> str:
        while _MOVED.format(self.count) in self.taken:
            self.count += 1
        target = _MOVED.format(self.count)
        os.rename(name, target, src_dir_fd=parent, dst_dir_fd=self.top)
        self.taken.add(target)
        return target


def _empty(top: int, name: str | None, moved: _Renamer, errors: list[OSError]) -> list[str]:
    """Unlink the files of `name` (a folder at the top; None: the top itself) and return its
    subfolders' names at the top, moving them there when they were deeper."""
    if name is None:
        folder = top
    else:
        try:
            folder = os.open(name, _FOLDER, dir_fd=top)
        except OSError as error:
            errors.append(error)
            return []
    subfolders = []
    try:
        for entry in list(os.scandir(folder)):
            if not entry.is_dir(follow_symlinks=False):
                _retry(lambda entry=entry: os.unlink(entry.name, dir_fd=folder), folder, entry.name, errors)
            elif name is None:
                subfolders.append(entry.name)
            else:
                try:
                    subfolders.append(_retry_raising(lambda entry=entry: moved.move(folder, entry.name), folder, entry.name))
                except OSError as error:
                    errors.append(error)
    except OSError as error:
        errors.append(error)
    finally:
        if folder != top:
            os.close(folder)
    return subfolders


def _retry(action: Callable[[], object], folder: int | None, name: str, errors: list[OSError]) -> None:
    try:
        _retry_raising(action, folder, name)
    except FileNotFoundError:
        pass
    except OSError as error:
        errors.append(error)


def _retry_raising(action: Callable[[], object], folder: int | None, name: str):
    """Run `action`; where the kernel refuses it (EPERM: an immutable or append-only file or folder,
    which a snippet can set only without confinement), clear those flags on the entry and on its
    folder and run it once more."""
    try:
        return action()
    except PermissionError:
        _clear_flags(name, folder)
        if folder is not None:
            _clear_flags(".", folder)
        return action()


def _clear_flags(name: str, folder: int | None) -> None:
    try:
        # O_NONBLOCK: a fifo must not block the open
        descriptor = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
    except OSError:
        return
    try:
        mode = os.fstat(descriptor).st_mode
        if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
            (flags,) = struct.unpack("i", fcntl.ioctl(descriptor, _FS_IOC_GETFLAGS, bytes(4)))
            cleared = flags & ~(_FS_IMMUTABLE_FL | _FS_APPEND_FL)
            if cleared != flags:
                fcntl.ioctl(descriptor, _FS_IOC_SETFLAGS, struct.pack("i", cleared))
    except OSError:
        pass
    finally:
        os.close(descriptor)


def _report(folder: str, error: BaseException, count: int = 1) -> None:
    more = f" (and {count - 1} more)" if count > 1 else ""
    print(f"python_sandbox: could not remove {folder}: {error}{more}", file=sys.stderr, flush=True)
