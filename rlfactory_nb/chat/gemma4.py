"""The tool-call format of Gemma 4 (family `gemma4`):

    <|turn>model
    <|channel>thought
    The user wants the weather.
    <channel|><|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|><|tool_response>
    response:get_weather{value:<|"|>sunny<|"|>}<tool_response|>It is sunny.<turn|>

A call's arguments are written by the template's own grammar, not JSON: keys bare, strings between
`<|"|>` tokens (raw, no escapes), booleans `true`/`false`, numbers and None as Python writes them,
`{k:v,...}` objects and `[v,...]` lists, nested to any depth. The block is read by that structure
with an explicit stack (no recursion; past `MAX_DEPTH` levels the call is broken), and a string runs
to its closing `<|"|>`, so a `}<tool_call|>` inside one is data. Only a string containing `<|"|>`
itself cannot be told apart.

The model stops on `<|tool_response>`, which the template writes after a call; the results and
whatever the model writes next stay in the same model turn, so the delta after a call turn is the
results alone (cut after `<|tool_response>` rendered after a base that ends with a call).

Reasoning is a `<|channel>thought ...<channel|>` block at the start of the sampled text (thinking is
switched on by `<|think|>` in the system turn). The template renders it in history only for turns
with calls, and with thinking off the generation prompt pre-fills an empty one that no history turn
shows: both are spans a full render drops (`past_reasoning`). Text before a call is rendered after
the results (the template writes a turn's content last), so it drifts; the reference renders none.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlfactory_nb.chat import messages
from rlfactory_nb.chat.blocks import (
    Finders,
    Read,
    Syntax,
    broken,
    cut_marker,
    parse_turn,
    skip_space,
    truncated,
)
from rlfactory_nb.chat.format import ChatFormat, register_chat_format
from rlfactory_nb.chat.parsers import ParseResult, check_max_calls, register_parser
from rlfactory_nb.chat.reasoning import ReasoningMarkers
from rlfactory_nb.types import MalformedCall, Message, ToolCall, ToolSpec

CALL_OPEN, CALL_CLOSE, QUOTE, PREFIX = "<|tool_call>", "<tool_call|>", '<|"|>', "call:"
THOUGHT = ReasoningMarkers("<|channel>thought", "<channel|>")
FORMAT_HINT = (
    'Write each call as <|tool_call>call:TOOL_NAME{text:<|"|>a string<|"|>,count:3,flag:true,'
    "items:[1,2],options:{k:1}}<tool_call|>"
)
SYNTAX = Syntax(CALL_OPEN, CALL_CLOSE, FORMAT_HINT)
_EMPTY_BLOCKS = f"A <|tool_call> block is empty: another <|tool_call> follows it. {FORMAT_HINT}"
_WORD = re.compile(r"[^,:{}\[\]<>\s]*")
"""a name, a bare key or a bare scalar: up to the next delimiter (a plain character class: linear)"""
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_LITERALS = {"true": True, "false": False, "None": None, "null": None}
_CLOSER = {"{": "}", "[": "]"}
MAX_DEPTH = 100
"""objects and lists nested deeper are a broken call (json.loads stops near 1000 for the JSON families)"""


@register_parser("gemma4")
@dataclass(frozen=True)
class Gemma4Parser:
    """Reads `<|tool_call>call:NAME{...}<tool_call|>` blocks; see the module docstring."""

    max_calls: int = 8
    """calls run per turn, and broken blocks answered one by one (as qwen3's parser)"""
    starts_in_reasoning: bool = False
    """the generation prompt pre-filled the thought channel (Gemma 4's does not leave it open)"""

    def __post_init__(self) -> None:
        check_max_calls(self.max_calls)

    def parse(self, text: str, tools: Sequence[ToolSpec] | None = None) -> ParseResult:
        return parse_turn(text, SYNTAX, _read_block, THOUGHT, self.starts_in_reasoning, self.max_calls)


@dataclass(frozen=True)
class _Fail:
    """Where and why the arguments could not be read; `cut`: the text ended inside them."""

    message: str
    pos: int
    cut: bool = False


def _read_block(text: str, start: int, finders: Finders) -> Read:
    """The call block opening at `start`: `call:NAME`, the arguments object, `<tool_call|>`."""
    pos = start + len(CALL_OPEN)
    if text.startswith(CALL_OPEN, pos):  # a run of openers (a stutter, or hostile text): one broken block,
        while text.startswith(CALL_OPEN, pos + len(CALL_OPEN)):  # and the last opener is read on its own
            pos += len(CALL_OPEN)
        return Read(MalformedCall(_EMPTY_BLOCKS, raw=text[start:pos]), pos)
    if cut_marker(text, pos, PREFIX):
        return truncated(text, start, SYNTAX, "The text ended before call:TOOL_NAME.")
    if not text.startswith(PREFIX, pos):
        return broken(text, start, pos, finders, SYNTAX, "A <|tool_call> block must start with call:TOOL_NAME.")
    name_end = _WORD.match(text, pos + len(PREFIX)).end()
    name = text[pos + len(PREFIX) : name_end]
    if name_end == len(text):
        return truncated(text, start, SYNTAX, "The text ended inside the tool name.")
    if not name or not text.startswith("{", name_end):
        return broken(text, start, name_end, finders, SYNTAX, "call:TOOL_NAME must be followed by {arguments}.")
    read = _value_tree(text, name_end, finders)
    if isinstance(read, _Fail) and read.cut:
        return truncated(text, start, SYNTAX, read.message)
    if isinstance(read, _Fail):
        return broken(text, start, read.pos, finders, SYNTAX, read.message)
    arguments, pos = read
    if text.startswith(CALL_CLOSE, pos):
        end = pos + len(CALL_CLOSE)
        return Read(ToolCall(name=name, arguments=arguments, raw=text[start:end]), end)
    if cut_marker(text, pos, CALL_CLOSE):
        return truncated(text, start, SYNTAX, f"The text ended before <tool_call|> closed call:{name}.")
    return broken(text, start, pos, finders, SYNTAX, f"Expected <tool_call|> after the arguments of call:{name}.")


@dataclass
class _Frame:
    """An object or list being read, and the key its next value goes under (objects)."""

    value: dict[str, Any] | list[Any]
    key: str | None = None


def _value_tree(text: str, pos: int, finders: Finders) -> tuple[Any, int] | _Fail:
    """The `{...}` or `[...]` at `pos` and the position after it, read with a stack."""
    stack = [_Frame({} if text[pos] == "{" else [])]
    pos, expect = pos + 1, "first"  # first: an item or the closer; item: an item; next: ',' or the closer
    while True:
        pos = skip_space(text, pos)
        frame = stack[-1]
        if pos >= len(text):
            return _Fail("The text ended inside the arguments.", pos, cut=True)
        closer = "}" if isinstance(frame.value, dict) else "]"
        if expect != "item" and text[pos] == closer:
            stack.pop()
            if not stack:
                return frame.value, pos + 1
            _add(stack[-1], frame.value)
            pos, expect = pos + 1, "next"
        elif expect == "next":
            if text[pos] != ",":
                return _Fail(f"Expected ',' or '{closer}' in the arguments.", pos)
            pos, expect = pos + 1, "item"
        elif isinstance(frame.value, dict) and frame.key is None:
            read = _key(text, pos, finders, frame.value)
            if isinstance(read, _Fail):
                return read
            (frame.key, pos), expect = read, "item"  # a value must follow, not the closer
        elif text[pos] in _CLOSER:
            if len(stack) >= MAX_DEPTH:
                return _Fail(f"The arguments nest deeper than {MAX_DEPTH} levels.", pos)
            stack.append(_Frame({} if text[pos] == "{" else []))
            pos, expect = pos + 1, "first"
        else:
            read = _scalar(text, pos, finders)
            if isinstance(read, _Fail):
                return read
            value, pos = read
            _add(frame, value)
            expect = "next"


def _add(frame: _Frame, value: Any) -> None:
    if isinstance(frame.value, dict):
        frame.value[frame.key] = value
        frame.key = None
    else:
        frame.value.append(value)


def _key(text: str, pos: int, finders: Finders, into: dict[str, Any]) -> tuple[str, int] | _Fail:
    """A key (bare, or quoted as the template writes them in results) and the position after its ':'."""
    if text.startswith(QUOTE, pos):
        read = _string(text, pos, finders)
        if isinstance(read, _Fail):
            return read
        key, end = read
    else:
        end = _WORD.match(text, pos).end()
        key = text[pos:end]
    end = skip_space(text, end)
    if end >= len(text) or cut_marker(text, end, QUOTE):
        return _Fail("The text ended inside the arguments.", end, cut=True)
    if not key or not text.startswith(":", end):
        return _Fail("Each argument must be written NAME:value.", pos)
    if key in into:
        return _Fail(f"The argument {key!r} is given twice.", pos)
    return key, end + 1


def _scalar(text: str, pos: int, finders: Finders) -> tuple[Any, int] | _Fail:
    """A string between `<|"|>` marks, or a bare true/false/None/number."""
    if text.startswith(QUOTE, pos):
        return _string(text, pos, finders)
    end = _WORD.match(text, pos).end()
    if end >= len(text) or cut_marker(text, end, QUOTE):
        return _Fail("The text ended inside the arguments.", end, cut=True)
    literal = text[pos:end]
    if literal in _LITERALS:
        return _LITERALS[literal], end
    if _NUMBER.fullmatch(literal):
        return json.loads(literal), end
    if not literal:
        return _Fail("An argument has no value.", pos)
    return _Fail(f"{literal[:40]!r} is not a value: write strings as <|\"|>text<|\"|>.", pos)


def _string(text: str, pos: int, finders: Finders) -> tuple[str, int] | _Fail:
    close = finders.next(QUOTE, pos + len(QUOTE))
    if close < 0:
        return _Fail('The text ended inside a <|"|> string.', len(text), cut=True)
    return text[pos + len(QUOTE) : close], close + len(QUOTE)


def _assistant_message(text: str, calls: Sequence[ToolCall], reasoning: str) -> Message:
    """Reasoning in `reasoning_content` (the template renders it, for turns with calls, from there)
    and call ids that the results' `tool_call_id` name (the template finds each result's tool so)."""
    message = messages.assistant_message(text, calls, reasoning)
    for index, call in enumerate(message.get("tool_calls", [])):
        call["id"] = messages.call_id(index)
    if reasoning:
        message["reasoning_content"] = reasoning
    return message


DELTA_BASE: tuple[Message, ...] = (
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "base", "type": "function", "function": {"name": "f", "arguments": {}}}]},
)
"""a call turn: the template renders results only after one, ending it with `<|tool_response>`; its id
matches no result's, so each result is named by its own `name`"""


