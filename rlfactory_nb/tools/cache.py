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
Recorded(status='ok', content='2', details=None)
>>> cache.get("calc.calculator", {"expression": "2+2"}) is None
True
>>> (cache.hits, cache.misses)
(1, 1)

Where rollouts run in more than one process (or node), each has its own LRU, and a call one process
made is a miss in the others. A `shared` tier (`SharedCache`; cluster/tool_cache.py puts one Ray
actor behind it) answers those: the LRU is asked first, the shared tier only on a local miss, and a
result goes to both. The tier then owns the sqlite record (one writer per file), so a cache with a
shared tier hands its `path` to the tier and keeps none open itself.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

_SCHEMA = """CREATE TABLE IF NOT EXISTS tool_results (
    key TEXT PRIMARY KEY, tool TEXT NOT NULL, arguments TEXT NOT NULL,
    status TEXT NOT NULL, content TEXT NOT NULL, recorded_at REAL NOT NULL)"""


@dataclass(frozen=True)
class Recorded:
    """A cached outcome: the status and the full (untruncated) text of one call."""

    status: str
    content: str
    details: dict[str, Any] | None = None
    """the call's `ToolResult.details`, kept in memory only: the sqlite file records what the model
    read, so a replayed result has none"""


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
        self, max_entries: int = 4096, path: str | Path | None = None, shared: SharedCache | None = None
    ):
        self.max_entries = max_entries
        self.path = Path(path) if path is not None else None
        self.shared = shared
        self.local_hits = 0
        """lookups answered by this process: its LRU or its sqlite file (or a call in flight here)"""
        self.shared_hits = 0
        """lookups answered by the shared tier after a local miss"""
        self.misses = 0
        """lookups no tier could answer"""
        self._memory: OrderedDict[str, Recorded] = OrderedDict()
        self._lock = threading.Lock()  # sync twins may reach the cache from several threads
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
            found = self._memory.get(key)
            if found is None and self._db is not None:
                row = self._db.execute(
                    "SELECT status, content FROM tool_results WHERE key = ?", (key,)
                ).fetchone()
                found = Recorded(*row) if row else None
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
        with self._lock:
            self._remember(key, outcome)
            if self._db is not None:
                self._db.execute(
                    "INSERT OR REPLACE INTO tool_results VALUES (?, ?, ?, ?, ?, ?)",
                    (key, *key.split("\x00", 1), outcome.status, outcome.content, time.time()),
                )
                self._db.commit()
        if self.shared is not None:
            self.shared.put(key, Recorded(outcome.status, outcome.content))

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
            self.local_hits = self.shared_hits = self.misses = 0

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def __len__(self) -> int:
        return len(self._memory)

    def _remember(self, key: str, outcome: Recorded) -> None:
        self._memory[key] = outcome
        self._memory.move_to_end(key)
        while len(self._memory) > self.max_entries:
            self._memory.popitem(last=False)

    @staticmethod
    def _open(path: Path) -> sqlite3.Connection:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")  # readers (a replaying notebook) do not block the writer
        db.execute(_SCHEMA)
        db.commit()
        return db
