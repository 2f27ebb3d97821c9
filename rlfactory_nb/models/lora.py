"""LoRA adapters through peft: applying them, the weights engines get, and adapter checkpoints.

With `model.lora` set only the adapters (two rank-r matrices per adapted linear layer) are trained, so
gradients and AdamW state shrink from the whole model to under 1% of it, and the frozen base can sit in
the compute dtype (see `rlfactory_nb.models.precision`).

- The KL reference is the same model with its adapters switched off (`AdaptersDisabled`), not a
  second copy of the base.
- Engines generate from merged weights, W + (alpha / r) * B @ A for every adapted layer, computed
  from the trainer's state dict by `merge_state` (a pure function, so it serves the local backend,
  the object-store sync and the broadcast alike); the in-process hf engine runs the adapted model
  itself, which needs no merge.
- A checkpoint of a LoRA run is a peft adapter folder (adapter_config.json names the base) plus the
  tokenizer and trainer state. `load_adapter_checkpoint` opens one for inference (merged) or for
  training (adapters trainable); `rf.export` writes a merged Hugging Face folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from rlfactory_nb.config import ConfigError
from rlfactory_nb.errors import CheckpointError, UnsupportedModelError

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_NAME = "default"
_PEFT_PREFIX = "base_model.model."


def is_adapter_folder(path: str | Path) -> bool:
    return (Path(path) / ADAPTER_CONFIG).is_file()


def is_adapted(model: torch.nn.Module) -> bool:
    """True for a peft model (LoRA adapters applied)."""
    return hasattr(getattr(model, "module", model), "disable_adapter")


def linear_layer_names(model: torch.nn.Module) -> list[str]:
    """The distinct names of the decoder's linear layers (what `target_modules` may name)."""
    names = {
        name.rsplit(".", 1)[-1]
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear) and module is not model.get_output_embeddings()
    }
    return sorted(names)


def check_targets(model: torch.nn.Module, lora: Any) -> None:
    """A ConfigError naming any `target_modules` entry the model lacks, and listing the ones it has."""
    if lora.target_modules is None:
        return
    available = linear_layer_names(model)
    missing = [name for name in lora.target_modules if name not in available]
    if missing:
        problem = (
            f"model.lora.target_modules: {', '.join(map(repr, missing))} is not a linear layer of "
            f"this model; its linear layers are {', '.join(available)}"
        )
        raise ConfigError([problem])


def apply_lora(model: torch.nn.Module, lora: Any, base_name: str) -> torch.nn.Module:
    """Wrap `model` (whose weights are frozen by this) with fresh LoRA adapters from a LoraConfig;
    `base_name` (the run's model.name) is what the adapter's checkpoints will name as their base."""
    from peft import LoraConfig, get_peft_model

    check_targets(model, lora)
    settings = LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules) if lora.target_modules is not None else "all-linear",
        task_type="CAUSAL_LM",
    )
    adapted = get_peft_model(model, settings, adapter_name=ADAPTER_NAME)
    adapted.peft_config[ADAPTER_NAME].base_model_name_or_path = base_name
    return adapted


def scaling(lora: Any) -> float:
    """peft's scale of B @ A (without rsLoRA)."""
    return lora.alpha / lora.rank


def merge_state(state: dict[str, torch.Tensor], lora_scaling: float) -> dict[str, torch.Tensor]:
    """A peft model's state dict -> the plain model's, with every adapter merged into its layer.

    Names lose peft's `base_model.model.` prefix and `.base_layer`; each adapted weight becomes
    W + scaling * B @ A, computed in float32 and returned in W's dtype; the adapters are dropped.

    >>> state = {"base_model.model.f.base_layer.weight": torch.zeros(2, 2),
    ...          "base_model.model.f.lora_A.default.weight": torch.ones(1, 2),
    ...          "base_model.model.f.lora_B.default.weight": torch.ones(2, 1)}
    >>> merge_state(state, 0.5)["f.weight"]
    tensor([[0.5000, 0.5000],
            [0.5000, 0.5000]])
    """
    merged: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        plain = name.removeprefix(_PEFT_PREFIX)
        if ".lora_" in plain:
            continue
        if plain.endswith(".base_layer.weight"):
            layer = name.removesuffix(".base_layer.weight")
            down = state[f"{layer}.lora_A.{ADAPTER_NAME}.weight"].float()  # (r, in)
            up = state[f"{layer}.lora_B.{ADAPTER_NAME}.weight"].float()  # (out, r)
            tensor = (tensor.float() + lora_scaling * (up @ down)).to(tensor.dtype)
        merged[plain.replace(".base_layer.", ".")] = tensor
    return merged


class AdaptersDisabled(torch.nn.Module):
    """The KL reference of a LoRA run: the trained model's forward with its adapters off. Holds the
    model without registering it, so it adds no parameters and no state dict entries."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        object.__setattr__(self, "model_to_run", model)

    def forward(self, **inputs: Any) -> Any:
        peft_model = _peft_model(self.model_to_run)
        with peft_model.disable_adapter():
            return self.model_to_run(**inputs)


def _peft_model(model: torch.nn.Module) -> Any:
    inner = getattr(model, "module", model)  # DDP keeps the model in .module
    if not hasattr(inner, "disable_adapter"):
        raise TypeError(f"expected a peft model, got {type(inner).__name__}")
    return inner


def adapter_base(path: str | Path) -> str:
    """The base model an adapter folder was trained on (a preset name, folder or hub id)."""
    config = json.loads((Path(path) / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    base = config.get("base_model_name_or_path")
    if not base:
        raise UnsupportedModelError(f"{Path(path) / ADAPTER_CONFIG} does not name its base model")
    return str(base)


def load_adapter(base: torch.nn.Module, path: str | Path, trainable: bool) -> torch.nn.Module:
    """The base with the adapter saved at `path`: trainable (resume) or merged into plain weights."""
    from peft import PeftModel

    try:
        model = PeftModel.from_pretrained(base, str(path), adapter_name=ADAPTER_NAME, is_trainable=trainable)
    except RuntimeError as error:
        if "size mismatch" not in str(error):
            raise
        first = next((line.strip() for line in str(error).splitlines() if "size mismatch" in line), "")
        raise CheckpointError(
            f"the LoRA adapter {path} does not fit the base model {adapter_base(path)!r} it names in "
            f"{ADAPTER_CONFIG} (was it trained on another model?): {first}"
        ) from error
    return model if trainable else model.merge_and_unload()