def _is_gemma4(template: str, vocab: frozenset[str]) -> bool:
    """`<|turn>` turns with `<|tool_call>call:NAME{...}` calls."""
    return "<|turn>" in template and CALL_OPEN in template


GEMMA4 = register_chat_format(
    ChatFormat(
        name="gemma4",
        description='Gemma 4: <|tool_call>call:NAME{k:<|"|>v<|"|>} calls, <|channel>thought reasoning',
        parser=Gemma4Parser,
        reasoning=THOUGHT,
        prefills_reasoning=False,
        leading_reasoning_only=True,
        end_of_turn=("<turn|>", "<|tool_response>"),
        turn_end="<|tool_response>",
        keep_tokens=(CALL_OPEN, CALL_CLOSE, QUOTE, "<|channel>", "<channel|>"),
        drops_past_reasoning=True,
        history_rewriting=(
            "renders reasoning only for turns with calls after the last user message; with thinking off the "
            "generation prompt pre-fills an empty <|channel>thought\\n<channel|> that history does not show; "
            "a turn's text is written after its calls' results"
        ),
        control_markers=("<|turn>", "<turn|>", "<|tool_response>", "<tool_response|>"),
        matches=_is_gemma4,
        assistant_message=_assistant_message,
        tool_message=messages.named_tool_message,
        delta_base=DELTA_BASE,
        past_reasoning=("<|channel>", "<channel|>"),
    )
)
