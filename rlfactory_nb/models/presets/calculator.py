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


def guess(question: Question) -> int:
    """The direct answer of the warm-start data: the first operand, a lazy guess that is always wrong.

    A random guess would put noise on the very positions where the model must learn to copy the
    tool's result (its held-out result-copy accuracy stalled near 0.4 with random guesses, 0.73 with
    none, both read by a gate that cut 6-digit answers off: decisions.md); a guess that is a
    function of the question teaches "answer without the tool" cleanly."""
    return int(question.expression[:3])


def tool_conversation(question: Question) -> list[Message]:
    return [
        *question.messages(),
        {"role": "assistant", "content": call_text(question.expression)},
        {"role": "tool", "content": str(question.answer)},
        {"role": "assistant", "content": answer_text(question.answer)},
    ]


def direct_conversation(question: Question) -> list[Message]:
    return [*question.messages(), {"role": "assistant", "content": answer_text(guess(question))}]
