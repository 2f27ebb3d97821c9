"""`export`: a checkpoint (full or LoRA) as a plain Hugging Face folder that transformers and vLLM load.

A LoRA checkpoint holds only its adapter; a full one holds the float32 master weights. Either way the
exported folder has the merged weights in one dtype (bfloat16 by default, what model hubs ship; pass
"float32" to keep the master's bits), the tokenizer with its chat template, and nothing that needs
peft or rlfactory-nb to open. Command line: `rlfactory-nb export CHECKPOINT OUT [--dtype float32]`.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch

EXPORT_DTYPES = ("bfloat16", "float16", "float32")


def run_export_command(args: Any) -> int:
    """`rlfactory-nb export CHECKPOINT OUT [--dtype]`."""
    folder = export(args.checkpoint, args.out, dtype=args.dtype)
    print(f"wrote {folder} ({args.dtype}): load it with transformers' from_pretrained or vLLM")
    return 0


def export(
    source: str | Path | Any, out: str | Path, dtype: str = "bfloat16", overwrite: bool = True
) -> Path:
    """Write `source` (a checkpoint folder, model name, or a loaded `Policy`) merged to `out`."""
    from rlfactory_nb.models.policy import Policy

    if dtype not in EXPORT_DTYPES:
        raise ValueError(f"export dtype must be one of {', '.join(EXPORT_DTYPES)}, got {dtype!r}")
    policy = source if isinstance(source, Policy) else Policy.load(source, device="cpu", dtype="float32")
    target = Path(out)
    if target.exists():
        if not overwrite:
            raise FileExistsError(f"{target} exists; choose another folder or pass overwrite=True")
        shutil.rmtree(target)
    model = _plain_copy(policy.model, getattr(torch, dtype))
    model.save_pretrained(target)
    policy.tokenizer.save_pretrained(target)
    return target


def _plain_copy(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """A transformers model with `model`'s weights (adapters merged) in `dtype`; `model` is untouched."""
    from transformers import AutoModelForCausalLM

    from rlfactory_nb.models import lora
    from rlfactory_nb.train.trainable import is_adapted

    state = {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()}
    if is_adapted(model):
        adapter = model.peft_config[lora.ADAPTER_NAME]
        state = lora.merge_state(state, adapter.lora_alpha / adapter.r)
        model = model.get_base_model()
    copy = AutoModelForCausalLM.from_config(model.config)
    copy.load_state_dict(state)
    return copy.to(dtype)
