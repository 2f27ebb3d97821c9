"""One tool cache for the job: hit rates of 1 rollout process, 2 with their own caches, 2 sharing one.

    OMP_NUM_THREADS=1 python bench/tool_cache.py [--quick]

A GRPO-like call stream: each step draws `prompts_per_step` prompts from a pool (so prompts recur
across steps), each prompt is rolled out `group_size` times, and each sample makes `turns` calls,
one per turn, after a random "generation" pause. A sample's call is, with probability
`common_fraction`, a popular query shared by every prompt (Zipf over 20), else one of its prompt's
few likely queries for that turn (Zipf over 3): the samples of a group overlap, and so do steps.
The tool is a deterministic async Python function with a fixed latency.

Three ways to run the same stream (the same calls and pauses, from one seed), each in Ray actors
standing for rollout processes, which a step's groups are dealt to in turn (a group stays whole):

* 1 process, its ToolSet's own LRU;
* 2 processes, each with its own LRU: a call the other process made is a miss;
* 2 processes sharing the job's ToolCacheActor (cluster/tool_cache.py) behind their LRUs.

Reported per variant: the hit rate (calls answered without running the tool, the ToolSet's `cached`
flag: the LRU, a call in flight, or the shared tier), tool runs, and wall time (median over rounds,
the variants alternating, each round in fresh actors). Writes bench/results/tool_cache.{json,md}.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import asyncio
import random
import statistics
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `bench` importable as a script

from bench._common import machine_line, markdown_table, script_args, section, write_result

NAME = "tool_cache"
VARIANTS = {
    "1 process": (1, False),
    "2 processes, own caches": (2, False),
    "2 processes, shared tier": (2, True),
}
"""name -> (rollout processes, shared tier)"""

Stream = list[list[list[list[tuple[str, float]]]]]
"""steps -> groups -> samples -> turns: (query, pause before the call in seconds)"""


@dataclass(frozen=True)
class Settings:
    steps: int = 12
    prompts: int = 24
    """the prompt pool a step draws from"""
    prompts_per_step: int = 8
    group_size: int = 8
    turns: int = 3
    common_fraction: float = 0.25
    """share of calls that go to queries popular across all prompts"""
    tool_latency_s: float = 0.05
    max_pause_s: float = 0.04
    """a sample waits uniformly up to this long before each call (its generation)"""
    rounds: int = 3
    seed: int = 0


QUICK = Settings(steps=4, rounds=1)


def zipf(rng: random.Random, n: int) -> int:
    """One of 0..n-1, the first most likely (weights 1, 1/2, 1/3, ...)."""
    return rng.choices(range(n), weights=[1 / (k + 1) for k in range(n)])[0]


def call_stream(s: Settings) -> Stream:
    """Every call of the run, drawn from `s.seed` (the same for each variant).

    >>> stream = call_stream(QUICK)
    >>> len(stream), len(stream[0]), len(stream[0][0]), len(stream[0][0][0])
    (4, 8, 8, 3)
    """
    rng = random.Random(s.seed)
    steps = []
    for _ in range(s.steps):
        prompts = rng.sample(range(s.prompts), s.prompts_per_step)
        steps.append([[_sample(rng, s, prompt) for _ in range(s.group_size)] for prompt in prompts])
    return steps


def _sample(rng: random.Random, s: Settings, prompt: int) -> list[tuple[str, float]]:
    turns = []
    for turn in range(s.turns):
        common = rng.random() < s.common_fraction
        query = f"common-{zipf(rng, 20)}" if common else f"prompt{prompt}-turn{turn}-{zipf(rng, 3)}"
        turns.append((query, rng.uniform(0, s.max_pause_s)))
    return turns


def rollout_process_class() -> type:
    """One rollout process: a ToolSet over the tool, with or without the job's shared tier."""
    from rlfactory_nb.cluster.tool_cache import SharedToolCache
    from rlfactory_nb.tools import ToolSet

    class RolloutProcess:
        def __init__(self, run_name: str, shared: bool, latency_s: float):
            self.runs = 0

            async def lookup(query: str) -> str:
                """A search-like tool: the same answer for the same query, after `latency_s`."""
                self.runs += 1
                await asyncio.sleep(latency_s)
                return f"results for {query}"

            self.tier = SharedToolCache(run_name) if shared else None
            self.tools = ToolSet.from_functions(lookup, shared_cache=self.tier, max_concurrency=4096)

        async def ready(self) -> bool:
            """Up, and the shared tier's actor too (a job's is up after its first seconds)."""
            return self.tier is None or await self.tier.wait_started()

        async def step(self, groups: list[list[list[tuple[str, float]]]]) -> list[bool]:
            samples = await asyncio.gather(*(self._sample(turns) for group in groups for turns in group))
            return [cached for sample in samples for cached in sample]

        async def _sample(self, turns: list[tuple[str, float]]) -> list[bool]:
            cached = []
            for query, pause_s in turns:
                await asyncio.sleep(pause_s)
                cached.append((await self.tools.call("lookup", {"query": query})).cached)
            return cached

        def report(self) -> tuple[int, dict[str, Any]]:
            return self.runs, self.tools.stats()["cache"]

    return RolloutProcess


