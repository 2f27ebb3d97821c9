"""The main job on the embedded default, as `make demo` runs it.

Loads the tiny-calculator model (shipped built with the package), starts the real calculator MCP server, and
runs a few rollouts, printing each one: turns, tool calls, results, and which tokens are trained.
Trajectories are saved as JSONL in the run folder.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from rlfactory_nb.engines.base import SamplingParams
from rlfactory_nb.models.policy import Policy
from rlfactory_nb.models.presets import calculator
from rlfactory_nb.rollout.agent import Agent
from rlfactory_nb.rollout.display import format_trajectory
from rlfactory_nb.tools import ToolSet
from rlfactory_nb.types import save_jsonl

EXAMPLE_TOOLS = {"servers": [{"name": "calculator", "command": "python", "args": ["-m", "rlfactory_nb.tools.servers.calculator"]}]}


def run_demo(out: Path | None = None, num_rollouts: int = 4) -> int:
    out = out or Path("runs") / time.strftime("%Y%m%d-%H%M%S")
    return asyncio.run(_demo(out, num_rollouts))


async def _demo(out: Path, num_rollouts: int) -> int:
    policy = Policy.load("tiny-calculator")
    print(policy)
    async with ToolSet.from_config(EXAMPLE_TOOLS) as tools:
        agent = Agent(policy, tools, max_turns=3, max_new_tokens=48, sampling=SamplingParams(temperature=1.0))
        rows = calculator.dataset("heldout", num_rollouts)
        trajectories = await asyncio.gather(*(agent.rollout(row["messages"], {"ground_truth": row["ground_truth"]}) for row in rows))
        await agent.engine.close()
    for traj in trajectories:
        print()
        print(format_trajectory(traj, policy.tokenizer))
        print(f"  ground truth: {traj.metadata['ground_truth']}")
    path = save_jsonl(trajectories, out / "trajectories.jsonl")
    print(f"\nsaved {len(trajectories)} trajectories to {path}")
    return 0
