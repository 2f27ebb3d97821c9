"""The policy-loss registry: losses chosen by name (or `module:function`), each declaring its reduction.

A loss is a pure function over (B, T) tensors (see `rlfactory_nb.algo.losses`); registering it says
what it is a mean over, which is what gradient accumulation needs to weigh micro-batches exactly
(`rlfactory_nb.train.update.loss_weight`).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from torch import Tensor

from rlfactory_nb.code_names import load_object
from rlfactory_nb.config import DEFAULTS
from rlfactory_nb.errors import ConfigError, RegistryKeyError

Metrics = dict[str, float]


@dataclass(frozen=True)
class LossArgs:
    """The knobs of a policy loss. `LossArgs.from_config(cfg.grpo)` reads them from a run config."""

    clip_low: float = DEFAULTS.grpo.clip_low
    """PPO clip range below 1: ratios under 1 - clip_low stop pushing negative-advantage tokens down"""
    clip_high: float = DEFAULTS.grpo.clip_high
    """PPO clip range above 1: ratios over 1 + clip_high stop pushing positive-advantage tokens up"""
    token_budget: int | None = DEFAULTS.grpo.token_budget
    """dr_grpo's constant divisor (the generation budget in tokens); None: the batch's padded length"""
    truncate_ratio: float | None = DEFAULTS.grpo.truncate_ratio
    """TIS cap on the old/rollout importance weight when rollout logprobs are given (None: no cap)"""
    importance_level: Literal["token", "sequence"] = DEFAULTS.grpo.importance_level
    """that importance weight per token, or one per sequence (see `importance_ratio`)"""
    importance_cap_mode: Literal["truncate", "mask"] = DEFAULTS.grpo.importance_cap_mode
    """weights over the cap are capped ("truncate") or zeroed ("mask")"""

    @classmethod
    def from_config(cls, cfg: Any, **overrides: Any) -> LossArgs:
        """Read the fields from any object that has them (e.g. `GRPOConfig`); missing ones keep defaults."""
        values = {name: getattr(cfg, name) for name in cls.__dataclass_fields__ if hasattr(cfg, name)}
        return cls(**{**values, **overrides})


class PolicyLoss(Protocol):
    def __call__(
        self,
        logprobs: Tensor,
        old_logprobs: Tensor,
        advantages: Tensor,
        mask: Tensor,
        args: LossArgs = ...,
        rollout_logprobs: Tensor | None = None,
    ) -> tuple[Tensor, Metrics]: ...


Reduction = Literal["sequence", "token"]
"""what a loss is a mean over: sequences (each weighs the same) or all sampled tokens of the batch"""


@dataclass(frozen=True)
class RegisteredLoss:
    function: PolicyLoss
    reduction: Reduction
    """micro-batches are weighted by their share of this (see `rlfactory_nb.train.update`)"""


_LOSSES: dict[str, RegisteredLoss] = {}


def register_loss(name: str, reduction: Reduction = "sequence") -> Callable[[PolicyLoss], PolicyLoss]:
    """Decorator: make a policy loss available as `get_loss(name)` and by `grpo.loss: name` in configs.

    `reduction` declares what the loss averages over, "sequence" or "token": gradient accumulation
    weighs each micro-batch by its share of that, which is what keeps a split batch's gradient exact.
    A loss defined outside this package is named in configs as `module:function` (the module must be
    importable on the workers, where the registration runs again on import).
    """
    if reduction not in ("sequence", "token"):
        raise ConfigError(f"register_loss reduction must be 'sequence' or 'token', got {reduction!r}")

    def register(fn: PolicyLoss) -> PolicyLoss:
        if name in _LOSSES and _LOSSES[name].function is not fn:
            raise ConfigError(f"a policy loss named {name!r} is already registered; choose another name")
        _LOSSES[name] = RegisteredLoss(fn, reduction)
        return fn

    return register


def get_loss(name: str) -> PolicyLoss:
    """The policy loss registered as `name` (or imported from `module:function`); an unknown name is
    an error listing the known ones."""
    return _registered(name).function


def loss_reduction(name: str) -> Reduction:
    """What the loss `name` declared it averages over: "sequence" or "token"."""
    return _registered(name).reduction


def _registered(name: str) -> RegisteredLoss:
    if ":" in name:
        return _imported(name)
    if name not in _LOSSES:
        close = difflib.get_close_matches(name, _LOSSES, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise RegistryKeyError(
            f"unknown policy loss {name!r}; known losses: {', '.join(sorted(_LOSSES))}, or "
            f"'module:function' for one registered in your own module.{hint}"
        )
    return _LOSSES[name]


def _imported(spec: str) -> RegisteredLoss:
    """`module:function` (or `file.py:function`) where the function carries `@register_loss(...)`
    (importing registers it); one that loads nothing is a LoadError naming `grpo.loss`."""
    function = load_object(spec, "grpo.loss", "policy loss")
    for registered in _LOSSES.values():
        if registered.function is function:
            return registered
    raise RegistryKeyError(
        f"policy loss {spec!r} is not registered: decorate it with "
        "@register_loss(name, reduction='sequence' or 'token') so its reduction is known"
    )


def loss_names() -> list[str]:
    return sorted(_LOSSES)
