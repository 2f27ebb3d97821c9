"""examples/agents_sdk: the Agents SDK calculator agent trains as the config names it
(`rollout.program: examples/agents_sdk/agent.py:solve`), its tool calls served by the run's ToolSet."""

from __future__ import annotations

from pathlib import Path

import pytest

import rlfactory_nb as rf
from rlfactory_nb.rewards.loading import load_reward

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_agents_sdk_example_trains(tmp_path):
    cfg = rf.example("agents_sdk").config({
        "grpo.steps": 2, "grpo.prompts_per_step": 4, "grpo.group_size": 4, "grpo.eval_every": 0,
        "grpo.checkpoint_every": 0, "output_dir": str(tmp_path),
    })
    assert cfg.rollout.program.endswith("examples/agents_sdk/agent.py:solve")  # resolved against the project
    result = rf.train_sync(cfg)
    row = result.metrics
    assert result.step == 2 and row["program/errors"] == 0 and row["program/calls"] >= 16
    assert row["tools/status/ok"] >= 1  # the agent's function tool called the run's calculator server


def test_the_examples_calculator_refuses_what_is_not_arithmetic():
    evaluate = load_reward(f"{ROOT}/examples/agents_sdk/agent.py:evaluate")
    assert (evaluate("12*(3+4)"), evaluate("7/2"), evaluate("__import__('os')")) == ("84", "3.5", "error: only + - * / and numbers")


@pytest.mark.slow
def test_an_agents_sdk_program_trains_on_the_shop(tmp_path):
    """examples/agents_sdk/shop.py plays examples/shop: its tools are each episode's own database
    tools, the customer answers, the reward is the shop's (its final database), and every episode
    is closed."""
    cfg = rf.example("shop").config({
        "rollout.program": f"{ROOT}/examples/agents_sdk/shop.py:solve", "grpo.steps": 2, "grpo.prompts_per_step": 2,
        "grpo.group_size": 2, "grpo.eval_every": 0, "grpo.checkpoint_every": 0, "grpo.filter_zero_variance": False,
        "grpo.trajectories_per_step": -1, "output_dir": str(tmp_path),
    })
    result = rf.train_sync(cfg)
    row = result.metrics
    assert result.step == 2 and row["groups/trained"] == 2 and row["train/tokens"] > 0
    assert row["env/episodes_opened"] == row["env/episodes_closed"] == 4 and row["env/open_now"] == 0
    saved = [t for step in (1, 2) for t in rf.types.load_jsonl(result.run_dir / "trajectories" / f"step_{step:06d}.jsonl")]
    assert len(saved) == 8 and all("env_reward" in t.metadata and "env_error" not in t.metadata for t in saved)
    shop_tools = {"find_orders", "get_order", "cancel_order", "change_address"}
    assert all({tool["function"]["name"] for tool in t.metadata["tools"]} == shop_tools for t in saved if t.metadata["tools"])
    answered = [t for t in saved if any(turn.speaker == "user" for turn in t.turns)]
    assert answered, "the customer answered the agent in some episode"
