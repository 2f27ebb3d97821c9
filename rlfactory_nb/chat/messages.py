"""How a rollout's turns become chat messages, in the fields a family's template reads.

The rollout's ids are the truth (tokens in, tokens out); these messages are the history a full render
of the conversation would use: the drift check renders them, the trajectory view shows them, and a
saved trajectory keeps them. Families agree on OpenAI's shapes but differ in details (Mistral wants a
9-character call id, DeepSeek R1 reads arguments as a JSON string, gpt-oss reads reasoning from its
own field), so the record of each family names its builders; these are the defaults, which suit the
Qwen families.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rlfactory_nb.types import Message, ToolCall

AssistantMessage = Callable[[str, Sequence[ToolCall], str], Message]
"""(the turn's decoded text, the calls parsed from it, its reasoning) -> the assistant message"""
ToolMessage = Callable[[str, "ToolCall | None", int], Message]
"""(result text, the call it answers or None for a broken block, its index in the turn) -> message"""

DELTA_BASE: tuple[Message, ...] = (
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "ok", "reasoning_content": "r"},
)
"""The conversation a delta is rendered after: its assistant turn carries reasoning so that every
Qwen3-style template renders it the same whether or not it is the last message."""


def assistant_message(text: str, calls: Sequence[ToolCall], reasoning: str = "") -> Message:
    """The text minus the calls that parsed (those become `tool_calls`); broken call blocks stay in
    the content, so the history shows what the model wrote. Reasoning stays inline, as sampled."""
    for call in calls:
        text = text.replace(call.raw, "", 1)
    message: Message = {"role": "assistant", "content": text.strip()}
    if calls:
        message["tool_calls"] = [call.to_message_call() for call in calls]
    return message


def tool_message(content: str, call: ToolCall | None = None, index: int = 0) -> Message:
    return {"role": "tool", "content": content}


def named_tool_message(content: str, call: ToolCall | None = None, index: int = 0) -> Message:
    """A tool message that also names the tool and its call (`name`, `tool_call_id`): what templates
    that label results need; a broken block is answered as the tool `error`."""
    message: dict[str, Any] = {"role": "tool", "content": content, "name": call.name if call else "error"}
    message["tool_call_id"] = call_id(index)
    return message


def call_id(index: int) -> str:
    """A call id for templates that require one: 9 alphanumeric characters (Mistral's rule)."""
    return f"call{index:05d}"
