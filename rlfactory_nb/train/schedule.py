"""Learning-rate schedules (`grpo.lr_schedule`, `grpo.warmup_steps`): the rate of each training step.

For training step s (1-based) of T = `grpo.steps`, with W = `warmup_steps`:

    rate(s) = peak * warmup(s) * decay(s)
    warmup(s) = s / W for s <= W, then 1                    (linear warmup; step 1 already trains)
    p(s) = (s - W - 1) / (T - W)                            (0 at the first step after warmup, < 1 at T)
    decay: constant 1 | linear 1 - p | cosine (1 + cos(pi p)) / 2   (Loshchilov & Hutter 2017)

The rate is a pure function of the step. Each backend (the local trainer, and every DDP or FSDP rank
of the Ray workers) sets it at the start of the step it is told to run, so ranks cannot disagree,
and the scheduler's whole state is the peak rate (the optimizer's `initial_lr`, kept in its state
dict like torch's own schedulers keep it) and the step, both in every checkpoint. A resumed run
therefore has the same rate at every later step as one never interrupted. All the optimizer steps
of one training step (mini-batches, PPO epochs) share its rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

DECAYS: dict[str, Callable[[float], float]] = {
    "constant": lambda progress: 1.0,
    "linear": lambda progress: 1.0 - progress,
    "cosine": lambda progress: 0.5 * (1.0 + math.cos(math.pi * progress)),
}
"""decay factor by schedule name, given the progress p in [0, 1) through the steps after warmup"""


@dataclass(frozen=True)
class LRSchedule:
    """Warmup then decay over a run of `steps` training steps (module docstring).

    >>> schedule = LRSchedule("linear", warmup_steps=2, steps=6)
    >>> [schedule.factor(step) for step in range(1, 7)]
    [0.5, 1.0, 1.0, 0.75, 0.5, 0.25]
    >>> [round(LRSchedule("cosine", 0, 4).factor(step), 3) for step in range(1, 5)]
    [1.0, 0.854, 0.5, 0.146]
    """

    name: str = "constant"
    warmup_steps: int = 0
    steps: int = 1

    def __post_init__(self) -> None:
        if self.name not in DECAYS:
            raise ValueError(f"unknown lr_schedule {self.name!r}; known: {', '.join(DECAYS)}")

    @classmethod
    def from_config(cls, grpo: Any) -> LRSchedule:
        return cls(grpo.lr_schedule, grpo.warmup_steps, grpo.steps)

    def factor(self, step: int) -> float:
        """The share of the peak rate that training step `step` (1-based) uses."""
        if step <= self.warmup_steps:
            return step / self.warmup_steps
        progress = (step - self.warmup_steps - 1) / max(self.steps - self.warmup_steps, 1)
        return DECAYS[self.name](min(progress, 1.0))

    def apply(self, optimizer: torch.optim.Optimizer, step: int) -> float:
        """Set every parameter group's rate for `step`; returns the first group's."""
        for group in optimizer.param_groups:
            group.setdefault("initial_lr", group["lr"])  # the peak, as torch's schedulers record it
            group["lr"] = group["initial_lr"] * self.factor(step)
        return optimizer.param_groups[0]["lr"]
