"""The model a backend trains, made from a loaded model and the run config, in one place.

Every backend (the local one, each DDP or FSDP policy worker) calls `TrainingSetup.prepare` on the
model it holds, so all of them train the same thing:

    master dtype   trained weights and AdamW state in float32 (`rlfactory_nb.models.precision`)
    LoRA           with `model.lora`: the base frozen in the compute dtype, adapters in float32
    checkpointing  with `model.gradient_checkpointing`: each decoder layer's activations recomputed
                   in backward (transformers' non-reentrant checkpointing, which works under peft,
                   DDP and FSDP alike)
    packing        with `grpo.padding_free`: the attention implementation is checked to keep packed
                   sequences apart (`rlfactory_nb.train.packing.check_attention`), a ConfigError
                   at run start rather than a silently wrong mask; sdpa becomes per-sequence sdpa
                   (`use_packed_attention`), so a row pays each sequence's attention, not T^2

and `engine_weights` turns the trainer's state dict into what engines load: adapters merged, in the
compute dtype.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch

from rlfactory_nb.config import DEFAULTS
from rlfactory_nb.models import lora as lora_adapters
from rlfactory_nb.models.lora import is_adapted
from rlfactory_nb.models.precision import Precision, apply_dtypes, engine_state
from rlfactory_nb.train.packing import use_packed_attention

__all__ = ["TrainingSetup", "is_adapted"]


@dataclass(frozen=True)
class TrainingSetup:
    precision: Precision
    lora: Any = DEFAULTS.model.lora
    """the run's LoraConfig, or None for full fine-tuning"""
    gradient_checkpointing: bool = DEFAULTS.model.gradient_checkpointing
    base_name: str = ""
    """the run's model.name, recorded in adapter checkpoints as their base"""
    padding_free: bool = DEFAULTS.grpo.padding_free
    """the run's grpo.padding_free: the update packs micro-batches into rows"""

    @classmethod
    def from_config(cls, cfg: Any, device: torch.device) -> TrainingSetup:
        return cls(
            precision=Precision.from_config(cfg.model, device),
            lora=cfg.model.lora,
            gradient_checkpointing=cfg.model.gradient_checkpointing,
            base_name=cfg.model.name,
            padding_free=cfg.grpo.padding_free,
        )

    def prepare(self, model: torch.nn.Module) -> torch.nn.Module:
        """`model` (a plain transformers model, or an already adapted one on resume) ready to train."""
        if self.padding_free:
            use_packed_attention(model)
        if self.lora is not None and not is_adapted(model):
            model = lora_adapters.apply_lora(model, self.lora, self.base_name)
        apply_dtypes(model, self.precision)
        if self.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return model

    def engine_weights(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The trainer's state dict as engines load it: adapters merged, floats in the compute dtype."""
        if self.lora is not None:
            state = lora_adapters.merge_state(state, lora_adapters.scaling(self.lora))
        return engine_state(state, self.precision)

    def reference(self, model: torch.nn.Module) -> torch.nn.Module:
        """The frozen KL reference for the trained `model`: its adapters switched off under LoRA (no
        copy), else a copy of its starting weights in the compute dtype (no master needed)."""
        if self.lora is not None:
            return lora_adapters.AdaptersDisabled(model)
        reference = copy.deepcopy(model).to(self.precision.compute)
        return reference.eval().requires_grad_(False)
