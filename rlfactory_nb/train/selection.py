"""Which rollouts a step trains on: zero-variance filtering, dynamic sampling, truncation masking.

A step draws `prompts_per_step` prompts (round 1) and rolls out a group for each. A group whose
rewards are all equal teaches nothing (every advantage is 0); `grpo.filter_zero_variance` drops it.

`grpo.dynamic_sampling` (DAPO's dynamic sampling, Yu et al. 2025; verl's `filter_groups`, SkyRL's
`replace`) then draws further rounds of `prompts_per_step` prompts, rolls them out and scores them,
until the step holds `prompts_per_step` groups with signal or `max_rounds` extra rounds have run.
Groups with signal beyond `prompts_per_step` are not trained, so a step's batch never grows. Round
r's prompts are a function of (seed, step, r) alone (`PromptOrder.refill`), never of how earlier
rounds went, so a resumed run draws the same prompts. Every group drawn counts in the step's reward
and rollout metrics: each is a fresh draw from the training set. The step source (train/steps.py)
draws the rounds; this module says which of their groups a step trains on.

`grpo.mask_truncated` leaves trajectories cut off by a limit (`Trajectory.truncated`) out of the
loss, as TRL's `mask_truncated_completions` and DAPO's overlong filtering do: their reward is real,
so their group's advantages are computed with them, and then they are left out of the batch. A group
whose trajectories are all truncated trains nothing, so it does not count as a group with signal.

A group one of whose episodes failed before the model's first token (its environment could not be
made or reset: a server at capacity) is left out whole, before scoring: that trajectory has no
token to train, and the policy did nothing to earn its reward, so scoring it (as 0, say) would
teach the siblings an advantage over an infrastructure failure and pull the step's reward down.
Such groups count in `groups/env_failed` and the failures in `env/errors/<kind>`; dynamic sampling
refills them like groups without signal. A step in which every episode failed stops the run with
the environment's own error (`EnvironmentFailed`): nothing in it measured the policy, and so does a
run that ends without training a group because every group had such a failure (`GroupTally`). A
run whose groups all ran but had equal rewards ends with a warning: that is the reward's signal to
read, not a failure.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from rlfactory_nb.algo.advantages import zero_variance_groups
from rlfactory_nb.errors import EnvironmentFailed
from rlfactory_nb.rewards.runner import RewardOutcome
from rlfactory_nb.rollout.episode import failed_before_start
from rlfactory_nb.types import Trajectory

Groups = list[list[Trajectory]]
log = logging.getLogger(__name__)
SESSIONS_HINT = "grpo.prompts_per_step x grpo.group_size, as they stay open until scored"


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


def split_failed(groups: Groups) -> tuple[Groups, Groups]:
    """(the groups every episode of which started, those with one that failed before its first token)."""
    failed = [any(failed_before_start(traj) for traj in group) for group in groups]
    return [g for g, bad in zip(groups, failed) if not bad], [g for g, bad in zip(groups, failed) if bad]


@dataclass
class StepGroups:
    """Every group a step rolled out, over all its rounds: the scored ones with their outcomes, and
    those left out because an episode failed before its first token."""

    groups: Groups = field(default_factory=list)
    outcomes: list[list[RewardOutcome]] = field(default_factory=list)
    failed: Groups = field(default_factory=list)
    """groups left out unscored: one of their episodes failed before the model's first token"""
    rounds: int = 0
    prompts: int = 0
    """prompts rolled out so far, scored or failed (a round's first prompt index)"""

    def add(self, groups: Groups, outcomes: list[list[RewardOutcome]]) -> None:
        """One round's groups, in the order drawn, and the outcomes of those that `split_failed`
        keeps; `prompt_index` in their metadata counts on across rounds (the SampleId's prompt)."""
        for offset, group in enumerate(groups):
            for traj in group:
                traj.metadata.update(prompt_index=self.prompts + offset, round=self.rounds + 1)
        played, failed = split_failed(groups)
        self.groups += played
        self.outcomes += outcomes
        self.failed += failed
        self.rounds += 1
        self.prompts += len(groups)

    def check_some_episode_ran(self, step: int) -> None:
        """Raise EnvironmentFailed, with the environment's first error, when every episode failed."""
        trajectories = [traj for group in [*self.groups, *self.failed] for traj in group]
        errors = [traj.metadata.get("env_error") for traj in trajectories]
        if not trajectories or not all(errors):
            return
        first = errors[0]
        kinds = sorted({error["kind"] for error in errors})
        raise EnvironmentFailed(
            first["kind"],
            f"step {step}: every one of its {len(errors)} episodes failed in its environment "
            f"(in {', '.join(kinds)}), so nothing measured the policy; the first: {first['message']}. "
            f"Fix the environment (a server needs room for every episode of a step, {SESSIONS_HINT}), "
            "then train again or resume.",
        )

    @property
    def rewards(self) -> Tensor:
        """The training reward of every trajectory, (N, G)."""
        return torch.tensor([[outcome.score for outcome in group] for group in self.outcomes])

    @property
    def truncated(self) -> Tensor:
        """Which trajectories a limit cut off, (N, G)."""
        return torch.tensor([[traj.truncated for traj in group] for group in self.groups], dtype=torch.bool)

    def labelled(self, step: int, limit: int) -> list[Trajectory]:
        """The first `limit` trajectories (all when < 0), then the failed groups' (unscored: reward
        None), each with its step and reward in its metadata: what the run folder keeps."""
        flat: list[tuple[Trajectory, RewardOutcome | None]] = [
            (traj, outcome) for group, scored in zip(self.groups, self.outcomes) for traj, outcome in zip(group, scored)
        ]
        flat += [(traj, None) for group in self.failed for traj in group]
        chosen = flat if limit < 0 else flat[:limit]
        for traj, outcome in chosen:
            traj.metadata.update(
                step=step,
                reward=outcome.score if outcome is not None else None,
                reward_components=outcome.components if outcome is not None else {},
            )
        return [traj for traj, _ in chosen]

    def trained(self, grpo: Any) -> list[int]:
        """The groups to train on: those with signal, at most `prompts_per_step` under dynamic sampling."""
        if not self.groups:
            return []
        found = groups_with_signal(
            self.rewards, self.truncated, grpo.filter_zero_variance, grpo.mask_truncated
        )
        return found[: grpo.prompts_per_step] if grpo.dynamic_sampling is not None else found


