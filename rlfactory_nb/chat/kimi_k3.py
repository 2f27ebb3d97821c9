"""Kimi K3 (family `kimi_k3`): XTML channels and typed arguments, prompts rendered here from the
official encoder's rules (`encoding_k3.py`; the model ships no chat template):

    <|open|>message role="assistant"<|sep|><|open|>think<|sep|>The user wants the weather.<|close|>think<|sep|>
    <|open|>response<|sep|>Let me look.<|close|>response<|sep|><|open|>tools<|sep|>
    <|open|>call tool="get_weather" index="1"<|sep|>
    <|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|>
    <|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>

(one line in the model's text; broken here to read). The generation prompt opens the `think`
channel with thinking on (`response` with it off), so sampled text starts inside it. The answer is
the `response` channel; an `argument`'s `type=` says how to read its text (a string raw, anything
else JSON), and the tool's schema, when the agent passes it, has the last word (chat/schema.py).
A call that could not be written as arguments comes as `<|open|>json type="object"<|sep|>{...}`.

Calls are read by structure: a value runs to its own `<|close|>argument<|sep|>`, so a value that
contains `<|close|>tools<|sep|>` is data, and a call stands only once its `<|close|>call<|sep|>` is
read. Every search moves forward only (chat/blocks.py), so hostile text costs one pass.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlfactory_nb.chat.blocks import Finders, Piece, assemble, skip_space
from rlfactory_nb.chat.format import ChatFormat, register_chat_format
from rlfactory_nb.chat.parsers import ParseResult, check_max_calls, register_parser, without_end
from rlfactory_nb.chat.reasoning import ReasoningMarkers
from rlfactory_nb.chat.schema import Untyped, resolve
from rlfactory_nb.errors import ChatFormatError
from rlfactory_nb.types import MalformedCall, Message, ToolCall, ToolSpec

OPEN, CLOSE, SEP, END_OF_MESSAGE = "<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"
THINK = ReasoningMarkers(f"{OPEN}think{SEP}", f"{CLOSE}think{SEP}")
RESPONSE_OPEN, RESPONSE_CLOSE = f"{OPEN}response{SEP}", f"{CLOSE}response{SEP}"
MESSAGE_CLOSE = f"{CLOSE}message{SEP}"
TOOLS_OPEN, TOOLS_CLOSE = f"{OPEN}tools{SEP}", f"{CLOSE}tools{SEP}"
CALL_OPEN, CALL_CLOSE = f"{OPEN}call", f"{CLOSE}call{SEP}"
ARGUMENT_OPEN, ARGUMENT_CLOSE = f"{OPEN}argument", f"{CLOSE}argument{SEP}"
JSON_OPEN, JSON_CLOSE = f"{OPEN}json", f"{CLOSE}json{SEP}"
_CHANNEL_MARKERS = (RESPONSE_OPEN, RESPONSE_CLOSE, MESSAGE_CLOSE)
FORMAT_HINT = (
    f'Write calls after the response channel as {TOOLS_OPEN}{CALL_OPEN} tool="TOOL_NAME" index="1"{SEP}'
    f'{ARGUMENT_OPEN} key="ARGUMENT" type="string"{SEP}value{ARGUMENT_CLOSE}{CALL_CLOSE}{TOOLS_CLOSE} '
    "(type number, boolean, null, object or array for a JSON value)."
)
_ATTRIBUTE = re.compile(r'[ \t]*([A-Za-z_]+)="([^"<>]*)"')
_HEADER_LIMIT = 512
"""characters searched for the `<|sep|>` that ends a call or argument tag (attributes are short)"""


@register_parser("kimi_k3")
@dataclass(frozen=True)
class KimiK3Parser:
    """Reads K3's `tools` channel and its `response` answer; see the module docstring."""

    max_calls: int = 8
    """calls run per turn, and broken calls answered one by one (as qwen3's parser)"""
    starts_in_reasoning: bool = False
    """the generation prompt opened the think channel: the text starts inside it"""

    def __post_init__(self) -> None:
        check_max_calls(self.max_calls)

    def parse(self, text: str, tools: Sequence[ToolSpec] | None = None) -> ParseResult:
        text = without_end(text, (END_OF_MESSAGE,))
        inside = in_think(text, self.starts_in_reasoning)
        markers = THINK if inside or text.lstrip().startswith(THINK.open) else None
        result = assemble(text, _pieces, TOOLS_OPEN, FORMAT_HINT, markers, inside, self.max_calls)
        return resolve(result, tools)


def _pieces(text: str) -> list[Piece]:
    """Text (channel markers removed) and the calls of each tools channel, in order."""
    finders = Finders(text)
    pieces: list[Piece] = []
    pos = 0
    while (start := finders.next(TOOLS_OPEN, pos)) >= 0:
        pieces.append(_plain(text[pos:start]))
        calls, pos = _read_tools(text, start, finders)
        pieces += calls
    pieces.append(_plain(text[pos:]))
    return pieces


