"""Learning-rate schedules (`grpo.lr_schedule`, `grpo.warmup_steps`): the rate of each training step.

For training step s (1-based) of T = `grpo.steps`, with W = `warmup_steps`:

    rate(s) = lr * warmup(s) * decay(s)
    warmup(s) = s / W for s <= W, then 1                    (linear warmup; step 1 already trains)
    p(s) = (s - W - 1) / (T - W)                            (0 at the first step after warmup, < 1 at T)
    decay: constant 1 | linear 1 - p | cosine (1 + cos(pi p)) / 2   (Loshchilov & Hutter 2017)

The rate is a pure function of the config and the step. Each backend (the local trainer, and every
DDP or FSDP rank of the Ray workers) sets it at the start of the step it is told to run, so ranks
cannot disagree, and the scheduler's whole state is the step, which every checkpoint holds (next to
the run config). A resumed run therefore has the same rate at every later step as one never
interrupted, whatever rate the optimizer state it loads was saved with. All the optimizer steps of
one training step (mini-batches, PPO epochs) share its rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from rlfactory_nb.config import DEFAULTS
from rlfactory_nb.errors import ConfigError

DECAYS: dict[str, Callable[[float], float]] = {
    "constant": lambda progress: 1.0,
    "linear": lambda progress: 1.0 - progress,
    "cosine": lambda progress: 0.5 * (1.0 + math.cos(math.pi * progress)),
}
"""decay factor by schedule name, given the progress p in [0, 1) through the steps after warmup"""


@dataclass(frozen=True)
class LRSchedule:
    """Warmup then decay over a run of `steps` training steps (module docstring).

    >>> schedule = LRSchedule(1.0, "linear", warmup_steps=2, steps=6)
    >>> [schedule.factor(step) for step in range(1, 7)]
    [0.5, 1.0, 1.0, 0.75, 0.5, 0.25]
    >>> [round(LRSchedule(1e-3, "cosine", 0, 4).rate(step), 6) for step in range(1, 5)]
    [0.001, 0.000854, 0.0005, 0.000146]
    """

    lr: float
    """the peak rate (`grpo.lr`)"""
    name: str = DEFAULTS.grpo.lr_schedule
    warmup_steps: int = DEFAULTS.grpo.warmup_steps
    steps: int = DEFAULTS.grpo.steps

    def __post_init__(self) -> None:
        if self.name not in DECAYS:
            raise ConfigError(f"unknown lr_schedule {self.name!r}; known: {', '.join(DECAYS)}")

    @classmethod
    def from_config(cls, grpo: Any) -> LRSchedule:
        return cls(grpo.lr, grpo.lr_schedule, grpo.warmup_steps, grpo.steps)

    def factor(self, step: int) -> float:
        """The share of the peak rate `lr` that training step `step` (1-based) uses."""
        if step <= self.warmup_steps:
            return step / self.warmup_steps
        progress = (step - self.warmup_steps - 1) / max(self.steps - self.warmup_steps, 1)
        return DECAYS[self.name](min(progress, 1.0))

    def rate(self, step: int) -> float:
        return self.lr * self.factor(step)

    def apply(self, optimizer: torch.optim.Optimizer, step: int) -> None:
        """Set every parameter group's rate to the one of training step `step`."""
        for group in optimizer.param_groups:
            group["lr"] = self.rate(step)
