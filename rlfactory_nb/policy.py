"""The Policy: the model a run trains, its tokenizer, and the folder both load from.

`Policy.load` takes an embedded preset name ("tiny-calculator"), a local Hugging Face folder, or a hub
id (on a machine that can reach the hub or has it cached). Rollout engines are created over the same
weights with `policy.engine("hf" | "vllm")`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from rlfactory_nb import presets


def resolve_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, dtype)


@dataclass
class Policy:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    path: Path
    """a Hugging Face folder (or hub id) holding the weights the engines start from"""
    name: str = ""

    @classmethod
    def load(
        cls,
        name_or_path: str | Path = "tiny-calculator",
        device: str = "auto",
        dtype: str = "auto",
        log: Callable[[str], None] = print,
    ) -> Policy:
        """Load a preset (built offline on first use), a local folder or a hub id."""
        name = str(name_or_path)
        path = presets.preset_path(name, log=log) if name in presets.PRESETS else Path(name)
        target = resolve_device(device)
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(path))
            model = AutoModelForCausalLM.from_pretrained(str(path), dtype=resolve_dtype(dtype, target))
        except OSError as error:
            raise FileNotFoundError(
                f"cannot load model {name!r}: not an embedded preset ({', '.join(presets.PRESETS)}), "
                f"not a local Hugging Face folder, and not loadable from the hub here ({error})"
            ) from error
        model.to(target).eval()
        return cls(model=model, tokenizer=tokenizer, path=path, name=name)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def engine(self, kind: str = "hf", **options: Any) -> Any:
        """A rollout engine over this policy's weights: "hf" shares the live model, "vllm" loads
        `self.path` and receives weight updates from the trainer."""
        from rlfactory_nb.engines import create_engine

        if kind == "hf":
            return create_engine("hf", (self.model, self.tokenizer), **options)
        return create_engine(kind, str(self.path), **options)

    def __repr__(self) -> str:
        return f"Policy({self.name!r}, {self.num_parameters / 1e6:.2f}M params, path={str(self.path)!r})"