def _plain(text: str) -> str:
    for marker in _CHANNEL_MARKERS:
        text = text.replace(marker, "")
    return text


def _read_tools(text: str, start: int, finders: Finders) -> tuple[list[Piece], int]:
    out: list[Piece] = []
    pos = start + len(TOOLS_OPEN)
    while True:
        pos = skip_space(text, pos)
        if text.startswith(TOOLS_CLOSE, pos):
            return out, pos + len(TOOLS_CLOSE)
        if text.startswith(CALL_OPEN, pos):
            result, pos = _read_call(text, pos, finders)
            out.append(result)
            continue
        if pos >= len(text) or _cut(text, pos, TOOLS_CLOSE, CALL_OPEN, MESSAGE_CLOSE):
            if pos < len(text) or not out:
                out.append(MalformedCall(f"The text ended inside the tools channel. {FORMAT_HINT}", raw=text[start:]))
            return out, len(text)
        if text.startswith(MESSAGE_CLOSE, pos) or text.startswith(TOOLS_OPEN, pos):  # tools left unclosed
            return out, pos
        stops = [at for m in (CALL_OPEN, TOOLS_CLOSE, TOOLS_OPEN) if (at := finders.next(m, pos + 1)) >= 0]
        end = min(stops) if stops else len(text)
        out.append(MalformedCall(f"Unexpected text in the tools channel; expected {CALL_OPEN}. {FORMAT_HINT}", text[pos:end]))
        pos = end
        if end >= len(text):
            return out, end


def _read_call(text: str, start: int, finders: Finders) -> tuple[ToolCall | MalformedCall, int]:
    """One `<|open|>call tool="N" index="i"<|sep|>` ... `<|close|>call<|sep|>` at `start`."""
    attributes, pos = _tag(text, start + len(CALL_OPEN), finders)
    if attributes is None:
        return _broken_or_cut(text, start, pos, finders, 'A call must open as <|open|>call tool="TOOL_NAME" index="1"<|sep|>.')
    name = attributes.get("tool", "").strip()
    if not name:
        return _broken(text, start, pos, finders, "The call has no tool name.")
    arguments: dict[str, Any] = {}
    while True:
        pos = skip_space(text, pos)
        if text.startswith(CALL_CLOSE, pos):
            end = pos + len(CALL_CLOSE)
            return ToolCall(name=name, arguments=arguments, raw=text[start:end]), end
        for opener, closer in ((ARGUMENT_OPEN, ARGUMENT_CLOSE), (JSON_OPEN, JSON_CLOSE)):
            if text.startswith(opener, pos):
                break
        else:
            message = f"Unexpected text in the call of {name!r}; expected {ARGUMENT_OPEN} or {CALL_CLOSE}."
            return _broken_or_cut(text, start, pos, finders, message, ARGUMENT_OPEN, JSON_OPEN, CALL_CLOSE)
        attributes, pos = _tag(text, pos + len(opener), finders)
        if attributes is None:
            return _broken_or_cut(text, start, pos, finders, f"An {opener} tag must end with {SEP}.")
        close = finders.next(closer, pos)
        if close < 0:
            return _cut_off(text, start, "The text ended inside an argument.")
        raw, pos = text[pos:close], close + len(closer)
        if opener == JSON_OPEN:
            whole = _json_object(raw)
            if whole is None:
                return _broken(text, start, pos, finders, "The json block of the call is not a JSON object.")
            arguments.update(whole)
            continue
        key = attributes.get("key", "")
        if not key or key in arguments:
            return _broken(text, start, pos, finders, f"An argument has no key or repeats one ({key!r}).")
        arguments[key] = _value(raw, attributes.get("type"))


def _tag(text: str, pos: int, finders: Finders) -> tuple[dict[str, str] | None, int]:
    """The attributes of a tag whose name ends at `pos`, and the position after its `<|sep|>`."""
    sep = finders.next(SEP, pos)
    if sep < 0 or sep - pos > _HEADER_LIMIT:
        return None, pos
    header, attributes, at = text[pos:sep], {}, 0
    while (match := _ATTRIBUTE.match(header, at)) is not None:
        attributes[match.group(1)] = _unescape(match.group(2))
        at = match.end()
    if header[at:].strip():
        return None, pos
    return attributes, sep + len(SEP)


def _value(raw: str, declared: str | None) -> Untyped:
    if declared == "string":
        return Untyped(raw, raw)
    try:
        return Untyped(raw, json.loads(raw))
    except (ValueError, RecursionError):
        return Untyped(raw, raw)


def _json_object(raw: str) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _unescape(value: str) -> str:
    return value.replace("&quot;", '"').replace("&amp;", "&")


def _escape(value: Any) -> str:
    return str(value).replace("&", "&amp;").replace('"', "&quot;")


