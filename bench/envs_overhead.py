"""What an environment step costs over today's ToolSet call, p50.

    OMP_NUM_THREADS=1 python bench/envs_overhead.py [--quick] [--calls 2000]

One trivial tool (it returns its argument), called three ways, alternated in blocks in one run:

* toolset: `ToolSet.call_many` on a Python function tool: what the loop called before environments;
* default env: the loop's step of a tool call through the default environment (`Agent.call_tools`
  over `ToolSetEnvironment`: the episode's bookkeeping, then the same `call_many`);
* env method: the same tool as an `@rf.tool` method of an Environment instance (`Agent.call_tools`
  over the instance's `call_tools`: argument checks, the bound method in a worker thread).

The overhead is each path's p50 minus the ToolSet's. A made-per-episode environment also costs its
life once per episode: made in a worker thread, `reset`, `close` (reported as its own p50).
Writes bench/results/envs_overhead.{json,md}.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `bench` importable as a script

import rlfactory_nb as rf
from bench._common import machine_line, markdown_table, script_args, section, write_result
from rlfactory_nb.envs import ToolSetEnvironment
from rlfactory_nb.rollout.episode import Episode, EpisodeStats
from rlfactory_nb.types import ToolCall, Turn

NAME = "envs_overhead"
BLOCK = 100


@rf.tool
def echo(value: int) -> int:
    """Return the value."""
    return value


class Echo(rf.Environment):
    def reset(self, row: dict[str, Any], *, seed: int) -> None:
        self.calls = 0

    @rf.tool
    def echo(self, value: int) -> int:
        """Return the value."""
        self.calls += 1
        return value

    def close(self) -> None:
        self.calls = -1


async def measure(calls: int) -> dict[str, Any]:
    toolset = rf.ToolSet.from_functions(echo, cache=False)  # every call runs the tool, as the env paths do
    await toolset.start()
    agent = rf.Agent(None, toolset, engine=object(), tokenizer=rf.Policy.load("tiny-calculator").tokenizer)
    stats = EpisodeStats()
    default = Episode.made_now(ToolSetEnvironment(toolset), stats)
    instance = Echo()
    instance.reset({}, seed=0)
    method = Episode.made_now(instance, stats)
    call = ToolCall("echo", {"value": 7})

    async def via_toolset() -> None:
        [result] = await toolset.call_many([("echo", {"value": 7})])
        assert result.ok, result

    async def via(episode: Episode) -> None:
        turn = Turn("", calls=[call])
        await agent.call_tools(turn, episode)
        assert turn.results[0].ok, turn.results

    async def lifecycle() -> None:
        episode = Episode(Echo, stats)
        await episode.open()
        await episode.call("reset", "reset", {}, seed=0)
        await episode.close()

    variants = {
        "toolset": via_toolset,
        "default env": lambda: via(default),
        "env method": lambda: via(method),
        "episode life": lifecycle,
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(3):  # warm-up
        for run in variants.values():
            await run()
    for _ in range(max(calls // BLOCK, 1)):
        for name, run in variants.items():
            for _ in range(BLOCK):
                started = time.perf_counter()
                await run()
                times[name].append(time.perf_counter() - started)
    await toolset.stop()
    p50 = {name: statistics.median(values) * 1000 for name, values in times.items()}
    return {
        "calls_per_path": len(times["toolset"]),
        "p50_ms": p50,
        "p90_ms": {name: statistics.quantiles(values, n=10)[-1] * 1000 for name, values in times.items()},
        "overhead_default_ms": p50["default env"] - p50["toolset"],
        "overhead_method_ms": p50["env method"] - p50["toolset"],
    }


def report(data: dict[str, Any], argv: list[str]) -> str:
    p50, p90 = data["p50_ms"], data["p90_ms"]
    rows = [
        ["ToolSet.call_many (before environments)", f"{p50['toolset']:.3f} ms", f"{p90['toolset']:.3f} ms", "-"],
        ["the default environment (ToolSetEnvironment)", f"{p50['default env']:.3f} ms", f"{p90['default env']:.3f} ms",
         f"**{data['overhead_default_ms']:+.3f} ms**"],
        ["an `@rf.tool` method of an Environment", f"{p50['env method']:.3f} ms", f"{p90['env method']:.3f} ms",
         f"**{data['overhead_method_ms']:+.3f} ms**"],
        ["an episode's life (made in a thread, reset, close)", f"{p50['episode life']:.3f} ms", f"{p90['episode life']:.3f} ms",
         "once per episode"],
    ]
    table = markdown_table(["path of one tool step", "p50", "p90", "overhead over the ToolSet, p50"], rows)
    bullets = [
        f"- {data['calls_per_path']} calls per path, alternated in blocks of {BLOCK}; goal: overhead <= 1 ms at p50.",
        ("- The ToolSet and the default environment run a Python function tool in a worker thread "
        "(tools/python.py); the method path does the same with the bound method, after its own argument check."),
        ("- The method path is cheaper than the ToolSet's because it does less: no JSON-schema validation, "
         "per-tool timeout, concurrency limit or cache lookup (an environment owns its tools' state)."),
    ]
    return section("Environments: the cost of an environment step over a ToolSet call", "bench/envs_overhead.py",
                   argv, machine_line(), table, bullets)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="200 calls per path")
    args = parser.parse_args()
    data = asyncio.run(measure(200 if args.quick else args.calls))
    path = write_result(NAME, data, report(data, script_args()))
    print(path.read_text())


if __name__ == "__main__":
    main()
