"""Reward functions for training tests, loaded by path like a user's reward.py.

They score what a random tiny model can vary: its sampled token ids, so rewards differ within groups.
"""

from rlfactory_nb.types import Sample


def first_token(sample: Sample) -> float:
    """0, 1 or 2 from the first sampled token: varied within a group, scripted across runs."""
    return float(_sampled(sample)[0] % 3)


def constant_for_first_prompt(sample: Sample) -> float:
    """Prompt 0 of each step always scores 1 (a zero-variance group); the others vary."""
    if sample.metadata["prompt_index"] == 0:
        return 1.0
    return first_token(sample)


def constant(sample: Sample) -> float:
    return 0.5


def per_turn(sample: Sample) -> dict:
    """Outcome plus one per-turn score (turn_scores), to exercise the per-token advantage path."""
    score = first_token(sample)
    return {"score": score, "turn_scores": [0.0] * (sample.num_turns - 1) + [score]}


def _sampled(sample: Sample) -> list[int]:
    traj = sample.trajectory
    return [token for token, mask in zip(traj.response_ids, traj.loss_mask) if mask]


def flat_for_even_answers(sample: Sample) -> float:
    """Flat (zero variance) exactly for prompts whose answer is even, varied for the others, whatever
    was sampled: which groups have signal is a function of the prompts alone."""
    if int(sample.ground_truth) % 2 == 0:
        return 1.0
    return float(sample.metadata["sample_index"] % 2)


def flat_for_first_prompt(sample: Sample) -> float:
    """Flat for the first prompt of every rollout round, varied (by sample index) for the others."""
    if sample.metadata["prompt_index"] == 0:
        return 1.0
    return float(sample.metadata["sample_index"] % 2)
