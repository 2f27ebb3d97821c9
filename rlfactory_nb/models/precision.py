"""Mixed precision: float32 master weights and optimizer state under bfloat16 compute.

bfloat16 keeps 8 bits of mantissa, so an AdamW step at a real run's learning rate (1e-6) is far below
half a unit in the last place of a typical weight and rounds away: measured on the tiny model, one
step changed 0.3% of the parameters in bfloat16 against 62.9% in float32. So the weights the
optimizer updates (the master) and its state stay float32, and only the arithmetic runs in the
compute dtype (`model.dtype`):

    local, DDP   float32 parameters; forward and backward under `torch.autocast(compute)`, so every
                 matmul runs in bfloat16 while gradients land in float32 on the float32 parameters
    FSDP         float32 shards; `MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=float32)`
                 gathers each layer in bfloat16 and reduces gradients in float32
    LoRA         the frozen base in the compute dtype (nothing updates it, so no master is needed),
                 the adapters in float32 (they are what AdamW steps)

Engines receive weights cast to the compute dtype (`engine_state`). Checkpoints hold the float32
master, so a resumed run continues exactly; `rf.export` writes a bfloat16 (or any) folder.

float16 compute would need loss scaling (its 5 exponent bits underflow small gradients), which this
project does not implement, so it is refused with an error that says what to use instead.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from rlfactory_nb.config import ConfigError


@dataclass(frozen=True)
class Precision:
    """The two dtypes of a run: what arithmetic runs in, and what the trained weights are kept in."""

    compute: torch.dtype
    master: torch.dtype

    @property
    def mixed(self) -> bool:
        """True when the forward and backward run in a narrower dtype than the master weights."""
        return self.compute != self.master

    @classmethod
    def from_config(cls, model_cfg: Any, device: torch.device) -> Precision:
        """Resolve `model.dtype` ("auto": bfloat16 on GPU, float32 on CPU) and `model.master_dtype`,
        refusing what would silently not learn."""
        compute = resolve_dtype(model_cfg.dtype, device)
        master = getattr(torch, model_cfg.master_dtype)
        if torch.float16 in (compute, master):
            problem = (
                "model.dtype / model.master_dtype: float16 training needs loss scaling, which "
                "rlfactory-nb does not implement; use bfloat16 compute (model.dtype: bfloat16) "
                "with a float32 master, or float32"
            )
            raise ConfigError([problem])
        if master != torch.float32:
            warnings.warn(
                f"model.master_dtype is {model_cfg.master_dtype}: AdamW steps smaller than half a unit "
                "in the last place of a weight round away (at lr 1e-6 almost all of them), so the model "
                "may report losses and rewards while barely changing. Use float32 unless memory forces it.",
                stacklevel=2,
            )
        if compute.itemsize > master.itemsize:
            raise ConfigError(
                [
                    f"model.dtype ({model_cfg.dtype}) is wider than model.master_dtype ({model_cfg.master_dtype})"
                ]
            )
        return cls(compute=compute, master=master)


FLOAT32 = Precision(compute=torch.float32, master=torch.float32)
"""no mixed precision: everything in float32 (what "auto" means on CPU)"""


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """ "auto": bfloat16 on GPU, float32 on CPU; else the named torch dtype (`model.dtype`, and the
    dtype `Policy.load` loads in)."""
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, dtype)


def autocast(device: torch.device, precision: Precision) -> contextlib.AbstractContextManager[Any]:
    """Run the enclosed forward (and its backward) in the compute dtype; nothing when not mixed."""
    if not precision.mixed:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=precision.compute)


def apply_dtypes(model: torch.nn.Module, precision: Precision) -> torch.nn.Module:
    """Trainable parameters in the master dtype; frozen ones (a LoRA base) in the compute dtype,
    since no optimizer step ever needs their low bits."""
    for parameter in model.parameters():
        dtype = precision.master if parameter.requires_grad else precision.compute
        if parameter.is_floating_point() and parameter.dtype != dtype:
            parameter.data = parameter.data.to(dtype)
    return model


def engine_state(state: Mapping[str, torch.Tensor], precision: Precision) -> dict[str, torch.Tensor]:
    """Weights as the engines run them: floating tensors in the compute dtype."""
    return {name: cast(tensor, precision.compute) for name, tensor in state.items()}


def cast(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return tensor.to(dtype) if tensor.is_floating_point() and tensor.dtype != dtype else tensor


def fsdp_policy(precision: Precision) -> Any:
    """FSDP2's mixed-precision policy: gather in the compute dtype, reduce gradients in float32."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if not precision.mixed:
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(param_dtype=precision.compute, reduce_dtype=torch.float32)
