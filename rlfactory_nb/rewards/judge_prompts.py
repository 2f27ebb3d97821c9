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
import re
import string

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

_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)
_SCORE = re.compile(r"<score>\s*(.*?)\s*</score>", re.DOTALL)
_SCORES = re.compile(r"<scores>\s*(.*?)\s*</scores>", re.DOTALL)
_JSON_LIST = re.compile(r"\[[^\[\]]*\]")
_OUT_OF_TEN = re.compile(r"\s*/\s*10\s*$")


def check_template(template: str, allowed: tuple[str, ...], what: str) -> str:
    """`template` if every `{field}` in it is in `allowed`, else a ValueError naming the field.

    >>> check_template("Q: {question}", SAMPLE_FIELDS, "prompt_template")
    'Q: {question}'
    """
    for _, field, _, _ in string.Formatter().parse(template):
        if field is not None and field not in allowed:
            raise ValueError(
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
    found = _SCORE.findall(_THINK.sub("", reply))
    if not found:
        raise ValueError("no <score>N</score> tag")
    return _out_of_ten(_OUT_OF_TEN.sub("", found[-1]))


def parse_group_scores(reply: str) -> list[float]:
    """The scores (0-10 each) of `<scores>[...]</scores>`, or else of the last JSON list in `reply`,
    outside think blocks, each divided by 10.

    >>> parse_group_scores("Attempt 2 is best. <scores>[4, 10, 0]</scores>")
    [0.4, 1.0, 0.0]
    >>> parse_group_scores("[5, 5]")
    [0.5, 0.5]
    """
    text = _THINK.sub("", reply)
    tagged = _SCORES.findall(text)
    lists = _JSON_LIST.findall(tagged[-1] if tagged else text)
    if not lists:
        raise ValueError("no <scores>[...]</scores> tag and no JSON list of scores")
    try:
        values = json.loads(lists[-1])
    except json.JSONDecodeError as exc:
        raise ValueError(f"the score list {lists[-1]!r:.80} is not valid JSON ({exc})") from exc
    return [_out_of_ten(value) for value in values]


def _out_of_ten(value: object) -> float:
    """A score from a tag (a str) or from a JSON list (a number), divided by 10."""
    number = _as_float(value)
    if number is None or not 0.0 <= number <= 10.0:  # the comparison also rejects nan
        raise ValueError(f"score {value!r:.40} is not a number from 0 to 10")
    return number / 10.0


def _as_float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    try:
        return float(value)
    except ValueError:
        return None
