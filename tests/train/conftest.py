"""A random tiny Qwen3 (hidden 32, 2 layers) with the preset tokenizer, and run configs around it."""

from pathlib import Path

import pytest
from tiny_models import random_qwen3, save_with_tokenizer
from transformers import Qwen3ForCausalLM

from rlfactory_nb.config import RunConfig

REWARDS = Path(__file__).with_name("scripted_rewards.py")


def tiny_random_qwen3(seed: int = 0) -> Qwen3ForCausalLM:
    return random_qwen3(seed)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    """A Hugging Face folder (model + tokenizer) that `model.name` can point at."""
    path = tmp_path_factory.mktemp("tiny-random-qwen3")
    return save_with_tokenizer(tiny_random_qwen3(), path)


@pytest.fixture
def make_cfg(tiny_dir, tmp_path):
    """A small run config on the tiny random model; keyword overrides are dotted keys."""

    def make(reward: str = "first_token", **overrides) -> RunConfig:
        data = {
            "name": "test",
            "output_dir": str(tmp_path / "runs"),
            "model": {"name": str(tiny_dir), "device": "cpu"},
            "rollout": {"max_turns": 1, "max_new_tokens": 6, "max_total_tokens": 256, "drift_check": "off"},
            "reward": {"function": f"{REWARDS}:{reward}"},
            "grpo": {
                "steps": 2,
                "prompts_per_step": 3,
                "group_size": 4,
                "lr": 1e-2,
                "mini_batch_size": 12,
                "micro_batch_size": 5,
                "eval_every": 0,
                "checkpoint_every": 0,
            },
        }
        return RunConfig.from_dict(data, overrides={k.replace("__", "."): v for k, v in overrides.items()})

    return make
