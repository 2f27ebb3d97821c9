"""Which rollouts a step trains on: zero-variance filtering, dynamic sampling, truncation masking.

A step draws `prompts_per_step` prompts (round 1) and rolls out a group for each. A group whose
rewards are all equal teaches nothing (every advantage is 0); `grpo.filter_zero_variance` drops it.

`grpo.dynamic_sampling` (DAPO's dynamic sampling, Yu et al. 2025; verl's `filter_groups`, SkyRL's
`replace`) then draws further rounds of `prompts_per_step` prompts, rolls them out and scores them,
until the step holds `prompts_per_step` groups with signal or `max_rounds` extra rounds have run.
Groups with signal beyond `prompts_per_step` are not trained, so a step's batch never grows. Round
r's prompts are a function of (seed, step, r) alone (`PromptOrder.refill`), never of how earlier
rounds went, so a resumed run draws the same prompts. Every group drawn counts in the step's reward
and rollout metrics: each is a fresh draw from the training set.

`grpo.mask_truncated` leaves trajectories cut off by a limit (`Trajectory.truncated`) out of the
loss, as TRL's `mask_truncated_completions` and DAPO's overlong filtering do: their reward is real,
so their group's advantages are computed with them, and then they are left out of the batch. A group
whose trajectories are all truncated trains nothing, so it does not count as a group with signal.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from rlfactory_nb.algo.advantages import zero_variance_groups
from rlfactory_nb.data.rows import PromptOrder, Row
from rlfactory_nb.rewards.runner import RewardOutcome
from rlfactory_nb.train.metrics import StepTimer
from rlfactory_nb.types import Trajectory

Groups = list[list[Trajectory]]


def groups_with_signal(
    rewards: Tensor, truncated: Tensor, filter_zero_variance: bool, mask_truncated: bool
) -> list[int]:
    """Indices of the groups a step can train on, in order: rewards and truncated are (N, G).

    >>> rewards = torch.tensor([[1.0, 1.0], [0.0, 1.0], [0.0, 1.0], [1.0, 0.0]])
    >>> truncated = torch.tensor([[False, False], [True, True], [False, True], [False, False]])
    >>> groups_with_signal(rewards, truncated, filter_zero_variance=True, mask_truncated=True)
    [2, 3]
    >>> groups_with_signal(rewards, truncated, filter_zero_variance=False, mask_truncated=False)
    [0, 1, 2, 3]
    """
    useful = torch.ones(rewards.shape[0], dtype=torch.bool)  # (N,)
    if filter_zero_variance:
        useful &= ~zero_variance_groups(rewards)
    if mask_truncated:
        useful &= ~truncated.all(dim=1)
    return useful.nonzero().flatten().tolist()


def without_truncated(
    trajectories: Sequence[Trajectory], advantages: Tensor | list[list[float]]
) -> tuple[list[Trajectory], Tensor | list[list[float]]]:
    """The trajectories that are not truncated, with their advantages (one each (B,), or per token).

    >>> from rlfactory_nb.types import Trajectory
    >>> kept, advantages = without_truncated(
    ...     [Trajectory([1]), Trajectory([2], finish_reason="length")], torch.tensor([0.5, -0.5]))
    >>> [t.prompt_ids for t in kept], advantages.tolist()
    ([[1]], [0.5])
    """
    keep = [index for index, traj in enumerate(trajectories) if not traj.truncated]
    kept = [trajectories[index] for index in keep]
    if isinstance(advantages, Tensor):
        return kept, advantages[torch.tensor(keep, dtype=torch.long)]
    return kept, [advantages[index] for index in keep]


@dataclass
class StepGroups:
    """Every group a step rolled out, over all its rounds, with its outcomes."""

    groups: Groups = field(default_factory=list)
    outcomes: list[list[RewardOutcome]] = field(default_factory=list)
    rounds: int = 0

    def add(self, groups: Groups, outcomes: list[list[RewardOutcome]]) -> None:
        """One round's groups; `prompt_index` in their metadata counts on across rounds."""
        for offset, group in enumerate(groups):
            for traj in group:
                traj.metadata.update(prompt_index=len(self.groups) + offset, round=self.rounds + 1)
        self.groups += groups
        self.outcomes += outcomes
        self.rounds += 1

    @property
    def rewards(self) -> Tensor:
        """The training reward of every trajectory, (N, G)."""
        return torch.tensor([[outcome.score for outcome in group] for group in self.outcomes])

    @property
    def truncated(self) -> Tensor:
        """Which trajectories a limit cut off, (N, G)."""
        return torch.tensor([[traj.truncated for traj in group] for group in self.groups], dtype=torch.bool)

    def trained(self, grpo: Any) -> list[int]:
        """The groups to train on: those with signal, at most `prompts_per_step` under dynamic sampling."""
        found = groups_with_signal(
            self.rewards, self.truncated, grpo.filter_zero_variance, grpo.mask_truncated
        )
        return found[: grpo.prompts_per_step] if grpo.dynamic_sampling is not None else found


async def draw_groups(
    step: int,
    order: PromptOrder,
    rows: Sequence[Row],
    grpo: Any,
    rollout: Callable[[list[Row], int], Awaitable[Groups]],
    score: Callable[[Groups], Awaitable[list[list[RewardOutcome]]]],
    timer: StepTimer,
) -> StepGroups:
    """Roll out and score the step's prompts, then dynamic sampling's extra rounds while needed.
    `rollout(rows, first)` gets the step's index of rows[0] (prompts count on across rounds)."""
    drawn = StepGroups()
    extra_rounds = grpo.dynamic_sampling.max_rounds if grpo.dynamic_sampling is not None else 0
    for round_ in range(extra_rounds + 1):
        indices = order.indices(step) if round_ == 0 else order.refill(step, round_)
        with timer("rollout"):
            groups = await rollout([rows[index] for index in indices], len(drawn.groups))
        with timer("reward"):
            outcomes = await score(groups)
        drawn.add(groups, outcomes)
        if len(drawn.trained(grpo)) >= grpo.prompts_per_step:
            break
    return drawn
