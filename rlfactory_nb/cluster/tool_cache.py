"""One tool cache for the whole job: a Ray actor behind every rollout process's in-process LRU.

During GRPO a group's samples repeat each other's tool calls; the ToolSet answers repeats from its
LRU (tools/cache.py). Where a job's rollouts run in more than one process (the driver and a kernel's
`job.stepper()`, or several rollout processes on several nodes), a call one process made is a miss in
the others. `SharedToolCache(run_name)` is the job's second tier: one named actor per run, found
by every process that asks for it (`get_if_exists`), holding an LRU and, when the tools settings
give a `cache_path`, the sqlite record file, which it alone writes:

    rollout process A: ToolSet -> LRU --miss--> ToolCacheActor("rlfactory-nb-tool-cache:<run>")
    rollout process B: ToolSet -> LRU --miss-->   LRU + sqlite record (one writer)

Put `cache_path` inside the run folder (`runs/<name>/tool_cache.sqlite`) so the record travels with
the run's other files. A relative path is made absolute in the process that first opens the tier.

What it costs: one actor round trip per local miss (lookups arriving in the same event-loop turn go
in one batch), and a put sent without waiting. While the actor starts (seconds), lookups are misses
rather than waits. What it never does is fail a rollout: an actor that
died or stops answering is logged once, and the process goes on with its own LRU.

Lifetime: the actor belongs to the process that created it (the training driver, normally first),
takes no CPU (`num_cpus=0`), and is placed on that process's node when it can be (soft affinity).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlfactory_nb.cluster.names import NAMESPACE
from rlfactory_nb.tools.cache import Recorded, ToolCache

log = logging.getLogger(__name__)

TOOL_CACHE_PREFIX = "rlfactory-nb-tool-cache:"
"""the job's cache actor is called TOOL_CACHE_PREFIX + run name; not a prefix of JOB_PREFIX's names"""
MAX_ENTRIES = 65536
"""results the actor keeps in memory (the sqlite record keeps all of them)"""
TIMEOUT_S = 30.0
"""how long a lookup waits for the started actor before the process gives up on the shared tier"""


class ToolCacheActor:
    """The job's shared tier: a ToolCache (an LRU, plus the sqlite record when given a path), read
    and written one call at a time (a plain actor: the file has one writer, and no lock is needed)."""

    def __init__(self, max_entries: int, record_path: str | None):
        self.cache = ToolCache(max_entries=max_entries, path=record_path)

    def get_many(self, keys: Sequence[str]) -> list[Recorded | None]:
        return [self.cache.get_key(key) for key in keys]

    def put(self, key: str, outcome: Recorded) -> None:
        self.cache.put_key(key, outcome)

    def stats(self) -> dict[str, Any]:
        return {**self.cache.stats(), "record_path": str(self.cache.path) if self.cache.path else None}


class SharedToolCache:
    """The run's shared tool cache tier (tools/cache.py's `SharedCache`) over its ToolCacheActor, for
    `Trainer(..., shared_tool_cache=...)` or `Runtime.from_config(..., shared_cache=...)`. The actor
    starts (or is found) when a ToolSet opens the tier, recording to the tools settings'
    `cache_path` if they give one. One per process: it is not sent to other processes (each makes
    its own from the run name)."""

    def __init__(self, run_name: str, max_entries: int = MAX_ENTRIES, timeout_s: float = TIMEOUT_S):
        self.name = TOOL_CACHE_PREFIX + run_name
        self.max_entries = max_entries
        self.timeout_s = timeout_s
        self.actor: Any = None
        self._started: concurrent.futures.Future | None = None
        """the actor's first answer: until it comes, lookups are misses rather than waits"""
        self.failure: str | None = None
        """why this process stopped using the actor (None while it does)"""
        self._batches: dict[asyncio.AbstractEventLoop, dict[str, asyncio.Future[Recorded | None]]] = {}
        self._last_put: Any = None
        """the newest put's reference: the actor runs one caller's calls in order, so once it is done
        every earlier put is stored (and recorded)"""

    def open(self, record_path: Path | None) -> None:
        """Find the run's actor, or create it recording to `record_path`: the first creator's path
        holds (it is the file's one writer); later opens join it as it is."""
        import ray  # here: ray takes seconds to import, and only a process on a cluster gets this far
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if self.actor is not None:
            return
        path = str(Path(record_path).absolute()) if record_path is not None else None
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
        self.actor = (
            ray.remote(ToolCacheActor)
            .options(
                name=self.name,
                namespace=NAMESPACE,
                get_if_exists=True,
                num_cpus=0,
                max_restarts=0,
                scheduling_strategy=here,
            )
            .remote(self.max_entries, path)
        )
        self._started = self.actor.stats.remote().future()

    async def wait_started(self) -> bool:
        """Wait (at most `timeout_s`) until the actor has answered once, so lookups reach it; False
        when it never will (not opened, or unreachable)."""
        if self._started is None or self.failure is not None:
            return False
        try:
            await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(self._started)), self.timeout_s)
        except Exception as error:  # noqa: BLE001 - the tier never fails a rollout
            self._give_up(error)
        return self.failure is None

    async def get(self, key: str) -> Recorded | None:
        """The actor's outcome for `key`; lookups made in the same event-loop turn share one call.
        None at once while the actor is starting (seconds: a rollout does not wait for it)."""
        if self.failure is not None or self._started is None or not self._started.done():
            return None
        if (error := self._started.exception()) is not None:
            self._give_up(error)
            return None
        loop = asyncio.get_running_loop()
        batch = self._batches.get(loop)
        if batch is None:  # the first lookup of this turn: the task asks once the turn's others joined
            batch = self._batches[loop] = {}
            loop.create_task(self._ask(loop))
        if key not in batch:
            batch[key] = loop.create_future()
        return await asyncio.shield(batch[key])

    def put(self, key: str, outcome: Recorded) -> None:
        """Sent, not awaited: the result is already the caller's, and a lost put costs one later miss."""
        if self.failure is not None or self.actor is None:
            return
        try:
            self._last_put = self.actor.put.remote(key, outcome)
        except Exception as error:  # noqa: BLE001 - the tier never fails a rollout
            self._give_up(error)

    async def flush(self) -> bool:
        """Wait (at most `timeout_s`) until the actor has stored every put this process sent: before
        the record file is read or the process ends (the actor belongs to its creator, and puts sent
        to an actor still starting would go with it). False when they may be lost."""
        if self.failure is not None or self.actor is None:
            return False
        last = self._last_put if self._last_put is not None else self.actor.stats.remote()
        try:
            await asyncio.wait_for(last, self.timeout_s)
        except Exception as error:  # noqa: BLE001
            self._give_up(error)
            return False
        return True

    def stats(self) -> dict[str, Any] | None:
        """The actor's counters and entries (every process's lookups), or None once it is gone."""
        import ray

        if self.failure is not None or self.actor is None:
            return None
        try:
            return ray.get(self.actor.stats.remote(), timeout=self.timeout_s)
        except Exception as error:  # noqa: BLE001
            self._give_up(error)
            return None

    async def _ask(self, loop: asyncio.AbstractEventLoop) -> None:
        batch = self._batches.pop(loop)
        keys = list(batch)
        found: list[Recorded | None] = [None] * len(keys)
        try:
            if self.failure is None:
                found = await asyncio.wait_for(self.actor.get_many.remote(keys), self.timeout_s)
        except Exception as error:  # noqa: BLE001 - a dead or stuck actor: a miss, then local only
            self._give_up(error)
        finally:  # even when cancelled: no lookup is left waiting
            for key, outcome in zip(keys, found):
                if not batch[key].done():
                    batch[key].set_result(outcome)

    def _give_up(self, error: BaseException) -> None:
        if self.failure is None:
            self.failure = f"{type(error).__name__}: {error}".splitlines()[0]
            log.warning(
                "tool cache actor %s is unreachable (%s): this process goes on with its own cache",
                self.name,
                self.failure,
            )

    def __repr__(self) -> str:
        state = "not opened" if self.actor is None else self.failure or "shared"
        return f"SharedToolCache({self.name!r}, {state})"
