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
