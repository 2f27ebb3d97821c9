"""Hand-written samples, for trying a reward function before any rollout exists.

`make_sample` builds a real `Trajectory` and goes through `Sample.from_trajectory`, so a reward that
works here sees exactly the fields it will see in training.
"""

from __future__ import annotations

from typing import Any

from rlfactory_nb.types import FinishReason, Sample, Trajectory, Turn


def make_sample(
    *turns: str | Turn,
    ground_truth: Any = None,
    finish_reason: FinishReason = "stop",
    metadata: dict[str, Any] | None = None,
    id: str = "example",
) -> Sample:
    """A sample whose assistant turns are `turns` (text, or `Turn`s carrying calls, results and
    parse errors). A text turn counts one sampled token per whitespace-separated word.

    >>> sample = make_sample("<think>6*6</think><answer>36</answer>", ground_truth="36")
    >>> sample.final_answer, sample.num_turns, sample.trajectory.num_sampled_tokens
    ('36', 1, 1)
    """
    full_turns = [
        turn if isinstance(turn, Turn) else Turn(text=turn, num_tokens=len(turn.split())) for turn in turns
    ]
    messages = [{"role": "user", "content": "question"}] + [
        {"role": "assistant", "content": turn.text} for turn in full_turns
    ]
    trajectory = Trajectory(
        prompt_ids=[],
        loss_mask=[1] * sum(turn.num_tokens for turn in full_turns),
        turns=full_turns,
        messages=messages,
        finish_reason=finish_reason,
        metadata=dict(metadata or {}),
        id=id,
    )
    return Sample.from_trajectory(trajectory, ground_truth=ground_truth)
