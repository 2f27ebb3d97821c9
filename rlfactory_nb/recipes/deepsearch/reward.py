"""DeepSearch rewards: exact match of the text in `<answer>` tags, and the training reward.

Evaluation is pure NQ-style exact match (`answer_exact_match`), the metric Search-R1 and RLFactory
report. As in Search-R1, only text inside `<answer>...</answer>` in the final turn counts: an answer
left in prose scores 0, so the metric measures the format the model was asked for. Training adds a
small format term (`training_reward`), which gives a group variance to learn from before any answer
is right; it is weighted 0.1 so that a correct answer always outranks a merely well-formed one.
"""

from __future__ import annotations

import dataclasses
import re

from rlfactory_nb.rewards.combine import combine
from rlfactory_nb.rewards.functions import exact_match
from rlfactory_nb.types import Sample

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)

FORMAT_WEIGHT = 0.1
"""weight of `answer_format` in `training_reward`"""


def _final_text(sample: Sample) -> str:
    turns = sample.trajectory.turns if sample.trajectory is not None else []
    return turns[-1].text if turns else sample.response


def extract_answer(text: str) -> str | None:
    """The text of the last `<answer>` block, stripped; None without one.

    >>> extract_answer("<think>Vell flows to Orm</think><answer> the Sea of Orm </answer>")
    'the Sea of Orm'
    >>> extract_answer("The Sea of Orm") is None
    True
    """
    found = _ANSWER.findall(text)
    return found[-1].strip() if found else None


def answer_exact_match(sample: Sample) -> float:
    """1.0 when the final turn's `<answer>` text equals a gold answer after SQuAD/NQ normalization
    (case, punctuation, articles, whitespace); 0.0 without an `<answer>` block.

    >>> from rlfactory_nb.rewards.samples import make_sample
    >>> answer_exact_match(make_sample("<answer>The  Gulls!</answer>", ground_truth={"target": ["Gulls"]}))
    1.0
    >>> answer_exact_match(make_sample("Gulls", ground_truth={"target": ["Gulls"]}))
    0.0
    """
    answer = extract_answer(_final_text(sample))
    if answer is None:
        exact_match(sample)  # still raises on a sample without ground truth: a data bug, not a miss
        return 0.0
    return exact_match(dataclasses.replace(sample, final_answer=answer))


def answer_format(sample: Sample) -> float:
    """1.0 when the final turn holds exactly one non-empty `<answer>` block and every tool-call block
    of the trajectory parsed.

    >>> from rlfactory_nb.rewards.samples import make_sample
    >>> [answer_format(make_sample(text)) for text in ("<answer>Nethby</answer>", "<answer> </answer>", "Nethby")]
    [1.0, 0.0, 0.0]
    """
    blocks = _ANSWER.findall(_final_text(sample))
    turns = sample.trajectory.turns if sample.trajectory is not None else []
    parsed = not any(turn.parse_errors for turn in turns)
    return float(len(blocks) == 1 and bool(blocks[0].strip()) and parsed)


training_reward = combine(
    {"em": answer_exact_match, "format": (answer_format, FORMAT_WEIGHT)}, name="deepsearch_training_reward"
)
"""EM plus 0.1 x format: `{"score": ..., "em": ..., "format": ...}`, so the dashboard shows EM apart."""