@dataclass
class GroupTally:
    """What a run's steps did with their groups, for the verdict at its end (`check`)."""

    steps: int = 0
    scored: int = 0
    """groups whose every episode ran, scored"""
    trained: int = 0
    failed: int = 0
    """groups left out because an episode failed before its first token"""
    first_error: dict[str, str] | None = None
    """the first such failure's `env_error` record"""

    def add(self, drawn: StepGroups, trained: int) -> None:
        """One step's groups (`trained` of them trained)."""
        self.steps += 1
        self.scored, self.trained, self.failed = self.scored + len(drawn.groups), self.trained + trained, self.failed + len(drawn.failed)
        if self.first_error is None:
            errors = (traj.metadata["env_error"] for group in drawn.failed for traj in group if failed_before_start(traj))
            self.first_error = next(errors, None)

    def check(self, run: str) -> None:
        """Raise EnvironmentFailed when the run's steps trained no group and failures are why (no
        group ran whole); warn when they trained none because every group's rewards were equal (or
        its trajectories all truncated, under grpo.mask_truncated)."""
        if self.trained or not self.steps:
            return
        if self.scored == 0 and self.first_error is not None:
            raise EnvironmentFailed(
                self.first_error["kind"],
                f"run {run} trained no group in its {self.steps} step(s): in each of its {self.failed} groups an "
                f"episode failed before the model's first token (env/errors in metrics.jsonl); the first: "
                f"{self.first_error['message']}. Fix the environment (a server needs room for every "
                f"episode of a step, {SESSIONS_HINT}), then train again.",
            )
        log.warning(
            "run %s trained no group in its %d step(s): all %d scored groups had equal rewards or only "
            "truncated trajectories (groups/zero_variance, rollout/masked_truncated); check the reward on "
            "live samples (rf.RewardLab)", run, self.steps, self.scored,
        )
