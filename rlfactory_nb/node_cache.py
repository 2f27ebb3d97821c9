"""The package's cache on this node, and local copies of folders on storage.

`package_cache()` is the one place that decides where the package caches (presets, the NL2SQL
database, storage copies). `local_copy(uri)` gives a local folder for one on storage (a checkpoint or
a model that transformers must open from disk), downloaded into this node's cache and reused while
the source's listing (every file's size and modification time or ETag, `Storage.files`) is the one it
was copied from.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from rlfactory_nb.errors import StorageError
from rlfactory_nb.local_files import read_regular, write_atomic
from rlfactory_nb.storage import Storage, is_uri

COMPLETE = ".complete"
"""the suffix of the file written beside a local copy once it is whole (not inside it: a checkpoint's
digests list every file it holds); it lists the source files the copy was made from"""


def package_cache() -> Path:
    """The package's cache folder on this node: `$RLFACTORY_NB_CACHE`, else `$XDG_CACHE_HOME/rlfactory_nb`,
    else `~/.cache/rlfactory_nb`. The one place that decides it (presets, the NL2SQL database and
    storage copies all live below it)."""
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rlfactory_nb"
    return Path(os.environ.get("RLFACTORY_NB_CACHE") or default)


def cache_root() -> Path:
    """Where `local_copy` keeps what it downloads."""
    return package_cache() / "storage"


def local_copy(location: str | Path, log: Any = None) -> Path:
    """A local folder holding what `location` holds: the folder itself when it is local (a path or a
    file:// URI), else a copy in this node's cache. The copy is reused while the source lists the
    same files with the same sizes and stamps (`Storage.files`); otherwise (a copy taken mid-upload,
    a new run under the same name) it is fetched again."""
    if not is_uri(location):
        return Path(location)
    store = Storage.at(location)
    if store.local:
        return Path(store.root)
    source = {key: list(stamp) for key, stamp in store.files("").items()}
    if not source:
        raise StorageError(f"{location}: no such folder on storage (or an empty one)")
    folder = cache_root() / hashlib.sha256(str(location).rstrip("/").encode()).hexdigest()[:24]
    marker = folder.with_name(folder.name + COMPLETE)
    if folder.is_dir() and _copied_from(marker) == source:
        return folder
    if log is not None:
        log(f"downloading {location} to {folder}")
    partial = Path(tempfile.mkdtemp(prefix=".partial-", dir=_ensure(folder.parent)))
    try:
        store.get_folder("", partial)
        marker.unlink(missing_ok=True)
        if folder.exists():
            shutil.rmtree(folder)
        partial.rename(folder)
        write_atomic(marker, json.dumps({"location": str(location), "files": source}).encode())
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return folder


def _copied_from(marker: Path) -> dict[str, Any] | None:
    """The source listing a complete local copy was made from (None: no copy, or an unreadable mark)."""
    try:
        return json.loads(read_regular(marker, 64 * 1024 * 1024)).get("files")
    except (OSError, ValueError, RecursionError, AttributeError):
        return None


def _ensure(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder
