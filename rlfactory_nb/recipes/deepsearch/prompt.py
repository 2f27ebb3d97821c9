"""The DeepSearch prompt: a system message that asks for searches and an answer in `<answer>` tags.

The search tool itself is described by the chat template (Qwen3 lists tools in the system turn and
asks for `<tool_call>{"name": "search", "arguments": {...}}</tool_call>`), so this prompt only says
when to search and how to answer. Search-R1 wrote its instructions into the user turn with its own
`<search>` tags; we keep the user turn to the bare question, which makes the question recoverable
from any prompt we built (`question_from_messages`) and keeps the tool format the model's own.
"""

from __future__ import annotations

from rlfactory_nb.types import Message

SYSTEM_PROMPT = (
    "Answer the user's question. You can call the search tool as often as you need; it returns "
    "passages from an encyclopedia. Search whenever a fact is missing, and search again for the next "
    "fact when the question needs several steps. When you know the answer, give only the answer, "
    "as a short phrase between <answer> and </answer>, for example: <answer> Beijing </answer>."
)
"""the system message of every DeepSearch prompt"""

_SEARCH_R1_MARKER = "Question:"


def prompt_messages(question: str, system_prompt: str = SYSTEM_PROMPT) -> list[Message]:
    """The chat messages a rollout starts from.

    >>> [m["role"] for m in prompt_messages("Who founded Calloway Harbor?")]
    ['system', 'user']
    """
    return [{"role": "system", "content": system_prompt}, {"role": "user", "content": question.strip()}]


def question_from_messages(messages: list[Message]) -> str | None:
    """The question in a prompt: the last user message, or, for Search-R1's prompts (instructions and
    question in one user turn), the text after its last "Question:". None without a user message.

    >>> question_from_messages(prompt_messages("Who founded Calloway Harbor?"))
    'Who founded Calloway Harbor?'
    >>> question_from_messages([{"role": "user", "content": "Answer the given question. ... Question: who wrote hamlet?\\n"}])
    'who wrote hamlet?'
    """
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    if not users or not isinstance(users[-1].get("content"), str):
        return None
    text = users[-1]["content"]
    _, marker, after = text.rpartition(_SEARCH_R1_MARKER)
    return (after if marker else text).strip() or None
