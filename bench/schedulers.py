"""The three rollout schedulers that bench/rollout_overlap.py compares, and its seeded engine.

(c) is the product's own `rollout_groups`. (a) and (b) drive the product's `AgentSession.step` and put
a `TurnBarrier` in front of the real ToolSet, so scheduling is the only thing that differs.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from rlfactory_nb.engines.base import Generation, SamplingParams
from rlfactory_nb.rollout.agent import Agent
from rlfactory_nb.rollout.groups import rollout_groups
from rlfactory_nb.tools import ToolSet
from rlfactory_nb.types import ToolResult, Trajectory


class SeededEngine:
    """Wraps the hf engine: seeds each request, and adds up the engine's busy time.

    The seed is a function of (seed, prompt ids, n-th time this prompt was seen): a group's samples
    share their prompt, so they get that prompt's seeds 0..G-1 in whatever order they arrive, and the
    set of trajectories a run samples is the same under every scheduler. `reset()` starts a run."""

    def __init__(self, engine: Any, seed: int):
        self.engine, self.seed, self._seen = engine, seed, Counter[tuple[int, ...]]()
        self.busy_s = 0.0
        """seconds the engine's worker spent running batches (the time no scheduler can hide)"""
        run_batch = engine._run_batch  # measurement only: the batch the engine runs in its thread

        def timed_batch(batch: list[Any]) -> Any:
            started = time.perf_counter()
            try:
                return run_batch(batch)
            finally:
                self.busy_s += time.perf_counter() - started

        engine._run_batch = timed_batch

    def reset(self) -> None:
        self._seen.clear()
        self.busy_s = 0.0

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        return self.engine.stop_token_ids

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        key = tuple(prompt_ids)
        occurrence, self._seen[key] = self._seen[key], self._seen[key] + 1
        digest = hashlib.sha256(repr((self.seed, key, occurrence)).encode()).digest()
        return await self.engine.generate(
            prompt_ids, replace(sampling, seed=int.from_bytes(digest[:8], "big") >> 2)
        )

    async def update_weights(self, state_dict: Any) -> None:
        await self.engine.update_weights(state_dict)

    async def close(self) -> None:
        await self.engine.close()


class TurnBarrier:
    """Stands in for the ToolSet in (a) and (b): holds a turn's calls until every active trajectory
    has generated (arrived here, or ended its step without calls), then runs them in parallel or
    one at a time through the real ToolSet."""

    def __init__(self, tools: ToolSet, sequential: bool):
        self.tools, self.sequential = tools, sequential
        self._one_at_a_time = asyncio.Lock()
        self.open_turn(0)

    @property
    def specs(self) -> list[Any]:
        return self.tools.specs

    def open_turn(self, active: int) -> None:
        self._expected, self._arrived, self._everyone = active, set[Any](), asyncio.Event()

    def arrive(self) -> None:
        """The current step (one task per trajectory) is done generating; idempotent."""
        self._arrived.add(asyncio.current_task())
        if len(self._arrived) >= self._expected:
            self._everyone.set()

    async def call_many(self, calls: Sequence[tuple[str, Any]]) -> list[ToolResult]:
        self.arrive()
        await self._everyone.wait()
        if not self.sequential:
            return await self.tools.call_many(calls)
        results = []
        for name, arguments in calls:
            async with self._one_at_a_time:
                results.append(await self.tools.call(name, arguments))
        return results


def group_rows(
    rows: Sequence[dict[str, Any]], group_size: int
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(messages row, metadata) per trajectory, in the order rollout_groups makes them."""
    return [
        (row, {"ground_truth": row["ground_truth"], "prompt_index": p, "sample_index": s})
        for p, row in enumerate(rows)
        for s in range(group_size)
    ]


async def run_async(agent: Agent, rows: Sequence[dict[str, Any]], group_size: int) -> list[Trajectory]:
    """(c): the product's group rollout, unchanged."""
    groups = await rollout_groups(agent, rows, group_size)
    return [traj for group in groups for traj in group]


async def run_turn_barrier(agent: Agent, rows: Sequence[dict[str, Any]], group_size: int) -> list[Trajectory]:
    """(a) and (b): every active trajectory steps once per turn; the next turn waits for them all."""
    barrier: TurnBarrier = agent.tools
    sessions = [agent.start(row["messages"], metadata) for row, metadata in group_rows(rows, group_size)]

    async def step(session: Any) -> None:
        try:
            await session.step()
        finally:
            barrier.arrive()  # a step that made no call (or failed) must not hold the others

    while active := [session for session in sessions if not session.done]:
        barrier.open_turn(len(active))
        await asyncio.gather(*(step(session) for session in active))
    return [session.trajectory for session in sessions]
