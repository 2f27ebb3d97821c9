"""The LLM judge's default prompts and the parsers that read a score out of its reply.

Kept apart from the HTTP plumbing in `judge.py` because this is the part users edit: a template is a
`str.format` string, a parser a plain function of the reply text. A parser raises `ValueError` with
the reason when the reply has no readable score; the judge adds the model name and the reply.

The 0-10 integer scale is what judge models follow most reliably (MT-Bench, Zheng et al. 2023);
scores are divided by 10 so a judge reward sits in [0, 1] like the rule-based ones. Judges that think
out loud (Qwen3, R1) may write `<score>` while thinking, so think blocks are dropped and the *last*
tag wins.
"""

from __future__ import annotations

import json
import string
from collections.abc import Sequence
from typing import Any

from rlfactory_nb.errors import ConfigError, JudgeParseError
from rlfactory_nb.rewards.functions import gold_answers
from rlfactory_nb.types import Sample

SAMPLE_FIELDS = ("question", "response", "final_answer", "ground_truth")
"""the fields a `prompt_template` may use"""
GROUP_FIELDS = ("question", "ground_truth", "responses", "n")
"""the fields a `group_template` may use; `responses` is the numbered attempts, `n` their count"""

DEFAULT_PROMPT = """You are grading an AI assistant's answer to a question.

Question:
{question}

Reference answer (may be empty):
{ground_truth}

The assistant's full response:
{response}

The assistant's final answer:
{final_answer}

Rate the final answer from 0 (wrong or useless) to 10 (fully correct and clearly stated). Think \
briefly, then end your reply with the score in tags, for example <score>7</score>."""

DEFAULT_GROUP_PROMPT = """You are comparing {n} attempts by an AI assistant at the same task.

Task:
{question}

Reference answer (may be empty):
{ground_truth}

The attempts:
{responses}

Judge the attempts against each other: a better attempt gets a higher score. Score each from 0 \
(worst) to 10 (best); equal attempts may share a score. Think briefly, then end your reply with \
exactly {n} scores, in attempt order, as a JSON list in tags, for example <scores>[7, 3, 10]</scores>."""

_MAX_SCORE_CHARS = 64
"""a score tag's content past this length is not a number from 0 to 10"""


def check_template(template: str, allowed: tuple[str, ...], what: str) -> str:
    """`template` if every `{field}` in it is in `allowed`, else a ValueError naming the field.

    >>> check_template("Q: {question}", SAMPLE_FIELDS, "prompt_template")
    'Q: {question}'
    """
    for _, field, _, _ in string.Formatter().parse(template):
        if field is not None and field not in allowed:
            raise ConfigError(
                f"{what} uses the field {{{field}}}; the fields are {', '.join(allowed)} "
                "(write a literal brace as {{ or }})"
            )
    return template


def parse_score(reply: str) -> float:
    """The last `<score>N</score>` (0-10) in `reply`, outside think blocks, divided by 10.

    >>> parse_score("<think>maybe <score>2</score></think>Mostly right. <score>8</score>")
    0.8
    >>> parse_score("<score>7.5/10</score>")
    0.75
    """
    found = _last_tagged(_without_think(reply), "score")
    if found is None:
        raise JudgeParseError("no <score>N</score> tag")
    return _out_of_ten(_without_out_of_ten(found))


def parse_group_scores(reply: str) -> list[float]:
    """The scores (0-10 each) of `<scores>[...]</scores>`, or else of the last JSON list in `reply`,
    outside think blocks, each divided by 10.

    >>> parse_group_scores("Attempt 2 is best. <scores>[4, 10, 0]</scores>")
    [0.4, 1.0, 0.0]
    >>> parse_group_scores("[5, 5]")
    [0.5, 0.5]
    """
    text = _without_think(reply)
    tagged = _last_tagged(text, "scores")
    found = _last_flat_list(text if tagged is None else tagged)
    if found is None:
        raise JudgeParseError("no <scores>[...]</scores> tag and no JSON list of scores")
    try:
        values = json.loads(found)
    except ValueError as exc:  # also a number past int's digit limit
        raise JudgeParseError(f"the score list {found!r:.80} is not valid JSON ({exc})") from exc
    return [_out_of_ten(value) for value in values]


