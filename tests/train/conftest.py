"""A random tiny Qwen3 (hidden 32, 2 layers) with the preset tokenizer, and run configs around it."""

from pathlib import Path

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from rlfactory_nb.config import RunConfig
from rlfactory_nb.presets.tokenizer import VOCAB_SIZE, build_tokenizer

REWARDS = Path(__file__).with_name("scripted_rewards.py")


def tiny_random_qwen3(seed: int = 0) -> Qwen3ForCausalLM:
    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=VOCAB_SIZE,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    return Qwen3ForCausalLM(config).float().eval()


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    """A Hugging Face folder (model + tokenizer) that `model.name` can point at."""
    path = tmp_path_factory.mktemp("tiny-random-qwen3")
    tiny_random_qwen3().save_pretrained(path)
    build_tokenizer().save_pretrained(path)
    return path


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
