"""Training with an environment: `train(cfg, env=...)` on the tiny random model. Instances are made
where the rollouts run, from a class that travels by value (kept in the run folder, so a resume
without it finds it); rewards see `sample.env`; the environment's reward is merged into scoring; a
group with an episode that failed before its first token is left out unscored (saved with reward
None); each step's metrics count episodes, errors and such groups."""

import json
from pathlib import Path

import pytest
from tiny_models import random_qwen3, save_with_tokenizer, tiny_run_config

import rlfactory_nb as rf
from rlfactory_nb.data.objects import RunObjects
from rlfactory_nb.engines.testing import ScriptedEngine
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.train.loop import train
from rlfactory_nb.train.metrics import read_metrics

ROWS = [{"prompt": f"Roll {i}", "ground_truth": "", "fail": i % 3 == 0} for i in range(6)]
LIVE: list[int] = []
"""one entry per instance made and not closed (list.append and pop are atomic across threads)"""


class Dice(rf.Environment):
    """Rolls a die at reset (from the seed); the reward is the roll's parity; some rows fail."""

    def __init__(self):
        LIVE.append(1)

    def reset(self, row, *, seed):
        if row["fail"]:
            raise RuntimeError("no table for this row")
        self.roll = seed % 6 + 1

    def reward(self):
        return float(self.roll % 2)

    def state(self):
        return {"roll": self.roll}

    def close(self):
        LIVE.pop()


def roll_seen(sample: rf.Sample) -> float:
    """A reward of the run's own that reads the still-open environment."""
    return float(sample.env.roll) if sample.env is not None and hasattr(sample.env, "roll") else -5.0


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return save_with_tokenizer(random_qwen3(0), tmp_path_factory.mktemp("tiny-env-qwen3"))


def config(tiny_dir, tmp_path, **overrides):
    overrides = {"rollout__env_error_reward": -1.0, "grpo__trajectories_per_step": -1, **overrides}
    return tiny_run_config(tiny_dir, tmp_path / "runs", "rlfactory_nb.rewards.functions:exact_match", **overrides)


def saved(cfg, step):
    path = cfg.run_dir / "trajectories" / f"step_{step:06d}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_training_runs_an_environment_per_trajectory_and_counts_episodes_each_step(tiny_dir, tmp_path):
    cfg = config(tiny_dir, tmp_path, grpo__steps=1)
    await train(cfg, env=Dice, reward={"roll_seen": roll_seen}, train_data=ROWS)
    trajectories = saved(cfg, 1)
    failed = [t for t in trajectories if "env_error" in t["metadata"]]
    ok = [t for t in trajectories if "env_error" not in t["metadata"]]
    assert failed and ok and len(trajectories) == 12
    assert {t["metadata"]["env_error"]["kind"] for t in failed} == {"reset"}
    assert all(t["finish_reason"] == "error" and t["metadata"]["reward"] is None for t in failed)
    # the run's own reward is the training reward, read off the open instance; the env's is logged beside
    for traj in ok:
        roll = traj["metadata"]["env_state"]["roll"]
        assert traj["metadata"]["reward"] == float(roll)
        assert traj["metadata"]["reward_components"]["env"] == float(roll % 2) == traj["metadata"]["env_reward"]
    [row] = read_metrics(cfg.run_dir)
    assert row["env/episodes_opened"] == row["env/episodes_closed"] == 12
    assert row["env/errors/reset"] == len(failed) and row["env/open_now"] == 0
    assert row["groups/env_failed"] == len(failed) / 4 and row["groups/total"] + row["groups/env_failed"] == 3
    assert not LIVE  # every instance made was closed


async def test_the_environment_travels_by_value_and_a_resume_without_it_uses_the_kept_one(tiny_dir, tmp_path):
    cfg = config(tiny_dir, tmp_path, grpo__steps=1)
    await train(cfg, env=Dice, train_data=ROWS)  # no reward of the run's own: the env's trains ("auto")
    assert RunObjects.load(cfg.run_dir).env.__name__ == "Dice"
    await train(cfg.replace({"grpo.steps": 2}), resume=True)
    for step in (1, 2):
        for traj in saved(cfg, step):
            expected = None if "env_error" in traj["metadata"] else traj["metadata"]["env_reward"]
            assert traj["metadata"]["reward"] == expected
    assert [row["env/episodes_opened"] for row in read_metrics(cfg.run_dir)] == [12.0, 12.0]
    assert not LIVE


def test_a_config_names_the_environment_and_its_limits(tiny_dir, tmp_path):
    from rlfactory_nb.runtime import Runtime

    cfg = config(tiny_dir, tmp_path, rollout__env="tests.envs.test_training:Dice", rollout__max_open_envs=3, rollout__env_timeout_s=5)
    runtime = Runtime.from_config(cfg, RunObjects(), ScriptedEngine(build_tokenizer(), ["ok"]))
    # the reward function is the config's default: the environment's reward trains, the default is logged
    assert runtime.env == "tests.envs.test_training:Dice" and runtime.env_reward_use() == "reward"
    assert list(runtime.reward.functions) == ["env", "exact_match"]
    agent = runtime.agent()
    limits = agent.episodes.limits
    assert agent.episodes.factory.__name__ == "Dice" and (limits.timeout_s, limits.max_open) == (5.0, 3)
    named = config(tiny_dir, tmp_path, rollout__env="tests.envs.test_training:Dice", reward__function=f"{__file__}:roll_seen")
    assert Runtime.from_config(named, RunObjects()).env_reward_use() == "logged"


class Counter:
    """A TRL environment as TRL users write it (no base class; `get_reward` owns the reward)."""

    def reset(self, **kwargs) -> str:
        self.counter = 0
        return "The counter is at 0."

    def increment(self, a: int) -> int:
        """
        Increment the counter.

        Args:
            a: The value to increment by
        """
        self.counter += a
        return self.counter

    def get_reward(self) -> float:
        return 0.5 - self.counter


async def test_a_trl_class_passed_unchanged_trains_on_its_get_reward(tiny_dir, tmp_path):
    cfg = config(tiny_dir, tmp_path, grpo__steps=1)
    await train(cfg, env=Counter, train_data=[{"prompt": f"Count to {i}.", "ground_truth": ""} for i in range(2)])
    trajectories = saved(cfg, 1)
    assert trajectories and not [t for t in trajectories if "env_error" in t["metadata"]]
    for traj in trajectories:
        expected = 0.5 - traj["metadata"]["env_state"]["counter"]
        assert traj["metadata"]["env_reward"] == traj["metadata"]["reward"] == expected
        assert traj["messages"][0]["content"].endswith("The counter is at 0.")
