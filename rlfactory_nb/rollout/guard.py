"""Control-token text inside a tool turn stays text.

A delta (rollout/tokens.py) is a template render tokenized as a whole, so a tool result that echoes
`<|im_end|>\\n<|im_start|>assistant` (a web page, a file, the model's own words) would end the tool
turn and open an assistant turn in the context the policy reads and is trained on. Before rendering,
each marker's text in a message's `content`, `name` and `tool_call_id` is quoted (chat/quoting.py:
the tokenizer's special tokens and the family's structural markers, special or not, by spelling or
by tokenization), and the render is tokenized with the quoted text as characters. Tool names and
call ids (Kimi's come from the model's text) are held to `NAME_PATTERN`: in the tool messages, and
in the assistant turn before them, whose call name a template may write into the tool turn's header
(gpt-oss). A chat server's `apply_chat_template`
does not do this, so the drift check reports such a turn as differing from a full render (which is
the point).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlfactory_nb.chat.quoting import NAME_PATTERN, Quoter, encode, safe_name
from rlfactory_nb.types import Message

__all__ = ["encode", "guard", "guard_call_names"]


def guard(tokenizer: Any, messages: Sequence[Message], chat_format: Any = None) -> tuple[list[Message], list[str]]:
    """`messages` with each marker's text in `content`, `name` and `tool_call_id` replaced by a
    placeholder, and the texts replaced, in placeholder order. `chat_format` adds the family's
    structural markers to the tokenizer's special tokens."""
    quoter = Quoter(tokenizer, chat_format)
    return [_guarded(quoter, message) for message in messages], quoter.found


def guard_call_names(message: Message | None) -> Message | None:
    """An assistant message whose call names fit `NAME_PATTERN`; the message itself when they do."""
    calls = (message or {}).get("tool_calls")
    if not calls or all(_name_ok(call) for call in calls):
        return message
    return {**message, "tool_calls": [_with_safe_name(call) for call in calls]}


def _guarded(quoter: Quoter, message: Message) -> Message:
    changed: dict[str, Any] = {"content": quoter.content(message.get("content"))}
    for field in ("name", "tool_call_id"):
        value = message.get(field)
        if isinstance(value, str):
            changed[field] = quoter.text(safe_name(value))
    if all(changed[field] is message.get(field) for field in changed):
        return message
    return {**message, **changed}


def _name_ok(call: Any) -> bool:
    name = (call.get("function") or {}).get("name") if isinstance(call, dict) else None
    return not isinstance(name, str) or NAME_PATTERN.fullmatch(name) is not None


def _with_safe_name(call: dict) -> dict:
    function = call.get("function") or {}
    if not isinstance(function.get("name"), str):
        return call
    return {**call, "function": {**function, "name": safe_name(function["name"])}}