def run_variant(stream: Stream, processes: int, shared: bool, s: Settings) -> dict[str, Any]:
    """The whole stream on `processes` fresh actors; a step waits for all of them (as GRPO does)."""
    import ray

    actor = ray.remote(rollout_process_class()).options(num_cpus=0)
    run_name = f"bench-{uuid.uuid4().hex[:8]}"
    workers = [actor.remote(run_name, shared, s.tool_latency_s) for _ in range(processes)]
    assert all(ray.get([worker.ready.remote() for worker in workers]))  # started before the clock
    cached: list[bool] = []
    started = time.perf_counter()
    for groups in stream:
        dealt = [groups[index::processes] for index in range(processes)]
        for part in ray.get([worker.step.remote(part) for worker, part in zip(workers, dealt)]):
            cached += part
    wall_s = time.perf_counter() - started
    reports = ray.get([worker.report.remote() for worker in workers])
    for worker in workers:
        ray.kill(worker)  # the cache actor, owned by the first, goes with it
    stats = [report[1] for report in reports]
    return {
        "calls": len(cached),
        "hit_rate": sum(cached) / len(cached),
        "tool_runs": sum(report[0] for report in reports),
        "shared_hits": sum(stat["shared_hits"] for stat in stats),
        "in_flight_or_local_hits": sum(stat["local_hits"] for stat in stats),
        "wall_s": wall_s,
    }


def distinct_calls(stream: Stream) -> int:
    return len({query for step in stream for group in step for sample in group for query, _ in sample})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK.steps} steps, 1 round")
    s = QUICK if parser.parse_args().quick else Settings()
    machine = machine_line()
    from rlfactory_nb.cluster import Cluster

    cluster = Cluster.connect(num_cpus=2, dashboard=False)
    stream = call_stream(s)
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in VARIANTS}
    try:
        for index in range(s.rounds):
            for name, (processes, shared) in VARIANTS.items():
                rounds[name].append(run_variant(stream, processes, shared, s))
                print(f"round {index + 1}: {name}: {rounds[name][-1]}", flush=True)
    finally:
        cluster.shutdown()
    figures = {
        name: {**runs[-1], "wall_s": statistics.median(r["wall_s"] for r in runs)}
        for name, runs in rounds.items()
    }
    write_result(
        NAME,
        {"settings": asdict(s), "distinct_calls": distinct_calls(stream), "variants": rounds},
        report(s, machine, stream, figures),
    )


def report(s: Settings, machine: str, stream: Stream, figures: dict[str, dict[str, Any]]) -> str:
    calls = figures["1 process"]["calls"]
    repeats = 1 - distinct_calls(stream) / calls
    table = markdown_table(
        ["variant", "hit rate", "tool runs", "shared-tier hits", "wall s (median)"],
        [
            [name, f"{f['hit_rate']:.1%}", f["tool_runs"], f["shared_hits"], f"{f['wall_s']:.2f}"]
            for name, f in figures.items()
        ],
    )
    one, own, shared = (figures[name] for name in VARIANTS)
    bullets = [
        (
            f"- {calls} calls over {s.steps} steps ({s.prompts_per_step} of {s.prompts} prompts a step, group size "
            f"{s.group_size}, {s.turns} turns a sample, {s.common_fraction:.0%} of calls to queries common to all "
            f"prompts); {repeats:.1%} of them repeat an earlier call of the run: the best any cache can do. The tool takes "
            f"{s.tool_latency_s * 1e3:.0f} ms; a sample pauses up to {s.max_pause_s * 1e3:.0f} ms before each call."
        ),
        (
            f"- Splitting the groups over 2 processes with their own caches drops the hit rate from "
            f"{one['hit_rate']:.1%} to {own['hit_rate']:.1%} ({own['tool_runs'] - one['tool_runs']} more tool runs): "
            "a call the other process made is a miss. With the shared tier it is "
            f"{shared['hit_rate']:.1%} ({shared['shared_hits']} calls answered by the actor)."
        ),
        (
            "- What the shared tier cannot catch: the same call made by both processes at the same moment, "
            "before either result is stored (within a process the ToolSet shares a call in flight; across "
            "processes both run it)."
        ),
        (
            f"- Wall time: {own['wall_s']:.2f} s with own caches vs {shared['wall_s']:.2f} s shared: each local "
            "miss pays one actor round trip (lookups of one event-loop turn go in one batch), against a tool "
            "latency saved per shared hit."
        ),
    ]
    return section(
        "One tool cache for the job: 1 vs 2 rollout processes, own caches vs a shared actor",
        "bench/tool_cache.py",
        script_args(),
        machine,
        table,
        bullets,
    )


if __name__ == "__main__":
    main()
