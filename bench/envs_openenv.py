"""What an OpenEnv step costs over its WebSocket, against the same environment stepped in process.

    OMP_NUM_THREADS=1 python bench/envs_openenv.py [--quick]

The environment is the guess game of examples/guess/openenv_server.py, an OpenEnv MCP environment
(openenv 0.10, fastmcp 3), so one step is one `call_tool` of its `guess` tool. Two paths, alternated
in blocks in one run:

* websocket: `OpenEnvEnvironment.call_tools` (rlfactory_nb/envs/adapters/openenv.py) on one session
  of a local server (uvicorn, the OpenEnv venv): JSON over the socket, the server's session
  dispatch, the MCP call inside the server, JSON back;
* in process: the same `GuessEnvironment` class stepped directly by `await env.step_async(action)`
  inside its open MCP session, which is what the server does per message, in a worker process of
  the OpenEnv venv (openenv cannot be imported beside this project's mcp 2; docs/decisions.md).

The difference is the cost of the wire: serialisation, the socket and the server's dispatch.
Writes bench/results/envs_openenv.{json,md}.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

WORKER_FLAG = "--in-process-worker"
WORKER = r'''
import asyncio, json, sys, time
sys.path.insert(0, sys.argv[1])
from examples.guess.openenv_server import GuessEnvironment
from openenv.core.env_server.mcp_types import CallToolAction

async def main():
    env = GuessEnvironment()
    env.reset(seed=0, low=1, high=10**9, max_guesses=10**9)
    async with env.mcp_session():
        for line in sys.stdin:
            steps = int(line)
            times = []
            for i in range(steps):
                action = CallToolAction(tool_name="guess", arguments={"number": i})
                started = time.perf_counter()
                observation = await env.step_async(action)
                times.append(time.perf_counter() - started)
                assert observation.error is None, observation.error
            print(json.dumps(times), flush=True)

asyncio.run(main())
'''

import argparse
import asyncio
import json
import statistics
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `bench` importable as a script

from bench._common import ROOT, command_block, machine_line, markdown_table, script_args, write_result
from rlfactory_nb.envs.adapters import OpenEnvServer, openenv_env
from rlfactory_nb.envs.adapters.openenv_server import openenv_python
from rlfactory_nb.types import ToolCall

NAME = "envs_openenv"
APP = "examples.guess.openenv_server:app"


@dataclass(frozen=True)
class Settings:
    steps: int = 300
    """steps per block"""
    rounds: int = 6
    """blocks per path, alternated (the first of each is warm-up, discarded)"""


QUICK = Settings(steps=100, rounds=3)


def percentile(seconds: list[float], q: float) -> float:
    ordered = sorted(seconds)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3


async def websocket_block(env, steps: int, offset: int) -> list[float]:
    import time

    times = []
    for i in range(steps):
        call = ToolCall("guess", {"number": offset + i})
        started = time.perf_counter()
        [result] = await env.call_tools([call])
        times.append(time.perf_counter() - started)
        assert result.ok, result
    return times


def start_worker() -> subprocess.Popen:
    """The in-process path's worker: the OpenEnv venv's python stepping the environment directly."""
    return subprocess.Popen(
        [openenv_python(), "-c", WORKER, str(ROOT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        cwd=ROOT,
    )


async def measure(settings: Settings, server_url: str, worker: subprocess.Popen) -> dict[str, list[float]]:
    env = openenv_env(server_url)()
    await env.reset({"reset_args": {"low": 1, "high": 10**9, "max_guesses": 10**9}}, seed=0)
    times: dict[str, list[float]] = {"websocket": [], "in_process": []}
    try:
        for round_index in range(settings.rounds):
            ws = await websocket_block(env, settings.steps, round_index * settings.steps)
            worker.stdin.write(f"{settings.steps}\n")
            worker.stdin.flush()
            local = json.loads(worker.stdout.readline())
            if round_index > 0:  # the first block of each path warms caches and imports
                times["websocket"] += ws
                times["in_process"] += local
    finally:
        await env.close()
        worker.stdin.close()
        worker.wait(timeout=30)
    return times


def report(settings: Settings, times: dict[str, list[float]], machine: str) -> tuple[dict, str]:
    rows, figures = [], {}
    for path, label in (("in_process", "in process (`step_async` in the MCP session)"),
                        ("websocket", "over the WebSocket (`OpenEnvEnvironment.call_tools`)")):
        p50, p99 = percentile(times[path], 0.5), percentile(times[path], 0.99)
        mean = statistics.fmean(times[path]) * 1e3
        figures[path] = {"p50_ms": p50, "p99_ms": p99, "mean_ms": mean, "steps": len(times[path])}
        rows.append([label, f"{p50:.3f}", f"{p99:.3f}", f"{mean:.3f}", len(times[path])])
    ratio = figures["websocket"]["p50_ms"] / figures["in_process"]["p50_ms"]
    extra = figures["websocket"]["p50_ms"] - figures["in_process"]["p50_ms"]
    table = markdown_table(["path", "p50 ms", "p99 ms", "mean ms", "steps"], rows)
    bullets = [
        (f"- One OpenEnv step over the WebSocket costs **{extra:.2f} ms more** at p50 than the same "
         f"environment stepped in process (**{ratio:.1f}x**): JSON both ways, the socket, and the "
         "server's session dispatch, on localhost. Most of a step is openenv's own MCP call (fastmcp's "
         "in-memory client), paid on both paths."),
        (f"- {settings.rounds} alternated blocks of {settings.steps} steps per path, the first of each "
         "discarded; one session, a game that never ends (a range of 10^9, no guess limit)."),
        ("- The in-process path runs in the OpenEnv venv (a worker process): openenv cannot be imported "
         "beside this project's mcp 2.3 (docs/decisions.md)."),
    ]
    markdown = "\n\n".join([
        "## OpenEnv: a step over its WebSocket vs the same environment in process",
        command_block("bench/envs_openenv.py", script_args()),
        machine,
        table,
        "\n".join(bullets),
    ])
    return {"settings": asdict(settings), "figures": figures, "ratio_p50": ratio, "machine": machine}, markdown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps (a smoke run)")
    args = parser.parse_args()
    settings = QUICK if args.quick else Settings()
    machine = machine_line()
    with OpenEnvServer(APP) as server:
        times = asyncio.run(measure(settings, server.url, start_worker()))
    data, markdown = report(settings, times, machine)
    write_result(NAME, data, markdown)
    print(markdown)


if __name__ == "__main__":
    main()