# The readers below scan with str.find, each character a bounded number of times, so they take time
# linear in the reply: the regexes they replace backtracked (`<score>` and 2,000 spaces took 29 s).


def _without_think(text: str) -> str:
    """`text` without `<think>...</think>` blocks; an unclosed one runs to the end.

    >>> _without_think("a<think>b</think>c<think>d")
    'ac'
    """
    kept, position = [], 0
    while (start := text.find("<think>", position)) != -1:
        kept.append(text[position:start])
        end = text.find("</think>", start + len("<think>"))
        if end == -1:
            return "".join(kept)
        position = end + len("</think>")
    return "".join(kept) + text[position:]


def _last_tagged(text: str, tag: str) -> str | None:
    """The stripped content of the last `<tag>...</tag>`, each opening tag closed by the next
    closing one; None without a closed pair.

    >>> _last_tagged("<s> 1 </s> <s>2</s> <s>3", "s")
    '2'
    """
    opening, closing = f"<{tag}>", f"</{tag}>"
    found, position = None, 0
    while (start := text.find(opening, position)) != -1:
        end = text.find(closing, start + len(opening))
        if end == -1:
            break
        found, position = text[start + len(opening) : end].strip(), end + len(closing)
    return found


def _last_flat_list(text: str) -> str | None:
    """The last `[...]` holding no bracket, or None.

    >>> _last_flat_list("[1, [2]] and [3]] [4")
    '[3]'
    """
    end = text.rfind("]")
    start = text.rfind("[", 0, end) if end != -1 else -1
    if start == -1:
        return None
    # no "[" lies between start and end, but a "]" may: the list closes at the first one
    return text[start : text.index("]", start) + 1]


def _without_out_of_ten(score: str) -> str:
    """A tag's score without a trailing "/10".

    >>> _without_out_of_ten("7.5 / 10 ")
    '7.5'
    """
    score = score.strip()
    if score.endswith("10") and (head := score[:-2].rstrip()).endswith("/"):
        return head[:-1].rstrip()
    return score


def _out_of_ten(value: object) -> float:
    """A score from a tag (a str) or from a JSON list (a number), divided by 10."""
    number = _as_float(value)
    if number is None or not 0.0 <= number <= 10.0:  # the comparison also rejects nan
        raise JudgeParseError(f"score {value!r:.40} is not a number from 0 to 10")
    return number / 10.0


def _as_float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    if isinstance(value, str) and len(value) > _MAX_SCORE_CHARS:
        return None
    try:
        return float(value)
    except ValueError:
        return None


def question_of(sample: Sample) -> str:
    """The last user message of the prompt: the task, without the system prompt."""
    users = [message.get("content") or "" for message in sample.prompt if message.get("role") == "user"]
    return users[-1] if users else ""


def sample_fields(sample: Sample) -> dict[str, str]:
    """The SAMPLE_FIELDS of one sample, for a `prompt_template`."""
    return {
        "question": question_of(sample),
        "response": sample.response,
        "final_answer": sample.final_answer,
        "ground_truth": _ground_truth(sample.ground_truth),
    }


def group_fields(samples: Sequence[Sample]) -> dict[str, Any]:
    """The GROUP_FIELDS of attempts at one prompt, for a `group_template`."""
    responses = "\n\n".join(
        f"<attempt id={index}>\n{sample.response}\n</attempt>" for index, sample in enumerate(samples, 1)
    )
    return {
        "question": question_of(samples[0]),
        "ground_truth": _ground_truth(samples[0].ground_truth),
        "responses": responses,
        "n": len(samples),
    }


def _ground_truth(ground_truth: Any) -> str:
    if ground_truth is None:
        return ""
    try:
        return " | ".join(gold_answers(ground_truth))
    except TypeError:  # a structured label the QA helpers do not know; the judge reads it as text
        return str(ground_truth)
