"""A model as a plain Hugging Face folder: adapters merged, one dtype, the tokenizer beside it.

What `rf.export` writes for people, and what `Policy.engine` writes for an engine that loads a folder
(vLLM) when the policy is a LoRA checkpoint. Nothing in the folder needs peft or rlfactory-nb to open.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rlfactory_nb.engines.build import cpu_state
from rlfactory_nb.models import lora


def write_plain(model: torch.nn.Module, tokenizer: Any, out: Path, dtype: torch.dtype) -> Path:
    """Save `model` (adapters merged, in `dtype`) and `tokenizer` to `out`; `model` is untouched."""
    plain_copy(model, dtype).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def plain_copy(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """A transformers model with `model`'s weights (adapters merged) in `dtype`; `model` is untouched."""
    from transformers import AutoModelForCausalLM  # here: transformers takes seconds to import

    state = cpu_state(model)
    if lora.is_adapted(model):
        adapter = model.peft_config[lora.ADAPTER_NAME]
        state = lora.merge_state(state, adapter.lora_alpha / adapter.r)
        model = model.get_base_model()
    copy = AutoModelForCausalLM.from_config(model.config)
    copy.load_state_dict(state)
    return copy.to(dtype)
