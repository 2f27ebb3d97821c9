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
read. Every search moves forward only (chat/blocks.py), so hostile text costs one pass. Prompts are
rendered by chat/kimi_k3_render.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlfactory_nb.chat.blocks import Finders, Piece, assemble, skip_space
from rlfactory_nb.chat.format import ChatFormat, register_chat_format
from rlfactory_nb.chat.kimi_k3_render import (
    ARGUMENT_CLOSE,
    CALL_CLOSE,
    CLOSE,
    END_OF_MESSAGE,
    MESSAGE_CLOSE,
    OPEN,
    RESPONSE_CLOSE,
    RESPONSE_OPEN,
    SEP,
    THINK,
    TOOLS_CLOSE,
    TOOLS_OPEN,
    render,
)
from rlfactory_nb.chat.parsers import ParseResult, check_max_calls, register_parser, without_end
from rlfactory_nb.chat.schema import Untyped, resolve
from rlfactory_nb.types import MalformedCall, Message, ToolCall, ToolSpec

CALL_OPEN, ARGUMENT_OPEN, JSON_OPEN = f"{OPEN}call", f"{OPEN}argument", f"{OPEN}json"
JSON_CLOSE = f"{CLOSE}json{SEP}"
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
