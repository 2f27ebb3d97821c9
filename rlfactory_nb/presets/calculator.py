"""The calculator task: questions, the tool the model is shown, and warm-start conversations.

Questions are two three-digit operands joined by + - or *, always phrased "What is 123*456?"; the
answer is the exact integer. One phrasing and fixed-width operands put every digit the model must
copy into the call at a fixed distance from where it is needed, a pattern a 1M-parameter model can
learn with relative-position attention alone. The model
sees one tool, `calculator(expression)`, served by `rlfactory_nb.tools.servers.calculator`, whose
listed spec must equal CALCULATOR_TOOL (a test checks): the warm-start renders this exact spec, so
a tiny model trained on it sees the same system prompt at rollout time.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from rlfactory_nb.types import Message

CALCULATOR_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression such as 12*(3+4) and return the number.",
        "parameters": {
            "properties": {"expression": {"title": "Expression", "type": "string"}},
            "required": ["expression"],
            "type": "object",
            "title": "calculatorArguments",
        },
    },
}

_QUESTION_FORMS = ["What is {e}?"]
_OPS = ["+", "-", "*"]


@dataclass(frozen=True)
class Question:
    expression: str
    answer: int
    text: str

    def messages(self) -> list[Message]:
        return [{"role": "user", "content": self.text}]

    def row(self) -> dict[str, Any]:
        """A dataset row: the prompt messages and the ground truth."""
        return {"messages": self.messages(), "ground_truth": str(self.answer)}


def make_question(rng: random.Random) -> Question:
    a, b, op = rng.randint(100, 999), rng.randint(100, 999), rng.choice(_OPS)
    expression = f"{a}{op}{b}"
    answer = {"+": a + b, "-": a - b, "*": a * b}[op]
    return Question(expression, answer, rng.choice(_QUESTION_FORMS).format(e=expression))


def questions(n: int, seed: int) -> list[Question]:
    rng = random.Random(seed)
    return [make_question(rng) for _ in range(n)]


TRAIN_SEED, HELDOUT_SEED = 1, 2


def dataset(split: str, n: int) -> list[dict[str, Any]]:
    """Rows for "train" or "heldout" (disjoint seeds), as the trainer and notebooks consume them."""
    seed = {"train": TRAIN_SEED, "heldout": HELDOUT_SEED}[split]
    return [q.row() for q in questions(n, seed)]


def answer_text(value: int | str) -> str:
    return f"<answer>{value}</answer>"


def call_text(expression: str) -> str:
    """An assistant tool call exactly as the chat template renders it."""
    arguments = json.dumps({"expression": expression}, ensure_ascii=False)
    return f'<tool_call>\n{{"name": "calculator", "arguments": {arguments}}}\n</tool_call>'


def guess(question: Question, rng: random.Random) -> int:
    """A plausible wrong-ish answer: the magnitude is right, the digits mostly are not."""
    digits = max(1, len(str(abs(question.answer))))
    value = rng.randint(10 ** (digits - 1), 10**digits - 1)
    return -value if question.answer < 0 else value


def tool_conversation(question: Question) -> list[Message]:
    return [
        *question.messages(),
        {"role": "assistant", "content": call_text(question.expression)},
        {"role": "tool", "content": str(question.answer)},
        {"role": "assistant", "content": answer_text(question.answer)},
    ]


def direct_conversation(question: Question, rng: random.Random) -> list[Message]:
    return [*question.messages(), {"role": "assistant", "content": answer_text(guess(question, rng))}]
