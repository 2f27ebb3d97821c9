"""Tool-result cache: an in-memory LRU, optionally backed by sqlite for record and replay, and
optionally by a second tier that every process of a job shares.

During GRPO the same question is rolled out `group_size` times and the samples often make the same
call; answering repeats from memory saves the tool round trip. With a `path`, every result is also
recorded on disk, so a run's tool outputs can be replayed later, exactly, without the servers: for
debugging a reward on the very samples that produced it, and for reproducible evaluation.

The key is the tool's qualified name plus the canonical JSON of the arguments (sorted keys, no
whitespace), so `{"a": 1, "b": 2}` and `{"b": 2, "a": 1}` are one entry:

>>> cache = ToolCache()
>>> cache.put("calc.calculator", {"expression": "1+1"}, Recorded("ok", "2"))
>>> cache.get("calc.calculator", {"expression": "1+1"})
Recorded(status='ok', content='2', details=None, length=None)
>>> cache.get("calc.calculator", {"expression": "2+2"}) is None
True
>>> (cache.hits, cache.misses)
(1, 1)

Where rollouts run in more than one process (or node), each has its own LRU, and a call one process
made is a miss in the others. A `shared` tier (`SharedCache`; cluster/tool_cache.py puts one Ray
actor behind it) answers those: the LRU is asked first, the shared tier only on a local miss, and a
result goes to both. The tier then owns the sqlite record (one writer per file), so a cache with a
shared tier hands its `path` to the tier and keeps none open itself.

Bounds. The LRU holds at most `max_entries` entries *and* `max_bytes` of text (64 MiB by default): a
tool that returns megabytes no longer fills memory with output the model never reads (the issue's
probe was shown 0.8 MiB while the cache held 200 MiB). With `max_content_chars` (the ToolSet passes
its `max_result_chars`) an entry keeps only the start the model can read, in memory and on disk,
and `Recorded.length` remembers how long the whole text was, for the truncation marker.

The record file is read as untrusted: a file that is not a readable sqlite record (damaged, another
format, a FIFO, the wrong table) is treated as empty, with one warning, and calls run; a row whose
status or content is not text of the expected kind is a miss; text is read at most
`max_content_chars` (else 4 Mi) characters at a time, so a planted row cannot return bytes or
fill memory.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

_SCHEMA = """CREATE TABLE IF NOT EXISTS tool_results (
    key TEXT PRIMARY KEY, tool TEXT NOT NULL, arguments TEXT NOT NULL,
    status TEXT NOT NULL, content TEXT NOT NULL, recorded_at REAL NOT NULL, length INTEGER)"""
_STATUSES = frozenset({"ok", "error", "timeout", "invalid_args", "unknown_tool"})
DEFAULT_MAX_BYTES = 64 << 20
"""the in-memory LRU's byte budget (keys, texts and details), whatever its entry count"""
_MAX_READ_CHARS = 4 << 20
"""the most characters of one recorded text read back when the cache keeps whole texts"""
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recorded:
    """A cached outcome: the status and the full (untruncated) text of one call."""

    status: str
    content: str
    details: dict[str, Any] | None = None
    """the call's `ToolResult.details`, kept in memory only: the sqlite file records what the model
    read, so a replayed result has none"""
    length: int | None = None
    """the whole text's length when `content` keeps only its start (`ToolCache.max_content_chars`);
    None: `content` is whole"""

    @property
    def full_length(self) -> int:
        return len(self.content) if self.length is None else self.length


def cache_key(tool: str, arguments: Mapping[str, Any]) -> str:
    """`tool` + canonical JSON of `arguments`."""
    return tool + "\x00" + json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class SharedCache(Protocol):
    """A second cache tier shared by every process of a job, behind each process's LRU (a Ray
    actor: cluster/tool_cache.py). It never raises: a tier that cannot be reached answers None and
    drops what it is given, so a rollout never fails for its sake."""

    def open(self, record_path: Path | None) -> None:
        """Called once by the ToolCache that uses the tier, with the sqlite file to record results in
        (None: memory only). The tier is that file's one writer."""

    async def get(self, key: str) -> Recorded | None:
        """The outcome stored under `key` (`cache_key`), or None."""

    def put(self, key: str, outcome: Recorded) -> None:
        """Store `outcome` (no `details`: like the sqlite record, the tier keeps what the model read);
        sent without waiting for the tier."""


