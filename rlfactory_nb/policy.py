"""The Policy: the model a run trains, its tokenizer, and the folder both load from.

`Policy.load` takes an embedded preset name ("tiny-calculator"), a local Hugging Face folder, a hub
id (on a machine that can reach the hub or has it cached), or a LoRA checkpoint (an adapter folder,
loaded over the base it names and merged). Rollout engines are created over the same weights with
`policy.engine("hf" | "vllm")`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from rlfactory_nb import presets
from rlfactory_nb.model_files import model_folder
from rlfactory_nb.train import lora
from rlfactory_nb.train.checkpoint import verify_digests


def resolve_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """ "auto": bfloat16 on GPU, float32 on CPU; else the named torch dtype."""
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
    base_path: Path | None = None
    """for a LoRA checkpoint: the folder of the base model its adapter applies to"""

    @classmethod
    def load(
        cls,
        name_or_path: str | Path = "tiny-calculator",
        device: str = "auto",
        dtype: str = "auto",
        log: Callable[[str], None] = print,
        trainable_adapter: bool = False,
    ) -> Policy:
        """Load a preset (built offline on first use), a local folder, a hub id, or a LoRA checkpoint:
        merged into plain weights, or with `trainable_adapter` kept as adapters to train on (resume)."""
        name = str(name_or_path)
        path = Path(model_folder(name, log=log))
        verify_digests(path)  # a checkpoint folder: refuse files changed since they were written
        if lora.is_adapter_folder(path):
            return cls._load_adapter(path, device, dtype, log, trainable_adapter)
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

    @classmethod
    def _load_adapter(
        cls, path: Path, device: str, dtype: str, log: Callable[[str], None], trainable: bool
    ) -> Policy:
        base = cls.load(lora.adapter_base(path), device=device, dtype=dtype, log=log)
        model = lora.load_adapter(base.model, path, trainable=trainable).eval()
        tokenizer = (
            AutoTokenizer.from_pretrained(str(path))
            if (path / "tokenizer_config.json").exists()
            else base.tokenizer
        )
        return cls(model=model, tokenizer=tokenizer, path=path, name=str(path), base_path=base.path)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def engine(self, kind: str = "hf", **options: Any) -> Any:
        """A rollout engine over this policy's weights: "hf" shares the live model, "vllm" loads
        `self.path` and receives weight updates from the trainer."""
        from rlfactory_nb.engines import create_engine, engine_traits

        if engine_traits(kind).loads == "objects":
            return create_engine(kind, (self.model, self.tokenizer), **options)
        if self.base_path is not None:  # an adapter folder: engines that load a folder need it merged
            from rlfactory_nb.train.export import export

            return create_engine(kind, str(export(self, _merged_folder(self.path))), **options)
        return create_engine(kind, str(self.path), **options)

    def __repr__(self) -> str:
        return f"Policy({self.name!r}, {self.num_parameters / 1e6:.2f}M params, path={str(self.path)!r})"


def _merged_folder(adapter: Path) -> Path:
    """Where a LoRA checkpoint's merged weights are written for engines that load a folder."""
    import hashlib
    import tempfile

    key = hashlib.sha256(str(adapter.resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / "rlfactory-nb-merged" / key
