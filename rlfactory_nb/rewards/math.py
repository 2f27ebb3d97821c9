"""Math answer rewards: `math_verify` (equal as mathematics) and `gsm8k` (GSM8K's number scorers).

`math_verify` uses Hugging Face's math-verify, the checker behind open-r1 and verl's math reward: it
finds the answer (the last `\\boxed{}`, else the last LaTeX or plain expression), normalizes it (units,
`\\text{}`, `\\dfrac`, percentages, thousands commas) and compares with sympy, so `\\frac{1}{2}`,
`0.5` and `1/2` are one answer. sympy can run for ever on hostile input (`9^(9^(9^9))`), and
math-verify's own timeout is `signal.alarm`, which fails in the runner's worker threads and cannot
stop a long C call anyway; so each check runs in a worker process (`rewards.isolated`) that is
killed after `timeout_s`. A killed check scores 0 and says so in the `timeout` component, which the
step's metrics show as `reward/<name>/timeout`: the share of samples whose check ran out of time.
Before that, an answer whose arithmetic is past the bounds of `rewards.math_bounds` (a power tower,
a number of a thousand digits) is refused in the reward's own process, in microseconds: it scores 0
with `refused` 1, and no worker is held or killed for it, so a batch of such answers cannot use up
the reward runner's timeout for the correct answers beside them.
The pool has at least two workers, so one hostile answer holds one and the others go on; a check the
reward runner stopped waiting for (its `timeout_s`) leaves the queue, or has its worker killed and
replaced, instead of holding a worker for the next step's answers (`rewards.isolated`).

`gsm8k` reproduces the scorers published GSM8K numbers come from: "strict" reads the `#### n` the
dataset's own solutions end with (verl's default), "flexible" the last number written (lm-eval's
flexible-extract). Both normalize as lm-eval's exact match does (commas, `$` and a final period
dropped) and then compare strings, so `72.0` is not `72`: use `numeric_match` for tolerance.

Both read `sample.final_answer`: the model family's parser has already set the reasoning apart.
"""

from __future__ import annotations

import functools
import os
import re
from typing import Literal

from rlfactory_nb.errors import ConfigError
from rlfactory_nb.rewards.functions import _golds
from rlfactory_nb.rewards.isolated import WorkerPool
from rlfactory_nb.rewards.math_bounds import refusal
from rlfactory_nb.types import Sample

_STRICT = re.compile(r"#### (-?[0-9.,]+)")  # verl's and lm-eval's strict pattern
_FLEXIBLE = re.compile(r"-?[$0-9.,]{2,}|-?[0-9]+")  # lm-eval's flexible-extract pattern
_IGNORED = re.compile(r"[,$]|\.$")  # lm-eval's exact-match regexes_to_ignore (after `#### `)


def math_verify(sample: Sample, *, timeout_s: float = 5.0) -> dict[str, float]:
    """1.0 when the final answer equals a gold answer as mathematics; 0.0 when it does not, when its
    arithmetic is past `rewards.math_bounds` (then `refused` is 1.0, and no worker saw it) or when
    the check takes longer than `timeout_s` seconds (then `timeout` is 1.0).

    >>> from rlfactory_nb.rewards.samples import make_sample
    >>> math_verify(make_sample(r"<think>3/6</think>So $x = \\boxed{\\dfrac{1}{2}}$.", ground_truth="0.5"))
    {'score': 1.0, 'timeout': 0.0, 'refused': 0.0}
    >>> math_verify(make_sample(r"<answer>10\\text{ cm}</answer>", ground_truth=["10", "ten"]))
    {'score': 1.0, 'timeout': 0.0, 'refused': 0.0}
    >>> math_verify(make_sample(r"\\boxed{9^{9^{9^{9}}}}", ground_truth="5"))
    {'score': 0.0, 'timeout': 0.0, 'refused': 1.0}
    """
    if refusal(sample.final_answer) is not None:
        return {"score": 0.0, "timeout": 0.0, "refused": 1.0}
    try:
        same = _verifier().call(_equivalent, sample.final_answer, _golds(sample), timeout_s=timeout_s)
    except TimeoutError:
        return {"score": 0.0, "timeout": 1.0, "refused": 0.0}
    return {"score": float(same), "timeout": 0.0, "refused": 0.0}


@functools.cache
def _verifier() -> WorkerPool:
    """The worker processes every `math_verify` call shares; each imports math-verify once."""
    return WorkerPool(max_workers=max(2, min(4, os.cpu_count() or 1)), setup=_load_math_verify)


def _load_math_verify() -> None:
    """Run in each worker: import math-verify (and sympy) once, and quiet its warning that its own
    signal timeouts are off (the worker's parent enforces the timeout)."""
    import logging

    import math_verify  # noqa: F401

    logging.getLogger("math_verify").setLevel(logging.ERROR)


def _equivalent(answer: str, golds: list[str]) -> bool:
    """Run in a worker: does `answer` equal any of `golds` as mathematics? A gold answer is read as
    the content of a `\\boxed{}` unless it is LaTeX with its own delimiters (verl's convention)."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    read = [LatexExtractionConfig(), ExprExtractionConfig()]
    predicted = parse(answer, read, parsing_timeout=None) or parse(f"${answer}$", read, parsing_timeout=None)
    for gold in golds:
        boxed = gold if "$" in gold or "\\boxed" in gold else f"\\boxed{{{gold}}}"
        if verify(parse(boxed, [LatexExtractionConfig()], parsing_timeout=None), predicted, timeout_seconds=None):
            return True
    return False


def gsm8k(sample: Sample, *, method: Literal["strict", "flexible"] = "strict") -> float:
    """1.0 when the number read from the final answer by `method` equals the gold number; the gold
    may be GSM8K's whole solution (its `#### n` line is read) or the number alone.

    >>> from rlfactory_nb.rewards.samples import make_sample
    >>> solution = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\\n#### 72"
    >>> gsm8k(make_sample("48 + 24 = 72 clips.\\n#### 72", ground_truth=solution))
    1.0
    >>> gsm8k(make_sample("She sold 72 clips.", ground_truth="72")), gsm8k(make_sample("She sold $1,072.", ground_truth="1072"), method="flexible")
    (0.0, 1.0)
    """
    answer = gsm8k_answer(sample.final_answer, method)
    if answer is None:
        return 0.0
    return float(any(answer == _gold_number(gold) for gold in _golds(sample)))


def gsm8k_answer(text: str, method: Literal["strict", "flexible"] = "strict") -> str | None:
    """The answer a GSM8K scorer reads in `text`, normalized; None when there is none. "strict": the
    last `#### n` (verl's rule; lm-eval's takes the first); "flexible": the last number.

    >>> gsm8k_answer("so 5 + 7 = 12\\n#### 1,200."), gsm8k_answer("so 5 + 7 = 12"), gsm8k_answer("costs $12.50.", "flexible")
    ('1200', None, '12.50')
    """
    if method not in ("strict", "flexible"):
        raise ConfigError(f'gsm8k method must be "strict" or "flexible", got {method!r}')
    found = (_STRICT if method == "strict" else _FLEXIBLE).findall(text)
    numbers = [_normalize(number) for number in found]
    numbers = [number for number in numbers if number not in ("", "-")]
    return numbers[-1] if numbers else None


def _gold_number(gold: str) -> str:
    """GSM8K's gold: the text after the solution's last `####`, or the whole value."""
    return _normalize(gold.rpartition("####")[2].strip())


def _normalize(number: str) -> str:
    return _IGNORED.sub("", number.strip())