class ToolCache:
    """LRU of tool results, plus an optional sqlite file that records them for replay and an optional
    shared tier (see the module docstring). `path` is the shared tier's to write when there is one."""

    def __init__(
        self,
        max_entries: int = 4096,
        path: str | Path | None = None,
        shared: SharedCache | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_content_chars: int | None = None,
    ):
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_content_chars = max_content_chars
        self.bytes = 0
        """what the in-memory entries hold now (UTF-8 bytes of keys, texts and details)"""
        self.path = Path(path) if path is not None else None
        self.shared = shared
        self.local_hits = 0
        """lookups answered by this process: its LRU or its sqlite file (or a call in flight here)"""
        self.shared_hits = 0
        """lookups answered by the shared tier after a local miss"""
        self.misses = 0
        """lookups no tier could answer"""
        self._memory: OrderedDict[str, tuple[Recorded, int]] = OrderedDict()
        self._lock = threading.Lock()  # sync twins may reach the cache from several threads
        self._warned = False
        self._db = self._open(self.path) if self.path is not None and shared is None else None
        if shared is not None:
            shared.open(self.path)

    @property
    def hits(self) -> int:
        return self.local_hits + self.shared_hits

    def get(self, tool: str, arguments: Mapping[str, Any]) -> Recorded | None:
        """This process's tiers only (memory, then the sqlite file): never waits. After a miss, a
        cache with a shared tier is asked again with `get_shared`."""
        return self.get_key(cache_key(tool, arguments))

    def get_key(self, key: str) -> Recorded | None:
        """`get` by `cache_key`."""
        with self._lock:
            entry = self._memory.get(key)
            found = entry[0] if entry is not None else None
            if found is None and self._db is not None:
                found = self._read(key)
                if found is not None:
                    self._remember(key, found)
            elif found is not None:
                self._memory.move_to_end(key)
            if found is None:
                self.misses += 1
            else:
                self.local_hits += 1
            return found

    async def get_shared(self, tool: str, arguments: Mapping[str, Any]) -> Recorded | None:
        """The shared tier's outcome after `get` missed (None without a tier): a hit is kept in
        memory here and counts as a shared hit instead of that miss."""
        if self.shared is None:
            return None
        key = cache_key(tool, arguments)
        found = await self.shared.get(key)
        if found is not None:
            with self._lock:
                self._remember(key, found)
                self.misses -= 1
                self.shared_hits += 1
        return found

    def put(self, tool: str, arguments: Mapping[str, Any], outcome: Recorded) -> None:
        """Store in memory, in the sqlite file, and in the shared tier (without `details`)."""
        self.put_key(cache_key(tool, arguments), outcome)

    def put_key(self, key: str, outcome: Recorded) -> None:
        """`put` by `cache_key`."""
        outcome = self._cut(outcome)
        with self._lock:
            self._remember(key, outcome)
            if self._db is not None:
                row = (key, *key.split("\x00", 1), outcome.status, outcome.content, time.time(), outcome.length)
                try:
                    self._db.execute("INSERT OR REPLACE INTO tool_results VALUES (?, ?, ?, ?, ?, ?, ?)", row)
                    self._db.commit()
                except sqlite3.Error as exc:
                    self._give_up_file(f"cannot be written ({exc})")
        if self.shared is not None:
            self.shared.put(key, Recorded(outcome.status, outcome.content, None, outcome.length))

    def count_hit(self) -> None:
        """A call answered without a tool round trip by another means (a shared in-flight call)."""
        with self._lock:
            self.local_hits += 1

    def stats(self) -> dict[str, int]:
        return {
            "hits": self.hits,
            "local_hits": self.local_hits,
            "shared_hits": self.shared_hits,
            "misses": self.misses,
            "entries": len(self._memory),
        }

    def clear(self) -> None:
        """Forget the in-memory entries and the counters (the file on disk and the shared tier stay)."""
        with self._lock:
            self._memory.clear()
            self.bytes = 0
            self.local_hits = self.shared_hits = self.misses = 0

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def __len__(self) -> int:
        return len(self._memory)

    def _remember(self, key: str, outcome: Recorded) -> None:
        """Keep `outcome` as the most recent entry, then drop the oldest while the cache holds more
        than `max_entries` or `max_bytes`; an entry over the whole budget is not kept."""
        old = self._memory.pop(key, None)
        if old is not None:
            self.bytes -= old[1]
        size = _size(key, outcome)
        if size > self.max_bytes:
            return
        self._memory[key] = (outcome, size)
        self.bytes += size
        while len(self._memory) > self.max_entries or self.bytes > self.max_bytes:
            self.bytes -= self._memory.popitem(last=False)[1][1]

    def _cut(self, outcome: Recorded) -> Recorded:
        """`outcome` with at most `max_content_chars` of its text, and the whole text's length."""
        limit = self.max_content_chars
        if limit is None or len(outcome.content) <= limit:
            return outcome
        return Recorded(outcome.status, outcome.content[:limit], outcome.details, outcome.full_length)

    def _read(self, key: str) -> Recorded | None:
        """The record file's row for `key`, checked: text status and content of the expected kinds,
        at most `max_content_chars` (else `_MAX_READ_CHARS`) characters; else None."""
        assert self._db is not None
        limit = self.max_content_chars or _MAX_READ_CHARS
        try:
            row = self._db.execute(
                "SELECT status, typeof(content), substr(content, 1, ?), length(content), length "
                "FROM tool_results WHERE key = ?",
                (limit, key),
            ).fetchone()
        except sqlite3.Error as exc:
            self._give_up_file(f"cannot be read ({exc})")
            return None
        if row is None:
            return None
        status, kind, content, length, recorded_length = row
        if status not in _STATUSES or kind != "text" or not isinstance(content, str):
            self._warn(f"a row of the tool record {self.path} is not a recorded result; it is ignored")
            return None
        whole = recorded_length if isinstance(recorded_length, int) and recorded_length > length else length
        return Recorded(status, content, None, whole if whole > len(content) else None)

    def _give_up_file(self, why: str) -> None:
        """Stop using the record file for the rest of this cache's life; warn once."""
        self._warn(f"the tool record {self.path} {why}; it is treated as empty and calls run")
        if self._db is not None:
            self._db.close()
            self._db = None

    def _warn(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            log.warning(message)

    def _open(self, path: Path) -> sqlite3.Connection | None:
        """The record file, made when absent; None (one warning) when it is not a usable record."""
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            if path.exists() and not stat.S_ISREG(os.stat(path).st_mode):
                raise sqlite3.DatabaseError("not a regular file")
            db = sqlite3.connect(path, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            self._warn(f"the tool record {path} cannot be opened ({exc}); it is treated as empty and calls run")
            return None
        try:
            db.execute("PRAGMA journal_mode=WAL")  # readers (a replaying notebook) do not block the writer
            db.execute(_SCHEMA)
            columns = {row[1] for row in db.execute("PRAGMA table_info(tool_results)")}
            if "length" not in columns:  # a record written before the column existed
                db.execute("ALTER TABLE tool_results ADD COLUMN length INTEGER")
            db.commit()
        except sqlite3.Error as exc:
            db.close()
            self._warn(f"the tool record {path} is not a usable record ({exc}); it is treated as empty and calls run")
            return None
        return db


def _size(key: str, outcome: Recorded) -> int:
    """An entry's bytes as the budget counts them: UTF-8 key and text, and the details as JSON."""
    details = len(json.dumps(outcome.details, default=str)) if outcome.details else 0
    return len(key.encode()) + len(outcome.content.encode("utf-8", "surrogatepass")) + details + 64
