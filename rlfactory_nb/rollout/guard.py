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

Every text that enters a prompt goes through here, in every family: the messages of a delta (tool
results, an environment's or a user's reply) and the messages of a prompt rendered whole (an
environment's opening observation from `reset`, an agent program's history when it does not continue
its last call). Left as they are: the dataset row's own prompt messages (trusted data, which may
show a family's markers on purpose, e.g. a few-shot `<tool_response>`) and assistant turns (the model's
own; a family may keep its reasoning markers in their content).

Before that, `admitted` cuts every text that enters a trajectory from outside (an environment's
observation, tool result or reply, a program's history) to one limit, the ToolSet's
`max_result_chars`, with the ToolSet's marker (tools/validate.py `cut_text`): a 2 MiB observation
would otherwise be kept, rendered and tokenized whole on the rollout loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlfactory_nb.chat.quoting import NAME_PATTERN, Quoter, encode, is_text_part, safe_name
from rlfactory_nb.tools.validate import cut_text
from rlfactory_nb.types import Message

__all__ = ["admitted", "encode", "guard", "guard_call_names", "guard_prompt"]


def guard(tokenizer: Any, messages: Sequence[Message], chat_format: Any = None) -> tuple[list[Message], list[str]]:
    """`messages` with each marker's text in `content`, `name` and `tool_call_id` replaced by a
    placeholder, and the texts replaced, in placeholder order. `chat_format` adds the family's
    structural markers to the tokenizer's special tokens."""
    quoter = Quoter(tokenizer, chat_format)
    return [_guarded(quoter, message) for message in messages], quoter.found


def guard_prompt(
    tokenizer: Any, messages: Sequence[Message], chat_format: Any = None, trusted: Sequence[Message] = ()
) -> tuple[list[Message], list[str]]:
    """`guard` for a prompt rendered whole: every message but assistant turns and those of `trusted`
    (the dataset row's prompt) is quoted (module docstring)."""
    quoter = Quoter(tokenizer, chat_format)
    kept = [message.get("role") == "assistant" or message in trusted for message in messages]
    return [message if keep else _guarded(quoter, message) for message, keep in zip(messages, kept)], quoter.found


def admitted(messages: Sequence[Message], limit: int) -> list[Message]:
    """`messages` with each text of their content (a string, or the text parts of a list) cut to
    `limit` characters (module docstring); a message within it, and an assistant turn (the model's
    own, bounded by its token limits), is returned as it is."""
    return [message if message.get("role") == "assistant" else _admitted(message, limit) for message in messages]


def _admitted(message: Message, limit: int) -> Message:
    content = message.get("content")
    if isinstance(content, str):
        cut: Any = cut_text(content, limit)
    elif isinstance(content, list):
        cut = [{**part, "text": cut_text(part["text"], limit)} if is_text_part(part) else part for part in content]
    else:
        return message
    return message if cut == content else {**message, "content": cut}


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
