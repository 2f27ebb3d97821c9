"""DeepSeek V3.2 / V4 / V4.1 prompts, rendered here: these models ship a Python encoder in place of a
chat template, so the family's record owns rendering (`ChatFormat.render`).

The text equals the official encoder's (`encoding_dsv32.py`, `encoding_dsv4.py`, V4.1's `encoding.py`;
tests/chat compare the two on every conversation they render), called the way vLLM's DeepSeek
tokenizers call it: the request's tools ride on a system message put first, thinking mode is
`enable_thinking`, and V3.2/V4's default reasoning effort (V4.1: `high`) applies.

Where the official encoders refuse a shape a rollout makes, this renders it and says so here:
- results for broken call blocks: the agent answers each one with a tool message, so a turn can have
  more results than calls (V3.2 asserts); V3.2's `<function_results>` block closes after the run of
  tool messages instead;
- an answer in thinking mode with empty reasoning (V3.2 asserts): rendered with an empty reasoning.
Shapes with no meaning here (a role the encoder does not know, non-text content, a `task`) are a
ChatFormatError that names the message and field.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlfactory_nb.chat import dsml
from rlfactory_nb.errors import ChatFormatError
from rlfactory_nb.types import Message

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
USER, ASSISTANT, SYSTEM = "<｜User｜>", "<｜Assistant｜>", "<｜System｜>"
LATEST_REMINDER = "<｜latest_reminder｜>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ROLE_MARKERS = (BOS, EOS, USER, ASSISTANT, SYSTEM, LATEST_REMINDER)
"""structure to the encoders though a tokenizer may not mark them special (ChatFormat.control_markers)"""


@dataclass(frozen=True)
class Generation:
    """What differs between the encoders."""

    dialect: dsml.Dialect
    tools_intro: str
    """the tools section before the schemas, with the `{open}`/`{invoke}`/`{parameter}` tags to fill"""
    tools_outro: str
    effort_prefix: str
    """the thinking-mode text at the very start of the conversation ("" for V3.2 and V4's `low`)"""
    system_token: bool
    """V4.1: `<｜System｜>` leads the conversation and marks a later system message"""
    tool_results_in_user: bool
    """V4/V4.1: results are `<tool_result>` blocks of a user turn; V3.2: a `<function_results>` block"""
    roles: frozenset[str]


def render(
    generation: Generation,
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]] | None = None,
    enable_thinking: bool = False,
) -> str:
    """The prompt for `messages` (a user or tool message last ends with the assistant header)."""
    conversation = [dict(m) for m in messages]
    for index, message in enumerate(conversation):
        _check(generation, index, message)
    if tools:
        conversation.insert(0, {"role": "system", "tools": list(tools)})
    if generation.tool_results_in_user:
        conversation = _merge_results(conversation)
        drop = enable_thinking and not tools and not any(m.get("tools") for m in conversation)
        if drop:
            conversation = _drop_past_reasoning(conversation, generation)
        return BOS + "".join(_v4_message(generation, i, conversation, enable_thinking, drop) for i in range(len(conversation)))
    return BOS + "".join(_v32_message(generation, i, conversation, enable_thinking) for i in range(len(conversation)))


def _check(generation: Generation, index: int, message: Message) -> None:
    role = message.get("role")
    if role not in generation.roles:
        known = ", ".join(sorted(generation.roles))
        raise ChatFormatError(f"messages[{index}]['role'] is {role!r}; this DeepSeek encoder knows: {known}")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise ChatFormatError(f"messages[{index}]['content'] must be text for DeepSeek's encoder, got {type(content).__name__}")
    if message.get("task") is not None:
        raise ChatFormatError(f"messages[{index}]['task']: DeepSeek's internal task tokens are not supported; remove the field")
    if role == "developer" and not content:
        raise ChatFormatError(f"messages[{index}]['content']: a developer message needs content")
    for j, call in enumerate(message.get("tool_calls") or ()):
        _arguments(call, f"messages[{index}]['tool_calls'][{j}]")


