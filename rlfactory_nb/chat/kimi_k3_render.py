"""Kimi K3 prompts, rendered here from the official encoder's rules (`encoding_k3.py`'s
`build_chat_segments`, its segments joined to text): the model ships no chat template, so the
`kimi_k3` record owns rendering (`ChatFormat.render`); tests/chat hold it equal to the encoder.

Thinking on renders K3's tokenizer default, `thinking_effort="max"`. A message shape the encoder
refuses, or one with no meaning here (images, an unknown role), is a ChatFormatError naming the field.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rlfactory_nb.chat.reasoning import ReasoningMarkers
from rlfactory_nb.errors import ChatFormatError
from rlfactory_nb.types import Message

OPEN, CLOSE, SEP, END_OF_MESSAGE = "<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"
THINK = ReasoningMarkers(f"{OPEN}think{SEP}", f"{CLOSE}think{SEP}")
RESPONSE_OPEN, RESPONSE_CLOSE = f"{OPEN}response{SEP}", f"{CLOSE}response{SEP}"
MESSAGE_CLOSE = f"{CLOSE}message{SEP}"
TOOLS_OPEN, TOOLS_CLOSE = f"{OPEN}tools{SEP}", f"{CLOSE}tools{SEP}"
CALL_CLOSE, ARGUMENT_CLOSE = f"{CLOSE}call{SEP}", f"{CLOSE}argument{SEP}"


def _escape(value: Any) -> str:
    return str(value).replace("&", "&amp;").replace('"', "&quot;")


def render(
    tokenizer: Any, messages: Sequence[Message], tools: Sequence[dict] | None = None,
    add_generation_prompt: bool = False, enable_thinking: bool = False, **options: Any,
) -> str:
    """K3's prompt; thinking on uses `thinking_effort="max"`, as K3's tokenizer does by default."""
    parts = [_declare(tools)] if tools else []
    if enable_thinking:
        parts.append(_system_note("thinking-effort", (
            "`thinking_effort` guides on how much to think in your thinking channel (not including the response "
            "channel), supported values include `low`, `medium`, `high`, and `max`.\n"
            "Now the system is invoked with `thinking_effort=max`."
        )))
    calls: list[dict[str, Any]] = []
    tool_index = 0
    for index, message in enumerate(messages):
        role = message.get("role")
        where = f"messages[{index}]"
        if role == "tool":
            tool_index += 1
            name = message.get("tool", message.get("name"))
            if name is None and tool_index <= len(calls):
                name = calls[tool_index - 1].get("function", calls[tool_index - 1])["name"]
            if name is None:
                raise ChatFormatError(f"{where}: a tool result needs a 'name' (or 'tool'), or a call before it to answer")
            parts.append(_message([("role", "tool"), ("tool", name), ("index", tool_index)], _content(message, where)))
        elif role == "assistant":
            calls, tool_index = list(message.get("tool_calls") or []), 0
            parts.append(_message(_roles("assistant", message), _assistant(message, enable_thinking, where)))
        elif role in ("user", "system"):
            if role == "system" and message.get("tools"):
                parts.append(_declare(message["tools"], dynamic=True))
            else:
                parts.append(_message(_roles(role, message), _content(message, where)))
        else:
            raise ChatFormatError(f"{where}['role'] is {role!r}; Kimi K3's encoder knows user, system, assistant, tool")
    if add_generation_prompt:
        parts.append(f'{OPEN}message role="assistant"{SEP}{OPEN}{"think" if enable_thinking else "response"}{SEP}')
    return "".join(parts)


def _roles(role: str, message: Message) -> list[tuple[str, Any]]:
    return [("role", role)] + ([("name", message["name"])] if message.get("name") else [])


def _message(attributes: list[tuple[str, Any]], body: str) -> str:
    return _open("message", attributes) + body + f"{CLOSE}message{SEP}{END_OF_MESSAGE}"


def _open(tag: str, attributes: Sequence[tuple[str, Any]] = ()) -> str:
    return OPEN + tag + "".join(f' {key}="{_escape(value)}"' for key, value in attributes) + SEP


def _content(message: Message, where: str) -> str:
    content = message.get("content")
    if content is None:
        return ""
    if not isinstance(content, str):
        raise ChatFormatError(f"{where}['content'] must be text for Kimi K3 here (images are not supported)")
    return content


def _system_note(kind: str, body: str) -> str:
    return _message([("role", "system"), ("type", kind)], body.strip())


def _declare(tools: Sequence[dict], dynamic: bool = False) -> str:
    schemas = json.dumps(_sorted(list(tools)), ensure_ascii=False, separators=(",", ":"))
    if dynamic:
        head = ("## New Tools Available\nThe system dynamically extends the toolset via lazy-loading.\n"
                "You have access to all existing and extended tools.\nHere are the specs for the extended tools.\n\n")
    else:
        head = "# Tools\nHere are the available tools, described in JSONSchema.\n\n"
    return _message([("role", "system"), ("type", "tool-declare")], f"{head}```json\n{schemas}\n```")


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _sorted(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted(item) for item in value]
    return value


def _assistant(message: Message, thinking: bool, where: str) -> str:
    text = ""
    if thinking:
        thought = message.get("reasoning_content") or message.get("reasoning")
        text += THINK.open + (str(thought) if thought is not None and str(thought).strip() else "") + THINK.close
    text += RESPONSE_OPEN + _content(message, where) + RESPONSE_CLOSE
    calls = message.get("tool_calls") or []
    if calls:
        text += TOOLS_OPEN + "".join(_call(call, i, f"{where}['tool_calls'][{i - 1}]") for i, call in enumerate(calls, 1))
        text += TOOLS_CLOSE
    return text


def _call(call: dict[str, Any], index: int, where: str) -> str:
    function = call.get("function", call)
    arguments = function.get("arguments")
    text = _open("call", [("tool", function["name"]), ("index", index)])
    if isinstance(arguments, str) and arguments.strip():
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return text + _open("json", [("type", "object")]) + arguments + f"{CLOSE}json{SEP}" + CALL_CLOSE
    arguments = arguments or {}
    if not isinstance(arguments, dict):
        raise ChatFormatError(f"{where}['function']['arguments'] must be a JSON object (or its text)")
    for key, value in arguments.items():
        written = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        text += _open("argument", [("key", key), ("type", _type(value))]) + written + ARGUMENT_CLOSE
    return text + CALL_CLOSE


def _type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "object" if isinstance(value, dict) else "array"