def _broken_or_cut(text: str, start: int, pos: int, finders: Finders, message: str, *markers: str) -> tuple[MalformedCall, int]:
    if pos >= len(text) or (markers and _cut(text, pos, *markers)) or finders.next(SEP, pos) < 0:
        return _cut_off(text, start, "The text ended inside a call.")
    return _broken(text, start, pos, finders, message)


def _broken(text: str, start: int, pos: int, finders: Finders, message: str) -> tuple[MalformedCall, int]:
    """A broken call runs through its `<|close|>call<|sep|>`, or up to the next call or the channel's
    end when one comes first."""
    through = finders.next(CALL_CLOSE, pos)
    stops = [at for m in (CALL_OPEN, TOOLS_CLOSE) if (at := finders.next(m, pos)) >= 0]
    upto = min(stops) if stops else len(text)
    end = through + len(CALL_CLOSE) if 0 <= through < upto else upto
    return MalformedCall(f"{message} {FORMAT_HINT}", raw=text[start:end]), end


def _cut_off(text: str, start: int, message: str) -> tuple[MalformedCall, int]:
    return MalformedCall(f"{message} {FORMAT_HINT}", raw=text[start:]), len(text)


def _cut(text: str, pos: int, *markers: str) -> bool:
    rest = text[pos : pos + max(map(len, markers)) + 1]
    return any(marker.startswith(rest) for marker in markers)


# The turn as history, and the answer: channels read off the sampled text.


def in_think(text: str, starts_in_reasoning: bool) -> bool:
    """Whether the text starts inside the think channel: the prompt opened it, or its close comes
    before any response marker (so a close inside a later argument is data)."""
    if starts_in_reasoning:
        return True
    close = text.find(THINK.close)
    responses = [at for marker in (RESPONSE_OPEN, RESPONSE_CLOSE) if (at := text.find(marker, 0, max(close, 0))) >= 0]
    return close >= 0 and not responses and not text[:close].count(THINK.open)


def channels(text: str, starts_in_reasoning: bool = False) -> tuple[str, str]:
    """(think channel, response channel) of a sampled turn, exactly as written; a think channel the
    text ends inside is all of it."""
    if in_think(text, starts_in_reasoning) or text.startswith(THINK.open):
        close = text.find(THINK.close)
        if close < 0:
            return text.removeprefix(THINK.open), ""
        thought, rest = text[:close].removeprefix(THINK.open), text[close + len(THINK.close) :]
    else:
        thought, rest = "", text
    opened = rest.find(RESPONSE_OPEN)
    if opened >= 0:
        rest = rest[opened + len(RESPONSE_OPEN) :]
    ends = [at for marker in (RESPONSE_CLOSE, TOOLS_OPEN, MESSAGE_CLOSE) if (at := rest.find(marker)) >= 0]
    return thought, rest[: min(ends)] if ends else rest


def split(text: str, starts_in_reasoning: bool) -> tuple[str, str]:
    """(reasoning, answer), both stripped (the record's `split`)."""
    thought, response = channels(text, starts_in_reasoning)
    return thought.strip(), response.strip()


def assistant_message(text: str, calls: Sequence[ToolCall], reasoning: str = "") -> Message:
    thought, response = channels(text, bool(reasoning))
    message: Message = {"role": "assistant", "content": response, "reasoning_content": thought}
    if calls:
        message["tool_calls"] = [call.to_message_call() for call in calls]
    return message


def tool_message(content: str, call: ToolCall | None = None, index: int = 0) -> Message:
    """A result named after its call (K3 labels each result with its tool); a broken block's as `error`."""
    return {"role": "tool", "content": content, "name": call.name if call else "error"}


# Rendering (the encoder's `build_chat_segments`, joined to text).


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


def _is_kimi_k3(template: str, vocab: frozenset[str]) -> bool:
    """No template, and K3's XTML control tokens."""
    return not template and all(token in vocab for token in (OPEN, CLOSE, SEP, END_OF_MESSAGE))


KIMI_K3 = register_chat_format(
    ChatFormat(
        name="kimi_k3",
        description="Kimi K3: XTML think/response channels, <|open|>tools<|sep|> calls with typed arguments; "
        "prompts rendered from its Python encoder",
        parser=KimiK3Parser,
        reasoning=THINK,
        prefills_reasoning=True,
        leading_reasoning_only=True,
        end_of_turn=(END_OF_MESSAGE,),
        turn_end=END_OF_MESSAGE,
        keep_tokens=(OPEN, CLOSE, SEP),
        drops_past_reasoning=False,
        history_rewriting="renders a blank think channel empty; otherwise none",
        matches=_is_kimi_k3,
        assistant_message=assistant_message,
        tool_message=tool_message,
        split=split,
        control_markers=(OPEN, CLOSE, SEP, END_OF_MESSAGE),
        render=render,
    )
)