def _last_user(conversation: list[Message], generation: Generation) -> int:
    for index in range(len(conversation) - 1, -1, -1):
        role = conversation[index].get("role")
        if role in ("user", "developer") or (generation.system_token and role == "system" and index > 0):
            return index
    return -1


def _tools_text(generation: Generation, tools: Sequence[dict[str, Any]]) -> str:
    d = generation.dialect
    schemas = "\n".join(_json(tool.get("function", tool)) for tool in tools)
    intro = generation.tools_intro.format(open=d.open, invoke=d.tag(d.invoke), parameter=d.tag(d.parameter),
                                          invoke_end=d.end(d.invoke), parameter_end=d.end(d.parameter), close=d.close)
    return intro + schemas + generation.tools_outro


def _assistant(generation: Generation, message: Message, with_reasoning: bool) -> str:
    d = generation.dialect
    calls = message.get("tool_calls") or []
    block = ""
    if calls:
        invokes = [_invoke(d, call) for call in calls]
        block = f"\n\n{d.open}\n" + "\n".join(invokes) + f"\n{d.close}"
    reasoning = (message.get("reasoning_content") or "") + THINK_CLOSE if with_reasoning else ""
    end = "" if message.get("wo_eos") else EOS
    return f"{reasoning}{message.get('content') or ''}{block}{end}"


def _invoke(d: dsml.Dialect, call: dict[str, Any]) -> str:
    function = call.get("function", call)
    parameters = [
        f'{d.tag(d.parameter)} name="{key}" string="{"true" if isinstance(value, str) else "false"}">'
        f"{value if isinstance(value, str) else _json(value)}{d.end(d.parameter)}"
        for key, value in _arguments(call, "a tool call").items()
    ]
    return f'{d.tag(d.invoke)} name="{function.get("name")}">\n' + "\n".join(parameters) + f"\n{d.end(d.invoke)}"


def _arguments(call: dict[str, Any], where: str) -> dict[str, Any]:
    """A call's arguments as a dict: given as one, or as its JSON text (what the encoders take)."""
    arguments = call.get("function", call).get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            arguments = None
    if not isinstance(arguments, dict):
        raise ChatFormatError(f"{where}['function']['arguments'] must be a JSON object (or its text)")
    return arguments


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return json.dumps(value, ensure_ascii=True)


# V3.2: tools and results as their own blocks, the thinking token after each user turn.


def _v32_message(generation: Generation, index: int, conversation: list[Message], thinking: bool) -> str:
    message, role = conversation[index], conversation[index].get("role")
    last_user = _last_user(conversation, generation)
    think = THINK_OPEN if index == last_user and thinking else THINK_CLOSE
    tools = message.get("tools")
    if role == "system":
        return (message.get("content") or "") + (f"\n\n{_tools_text(generation, tools)}" if tools else "")
    if role == "developer":
        extra = f"\n\n{_tools_text(generation, tools)}" if tools else ""
        return f"{USER}{extra}\n\n# The user's message is: {message.get('content')}{ASSISTANT}{think}"
    if role == "user":
        return f"{USER}{message.get('content')}{ASSISTANT}{think}"
    if role == "tool":
        return _v32_result(conversation, index, thinking and index >= last_user)
    return _assistant(generation, message, thinking and index > last_user)


def _v32_result(conversation: list[Message], index: int, thinking: bool) -> str:
    before = index - 1
    while before >= 0 and conversation[before].get("role") == "tool":
        before -= 1
    if before < 0 or conversation[before].get("role") != "assistant":
        raise ChatFormatError(f"messages[{index}]: a tool result must follow an assistant turn")
    text = "\n\n<function_results>" if before == index - 1 else ""
    text += f"\n<result>{conversation[index].get('content')}</result>"
    if index + 1 == len(conversation) or conversation[index + 1].get("role") != "tool":
        text += "\n</function_results>\n\n" + (THINK_OPEN if thinking else THINK_CLOSE)
    return text


