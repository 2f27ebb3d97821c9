"""Reward functions for the fault suite, loaded by path like a user's reward.py: good ones, and ones
that raise, return NaN or hang."""

import time

from rlfactory_nb.types import Sample


def first_token(sample: Sample) -> float:
    """0, 1 or 2 from the first sampled token: varied within a group, so every step trains."""
    sampled = [t for t, m in zip(sample.trajectory.response_ids, sample.trajectory.loss_mask) if m]
    return float(sampled[0] % 3)


def raises(sample: Sample) -> float:
    return {"score": 1.0}["answer"]


def not_a_number(sample: Sample) -> float:
    return float("nan")


def hangs(sample: Sample) -> float:
    time.sleep(3600)
    return 0.0
