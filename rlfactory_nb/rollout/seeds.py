"""Per-request seeds: the same run seed samples the same tokens, whatever order requests run in.

An engine's own generator hands seeds out in the order requests reach it, which depends on how
trajectories interleave with tool calls and batches; three runs of one config and seed then sampled
different tokens. A trainer's rollout instead names each sample (`SampleId`: run seed, step, prompt,
sample within the group), and the agent derives each turn's seed from that name and the turn index,
so a request's seed depends on what it is, never on when it runs. A resumed run derives the same
seeds again, with no generator state to save.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


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
