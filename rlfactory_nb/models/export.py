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

from rlfactory_nb.errors import ConfigError, FolderExistsError
from rlfactory_nb.models.merged import write_plain
from rlfactory_nb.models.policy import Policy

EXPORT_DTYPES = ("bfloat16", "float16", "float32")


def run_export_command(args: Any) -> int:
    """`rlfactory-nb export CHECKPOINT OUT [--dtype]`."""
    folder = export(args.checkpoint, args.out, dtype=args.dtype)
    print(f"wrote {folder} ({args.dtype}): load it with transformers' from_pretrained or vLLM")
    return 0


def export(
    source: str | Path | Policy, out: str | Path, dtype: str = "bfloat16", overwrite: bool = True
) -> Path:
    """Write `source` (a checkpoint folder, model name, or a loaded `Policy`) merged to `out`."""
    if dtype not in EXPORT_DTYPES:
        raise ConfigError(f"export dtype must be one of {', '.join(EXPORT_DTYPES)}, got {dtype!r}")
    policy = source if isinstance(source, Policy) else Policy.load(source, device="cpu", dtype="float32")
    target = Path(out)
    if target.exists():
        if not overwrite:
            raise FolderExistsError(f"{target} exists; choose another folder or pass overwrite=True")
        shutil.rmtree(target)
    return write_plain(policy.model, policy.tokenizer, target, getattr(torch, dtype))
