"""Asynchronous GRPO: the next steps' rollouts are generated while the trainer updates, on samples
at most `grpo.max_staleness` weight versions behind the policy being updated.

    version v    the weights after v trainer steps; step s trains version s-1 into version s
    staleness    of a sample that step s trains on: (s - 1) - the oldest version that sampled it
    bound k      grpo.max_staleness

The rule that keeps the bound: step s's rollouts start only once the engines hold version >= s-1-k,
and once the trainer has asked for step s-k (so at most k steps are generated ahead of the one being
trained). Versions only go up, so every turn that step s trains on was sampled by a version in
[s-1-k, s-1]. k = 0 is the synchronous loop: step s's rollouts start when the trainer asks for them,
with version s-1 on the engines.

A weight sync does not wait for the rollouts in flight: their later turns are sampled by the new
weights, and each turn records its version (`Turn.policy_version`). That is AReaL's choice over
dropping groups past the bound; docs/decisions.md has the measurement. A step whose samples break
the bound anyway (an engine that restarted with older weights) fails with `StaleSamples` instead of
training on mislabelled samples.

Rollouts in flight when the run stops or crashes are discarded; step s's prompts are a function of
(seed, s), so a resumed run generates them again and loses or repeats no step.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from rlfactory_nb.errors import ConfigError
from rlfactory_nb.train.versioned_engine import StaleSamples
from rlfactory_nb.types import Trajectory


class RolloutSchedule:
    """Which steps' rollouts may start now, by the rule above. It starts nothing itself: the step
    source (`rlfactory_nb.train.steps.StepSource`) starts the steps that `publish` and `request`
    return, each once.

    `version`: the weights the engines hold now (the step a run starts or resumes from);
    `last_step`: no rollouts are started ahead of time beyond it (a step asked for still is)."""

    def __init__(self, max_staleness: int, version: int, last_step: int):
        if max_staleness < 0:
            raise ConfigError(f"max_staleness must be >= 0, got {max_staleness}")
        self.max_staleness = max_staleness
        self.version = version
        self.last_step = last_step
        self.requested = version
        self.next = version + 1
        """the first step not started yet"""

    def publish(self, version: int) -> list[int]:
        """Every engine now holds `version` (a weight sync finished): the steps that may start now."""
        if version < self.version:
            raise StaleSamples(f"the engines' weights version went back from {self.version} to {version}")
        self.version = version
        return self._due()

    def request(self, step: int) -> list[int]:
        """The trainer asks for step `step`'s rollouts: the steps that may start now."""
        self.requested = max(self.requested, step)
        return self._due()

    def _due(self) -> list[int]:
        k, due = self.max_staleness, []
        while (
            self.next <= max(self.last_step, self.requested)  # ahead of time only up to the last step
            and self.next <= self.requested + k
            and self.next - 1 - k <= self.version
        ):
            due.append(self.next)
            self.next += 1
        return due


def sample_staleness(trajectories: Sequence[Trajectory], trained_version: int) -> list[int]:
    """Per trajectory, how many versions its oldest turn is behind `trained_version` (the weights the
    step updates); turns without a version (an unversioned engine) count as current.

    >>> from rlfactory_nb.types import Turn
    >>> traj = Trajectory([1], turns=[Turn("a", policy_version=3), Turn("b", policy_version=4)])
    >>> sample_staleness([traj], trained_version=4)
    [1]
    """
    return [trained_version - min(_versions(traj), default=trained_version) for traj in trajectories]


def check_versions(trajectories: Sequence[Trajectory], trained_version: int, bound: int, step: int) -> None:
    """Raise StaleSamples when a trajectory's versions go backwards from turn to turn, come from
    weights the trainer has not made yet, or lie more than `bound` versions behind."""
    for traj in trajectories:
        versions = _versions(traj)
        if any(later < earlier for earlier, later in itertools.pairwise(versions)):
            raise StaleSamples(
                f"step {step}: trajectory {traj.id} was sampled by weights versions {versions}, which go "
                "backwards: an engine restarted with older weights. Resume from the last checkpoint."
            )
        if versions and (max(versions) > trained_version or trained_version - min(versions) > bound):
            raise StaleSamples(
                f"step {step}: trajectory {traj.id} was sampled by weights versions {versions}, but step "
                f"{step} trains version {trained_version} and takes samples at most {bound} versions "
                "behind (grpo.max_staleness): an engine is serving mislabelled weights. Resume from "
                "the last checkpoint."
            )


def _versions(traj: Trajectory) -> list[int]:
    return [turn.policy_version for turn in traj.turns if turn.policy_version is not None]


def effective_staleness(cfg: Any, device_type: str, uses_ray: bool) -> tuple[int, str]:
    """The bound a run gets and why: grpo.max_staleness, or 0 when the engines and the trainer
    time-share the accelerators (cluster.colocate, or one process on a GPU), since there an engine
    cannot generate while the trainer updates."""
    asked = cfg.grpo.max_staleness
    if asked == 0:
        return 0, "synchronous (grpo.max_staleness: 0)"
    if cfg.cluster.layout().colocate or (not uses_ray and device_type == "cuda"):
        return 0, (
            f"synchronous: grpo.max_staleness {asked} is ignored because engines and trainer share the "
            "GPUs (colocated); give engines GPUs of their own (cluster.num_gpus >= 2, colocate: false) "
            "to overlap them"
        )
    return asked, f"asynchronous: samples at most {asked} weight version(s) behind"


def overlap_metrics(
    staleness: Sequence[int],
    bound: int,
    waited_s: float,
    engine_busy_s: float,
    trainer_busy_s: float,
    wall_s: float,
) -> dict[str, float]:
    """One step's asynchrony metrics: staleness of the trained samples, the share of the step's wall
    time the engines and the trainer were busy, and how long the trainer waited for rollouts.

    >>> overlap_metrics([0, 1, 1, 0], 1, waited_s=0.5, engine_busy_s=3.0, trainer_busy_s=2.0, wall_s=4.0)["async/engine_busy_share"]
    0.75
    """
    wall = max(wall_s, 1e-9)
    return {
        "async/max_staleness": bound,
        "async/staleness_mean": sum(staleness) / len(staleness) if staleness else 0.0,
        "async/staleness_max": max(staleness, default=0),
        "async/engine_busy_share": min(1.0, engine_busy_s / wall),
        "async/trainer_busy_share": min(1.0, trainer_busy_s / wall),
        "time/wait_rollouts_s": waited_s,
    }
