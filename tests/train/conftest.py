"""A random tiny Qwen3 (hidden 32, 2 layers) with the preset tokenizer, and run configs around it."""

from pathlib import Path

import pytest
from tiny_models import random_qwen3, save_with_tokenizer, tiny_run_config
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
        return tiny_run_config(tiny_dir, tmp_path / "runs", f"{REWARDS}:{reward}", **overrides)

    return make