# V4 / V4.1: results merged into a user turn, the assistant header after the last user turn.


def _merge_results(conversation: list[Message]) -> list[Message]:
    """Tool messages become `<tool_result>` blocks of a user turn (and a user message right after
    results joins that turn), in the order of the calls they answer when ids say so."""
    merged: list[dict[str, Any]] = []
    for message in conversation:
        role = message.get("role")
        joins = merged and merged[-1].get("role") == "user" and "blocks" in merged[-1]
        if role == "tool":
            block = ("result", message.get("content") or "", message.get("tool_call_id", ""))
            if joins:
                merged[-1]["blocks"].append(block)
            else:
                merged.append({"role": "user", "blocks": [block]})
        elif role == "user":
            block = ("text", message.get("content") or "", "")
            if joins:
                merged[-1]["blocks"].append(block)
            else:
                merged.append({**message, "blocks": [block]})
        else:
            merged.append(message)
    return _in_call_order(merged)


def _in_call_order(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    order: dict[str, int] = {}
    for message in conversation:
        if message.get("role") == "assistant" and message.get("tool_calls"):
            order = {}
            for index, call in enumerate(message["tool_calls"]):
                if call_id := call.get("id") or call.get("function", {}).get("id", ""):
                    order[call_id] = index
        elif message.get("role") == "user" and order:
            results = [b for b in message["blocks"] if b[0] == "result"]
            if len(results) > 1:
                ranked = iter(sorted(results, key=lambda b: order.get(b[2], 0)))
                message["blocks"] = [next(ranked) if b[0] == "result" else b for b in message["blocks"]]
    return conversation


def _drop_past_reasoning(conversation: list[Message], generation: Generation) -> list[Message]:
    """Thinking mode without tools: reasoning of turns before the last user turn is dropped, and so
    are earlier developer messages."""
    last_user = _last_user(conversation, generation)
    kept: list[Message] = []
    for index, message in enumerate(conversation):
        role = message.get("role")
        if role in ("user", "system", "tool", "latest_reminder") or index >= last_user:
            kept.append(message)
        elif role == "assistant":
            kept.append({k: v for k, v in message.items() if k != "reasoning_content"})
    return kept


def _v4_message(generation: Generation, index: int, conversation: list[Message], thinking: bool, drop: bool) -> str:
    message, role = conversation[index], conversation[index].get("role")
    last_user = _last_user(conversation, generation)
    effort = generation.effort_prefix if index == 0 and thinking else ""
    text = SYSTEM if generation.system_token and index == 0 and (effort or role == "system") else ""
    text += effort
    tools = message.get("tools")
    if role == "system":
        text += SYSTEM if generation.system_token and index > 0 else ""
        text += (message.get("content") or "") + (f"\n\n{_tools_text(generation, tools)}" if tools else "")
    elif role == "developer":
        text += USER + (message.get("content") or "") + (f"\n\n{_tools_text(generation, tools)}" if tools else "")
    elif role == "user":
        text += USER + "\n\n".join(body if kind == "text" else f"<tool_result>{body}</tool_result>"
                                   for kind, body, _ in message["blocks"])
    elif role == "latest_reminder":
        text += LATEST_REMINDER + (message.get("content") or "")
    else:
        text += _assistant(generation, message, thinking and (not drop or index > last_user))
    following = conversation[index + 1].get("role") if index + 1 < len(conversation) else None
    opens_turn = role in ("user", "developer") or (generation.system_token and role == "system" and index > 0)
    if following in (None, "assistant", "latest_reminder") and opens_turn:
        think = thinking and (not drop or index >= last_user)
        text += ASSISTANT + (THINK_OPEN if think else THINK_CLOSE)
    return text
