"""Built-in reward functions: `def reward(sample: Sample) -> float`.

Each is a plain function of one `Sample`, so users read, copy and combine them freely; tunable ones
take keyword-only settings, bound with `functools.partial(numeric_match, rel_tol=1e-3)`.
Answer matching uses the normalization of the SQuAD and Natural Questions evaluation scripts
(lowercase, drop punctuation and the articles a/an/the, collapse whitespace), which Search-R1 and most
QA reward code share, so scores compare with published numbers.

A sample with no ground truth is a data bug, not a wrong answer: the matching rewards raise, and the
reward runner reports it with the sample id.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from numbers import Real
from typing import Any

from rlfactory_nb.errors import ArgumentTypeError, ConfigError, SampleError
from rlfactory_nb.types import Sample

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_NUMBER = re.compile(
    r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?"  # 12, -5, 1,234.5, 3e8
    r"|(?<![\w.])-?\.\d+"  # .5
)


def normalize_answer(text: str) -> str:
    """SQuAD / NQ answer normalization.

    >>> normalize_answer("  The Eiffel-Tower, Paris! ")
    'eiffeltower paris'
    """
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def gold_answers(ground_truth: Any) -> list[str]:
    """The accepted answers in `ground_truth`: a string, a number, a list of them, or Search-R1's
    `{"target": [...]}`.

    >>> gold_answers({"target": ["Paris", "paris, france"]})
    ['Paris', 'paris, france']
    >>> gold_answers(36)
    ['36']
    """
    if isinstance(ground_truth, dict) and "target" in ground_truth:
        return gold_answers(ground_truth["target"])
    if isinstance(ground_truth, str):
        return [ground_truth]
    if isinstance(ground_truth, Real) and not isinstance(ground_truth, bool):
        return [str(ground_truth)]
    if hasattr(ground_truth, "tolist"):  # numpy arrays, as parquet datasets load lists
        return gold_answers(ground_truth.tolist())
    if isinstance(ground_truth, (list, tuple)):
        return [answer for item in ground_truth for answer in gold_answers(item)]
    raise ArgumentTypeError(
        f"ground_truth must be a string, a number, a list of them or {{'target': [...]}}, "
        f"got {type(ground_truth).__name__}: {ground_truth!r:.80}"
    )


def _golds(sample: Sample) -> list[str]:
    golds = gold_answers(sample.ground_truth) if sample.ground_truth is not None else []
    if not golds:
        raise SampleError(
            f"sample {sample.id!r} has no ground truth; give the dataset a ground-truth column "
            "or pass ground_truth= when building the sample"
        )
    return golds


def exact_match(sample: Sample) -> float:
    """1.0 when the normalized final answer equals any normalized gold answer.

    >>> from rlfactory_nb.rewards.samples import make_sample
    >>> exact_match(make_sample("<answer>The Eiffel Tower</answer>", ground_truth=["eiffel tower", "tour eiffel"]))
    1.0
    >>> exact_match(make_sample("<answer>Eiffel</answer>", ground_truth="Eiffel Tower"))
    0.0
    """
    answer = normalize_answer(sample.final_answer)
    return float(any(answer == normalize_answer(gold) for gold in _golds(sample)))


def f1(sample: Sample) -> float:
    """Token-level F1 between the normalized final answer and the best-matching gold answer.

    >>> from rlfactory_nb.rewards.samples import make_sample
    >>> f1(make_sample("<answer>the Eiffel Tower in Paris</answer>", ground_truth="Eiffel Tower"))
    0.6666666666666666
    """
    answer = normalize_answer(sample.final_answer).split()
    return max(_token_f1(answer, normalize_answer(gold).split()) for gold in _golds(sample))


def _token_f1(predicted: list[str], gold: list[str]) -> float:
    common = sum((Counter(predicted) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def parse_number(text: str) -> float | None:
    """The last number written in `text` (thousands commas allowed), or None.

    >>> parse_number("12*3 = 36"), parse_number("about 1,234.5 km"), parse_number("it is -5"), parse_number("none")
    (36.0, 1234.5, -5.0, None)
    """
    found = _NUMBER.findall(text)
    return float(found[-1].replace(",", "")) if found else None


def numeric_match(sample: Sample, *, rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> float:
    """1.0 when the last number in the final answer equals a gold number within tolerance.

    >>> from rlfactory_nb.rewards.samples import make_sample
    >>> numeric_match(make_sample("12*3 = <answer>36.0</answer>", ground_truth=36))
    1.0
    >>> numeric_match(make_sample("<answer>1,234</answer>", ground_truth="1234"))
    1.0
    >>> numeric_match(make_sample("<answer>no idea</answer>", ground_truth=36))
    0.0
    """
    answer = parse_number(sample.final_answer)
    if answer is None:
        return 0.0
    golds = [parse_number(gold) for gold in _golds(sample)]
    return float(
        any(g is not None and math.isclose(answer, g, rel_tol=rel_tol, abs_tol=abs_tol) for g in golds)
    )


def _parse_errors(sample: Sample) -> int:
    turns = sample.trajectory.turns if sample.trajectory is not None else []
    return sum(len(turn.parse_errors) for turn in turns)


def format_ok(sample: Sample) -> float:
    """1.0 when every tool-call block parsed and the final answer is not empty.

    >>> from rlfactory_nb.rewards.samples import make_sample
    >>> from rlfactory_nb.types import MalformedCall, Turn
    >>> format_ok(make_sample("<answer>36</answer>"))
    1.0
    >>> format_ok(make_sample(Turn("<tool_call>{bad</tool_call>", parse_errors=[MalformedCall("bad JSON")]), "36"))
    0.0
    """
    return float(_parse_errors(sample) == 0 and bool(sample.final_answer.strip()))


def tool_success_rate(sample: Sample) -> float:
    """The fraction of attempted calls (including malformed call blocks) that ran ok; 0.0 when the
    model made no attempt, so the reward cannot be earned by never calling a tool.

    >>> from rlfactory_nb.rewards.samples import make_sample
    >>> from rlfactory_nb.types import ToolResult, Turn
    >>> ok, failed = ToolResult("calculator", "ok", "36"), ToolResult("calculator", "error", "division by zero")
    >>> tool_success_rate(make_sample(Turn("...", results=[ok, failed]), "36"))
    0.5
    """
    attempts = len(sample.tool_results) + _parse_errors(sample)
    if attempts == 0:
        return 0.0
    return sum(result.ok for result in sample.tool_results) / attempts


def tool_error_penalty(sample: Sample, *, per_error: float = 0.25, cap: float = 1.0) -> float:
    """Minus `per_error` for each failed call or malformed call block, down to `-cap`.

    >>> from rlfactory_nb.rewards.samples import make_sample
    >>> from rlfactory_nb.types import ToolResult, Turn
    >>> failed = ToolResult("calculator", "invalid_args", "expression: required")
    >>> tool_error_penalty(make_sample(Turn("...", results=[failed, failed]), "36"))
    -0.5
    """
    errors = sum(not result.ok for result in sample.tool_results) + _parse_errors(sample)
    return 0.0 - min(cap, per_error * errors)  # not -min(...): no -0.0 in the logs


def length_penalty(sample: Sample, *, max_tokens: int = 1024, buffer_tokens: int = 256) -> float:
    """DAPO's soft overlong penalty (Yu et al. 2025): 0 up to `max_tokens - buffer_tokens` sampled
    tokens, then falling linearly to -1 at `max_tokens`, and -1 beyond.

    >>> from rlfactory_nb.rewards.samples import make_sample
    >>> from rlfactory_nb.types import Turn
    >>> [length_penalty(make_sample(Turn("...", num_tokens=n)), max_tokens=100, buffer_tokens=20) for n in (80, 90, 120)]
    [0.0, -0.5, -1.0]
    """
    if sample.trajectory is None:
        raise SampleError(
            f"length_penalty needs sample.trajectory to count sampled tokens (sample {sample.id!r})"
        )
    if not 0 < buffer_tokens <= max_tokens:
        raise ConfigError(
            f"length_penalty needs 0 < buffer_tokens <= max_tokens, got {buffer_tokens}, {max_tokens}"
        )
    over = sample.trajectory.num_sampled_tokens - (max_tokens - buffer_tokens)
    return 0.0 - min(1.0, max(0.0, over / buffer_tokens))
