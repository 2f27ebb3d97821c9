"""Per-request seeds: the same run seed samples the same tokens, whatever order requests run in.

An engine's own generator hands seeds out in the order requests reach it, which depends on how
trajectories interleave with tool calls and batches; three runs of one config and seed then sampled
different tokens. A trainer's rollout instead names each sample (`SampleId`: run seed, step, prompt,
sample within the group), and the agent derives each turn's seed from that name and the turn index,
so a request's seed depends on what it is, never on when it runs. A resumed run derives the same
seeds again, with no generator state to save.

An episode's environment is reset with a seed of its own (`SampleId.reset_seed`). By default the
members of a group share it (`rollout.env_seed: group`): an environment that draws its task from the
seed (a game's secret code, a maze) then gives every member the same task, so GRPO's advantage
compares their play and not their luck; their sampling seeds still differ.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Literal

EnvSeed = Literal["group", "sample"]
"""what an environment's reset seed is shared by: a prompt's group, or nothing (one per sample)"""
RESET_TURN = -1
"""the turn index of the reset seed (turns count from 0, so it never meets a request's)"""


def request_seed(*parts: int) -> int:
    """A 63-bit seed that is a pure function of `parts` (stable across processes and versions).

    >>> request_seed(3, 1, 0, 0, 0)
    4034683132391041160
    >>> request_seed(3, 1, 0, 0, 1) != request_seed(3, 1, 0, 1, 0)
    True
    """
    digest = hashlib.blake2b(repr(tuple(int(part) for part in parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


@dataclass(frozen=True)
class SampleId:
    """Which sample of a training run a trajectory is; with a turn index it fixes a request's seed."""

    seed: int
    """the run's seed (grpo.seed)"""
    step: int
    """the step whose rollouts these are (1-based)"""
    prompt: int
    """the prompt's index within the step, counting on across dynamic sampling's rounds"""
    sample: int
    """the trajectory's index within its prompt's group"""

    def turn_seed(self, turn: int) -> int:
        """The seed of this trajectory's request for assistant turn `turn` (0-based)."""
        return request_seed(self.seed, self.step, self.prompt, self.sample, turn)

    def reset_seed(self, shared_by: EnvSeed = "group") -> int:
        """The seed this trajectory's environment is reset with: its group's, which every member
        shares ("group"), or its own ("sample").

        >>> a, b = SampleId(3, 1, 0, 0), SampleId(3, 1, 0, 1)
        >>> a.reset_seed() == b.reset_seed() != SampleId(3, 1, 1, 0).reset_seed()
        True
        >>> a.reset_seed("sample") != b.reset_seed("sample")
        True
        """
        if shared_by == "sample":
            return self.turn_seed(RESET_TURN)
        return request_seed(self.seed, self.step, self.prompt, RESET_TURN)


def episode_seed(sample_id: SampleId | None, shared_by: EnvSeed, sampling_seed: int | None) -> int:
    """The seed an episode's environment resets with: its SampleId's (`reset_seed`), else one fixed
    by the player's sampling seed, else a fresh one."""
    if sample_id is not None:
        return sample_id.reset_seed(shared_by)
    if sampling_seed is not None:
        return request_seed(sampling_seed, RESET_TURN)
    return random.getrandbits(63)
