"""The tool-call format of GLM-4.5 / 4.5-Air / 4.6 (family `glm4_5`):

    <|assistant|>
    <think>The user wants the weather.</think>
    Let me look.
    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Paris</arg_value>
    </tool_call><|observation|>
    <tool_response>
    sunny
    </tool_response><|assistant|>

A block is the tool name on the opener's line, then `<arg_key>`/`<arg_value>` pairs, read by their
structure: each value runs to its own `</arg_value>`, so a value that contains `</tool_call>` is data.
Only a value containing `</arg_value>` itself cannot be told apart. The template writes string values
raw and others as JSON, so values are typed by the tool's schema when the agent passes it, else
as qwen3_xml's are (chat/schema.py). GLM-4.7 writes the same block with no newlines
(`<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>`), which this reads too.

An assistant turn has no end token: generation stops on the next block's role token,
`<|observation|>` before tool results and `<|user|>` after a final answer. The sampled ids hold that
token, so the record's `turn_end_opens_next` cuts the delta after it as rendered after the base, and
the drift check does not count a final stop token that a full render has not written yet.

Reasoning is a `<think>` block at the start of the turn only; the template writes one in every
assistant turn (empty for turns before the last user message, and in the generation prompt with
thinking off, where `/nothink` also ends the user's message). Calls in it are drafts: not run, counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlfactory_nb.chat.blocks import (
    Finders,
    Read,
    Syntax,
    broken,
    cut_marker,
    parse_turn,
    skip_space,
    truncated,
    typed_value,
)
from rlfactory_nb.chat.format import ChatFormat, register_chat_format
from rlfactory_nb.chat.parsers import ParseResult, check_max_calls, register_parser, without_end
from rlfactory_nb.chat.qwen3 import THINK
from rlfactory_nb.chat.schema import Untyped, resolve
from rlfactory_nb.types import ToolCall, ToolSpec

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
KEY_OPEN, KEY_CLOSE = "<arg_key>", "</arg_key>"
VALUE_OPEN, VALUE_CLOSE = "<arg_value>", "</arg_value>"
FORMAT_HINT = (
    "Write each call as <tool_call>TOOL_NAME\n<arg_key>ARGUMENT_NAME</arg_key>\n<arg_value>value</arg_value>\n"
    "</tool_call>"
)
SYNTAX = Syntax(CALL_OPEN, CALL_CLOSE, FORMAT_HINT)
_STOPS = ("<|observation|>", "<|user|>", "<|endoftext|>")
_NOT_IN_A_NAME = frozenset(" \t\r\n<>{}\"'")


@register_parser("glm4_5")
@register_parser("glm4_7")
@dataclass(frozen=True)
class GLM45Parser:
    """Reads `<tool_call>NAME<arg_key>..</arg_key><arg_value>..</arg_value></tool_call>` blocks."""

    max_calls: int = 8
    """calls run per turn, and broken blocks answered one by one (as qwen3's parser)"""
    starts_in_reasoning: bool = False
    """the generation prompt pre-filled `<think>` (GLM's templates do not; kept for the contract)"""

    def __post_init__(self) -> None:
        check_max_calls(self.max_calls)

    def parse(self, text: str, tools: Sequence[ToolSpec] | None = None) -> ParseResult:
        text = without_end(text, _STOPS)
        result = parse_turn(text, SYNTAX, _read_block, THINK, self.starts_in_reasoning, self.max_calls)
        return resolve(result, tools)


def _read_block(text: str, start: int, finders: Finders) -> Read:
    """The call block opening at `start`: the name up to its line's end, then key/value pairs."""
    pos = skip_space(text, start + len(CALL_OPEN))
    ends = [at for marker in ("\n", KEY_OPEN, CALL_CLOSE) if (at := finders.next(marker, pos)) >= 0]
    if not ends:
        return truncated(text, start, SYNTAX, "The text ended inside <tool_call> before the tool name's line ended.")
    name = "" if _reopens(finders, pos, min(ends)) else text[pos : min(ends)].strip()
    if not name or not _NOT_IN_A_NAME.isdisjoint(name):
        return broken(text, start, pos, finders, SYNTAX, "A <tool_call> block must start with the tool name on its line.")
    pos = min(ends)
    arguments: dict[str, Any] = {}
    while True:
        pos = skip_space(text, pos)
        if text.startswith(KEY_OPEN, pos):
            read = _argument(text, start, pos, finders, name, arguments)
            if isinstance(read, Read):
                return read
            pos = read
        elif text.startswith(CALL_CLOSE, pos):
            end = pos + len(CALL_CLOSE)
            return Read(ToolCall(name=name, arguments=arguments, raw=text[start:end]), end)
        elif cut_marker(text, pos, KEY_OPEN, CALL_CLOSE):
            return truncated(text, start, SYNTAX, f"The text ended inside <tool_call>{name} before </tool_call>.")
        else:
            message = f"Unexpected text inside <tool_call>{name}; expected <arg_key>NAME</arg_key> or </tool_call>."
            return broken(text, start, pos, finders, SYNTAX, message)


def _argument(text: str, start: int, pos: int, finders: Finders, name: str, arguments: dict[str, Any]) -> int | Read:
    """One `<arg_key>K</arg_key><arg_value>V</arg_value>` pair at `pos`, added to `arguments`: the
    position after it, or the broken (or cut) block."""
    close = finders.next(KEY_CLOSE, pos)
    if close < 0 and finders.next(CALL_CLOSE, pos) < 0:
        return truncated(text, start, SYNTAX, f"The text ended inside an <arg_key> of <tool_call>{name}.")
    key = "" if close < 0 or _reopens(finders, pos, close) else text[pos + len(KEY_OPEN) : close].strip()
    if not key or "<" in key or "\n" in key:
        return broken(text, start, pos, finders, SYNTAX, "An <arg_key> has no name or is not closed by </arg_key>.")
    if key in arguments:
        return broken(text, start, pos, finders, SYNTAX, f"The argument {key!r} is given twice.")
    pos = skip_space(text, close + len(KEY_CLOSE))
    if cut_marker(text, pos, VALUE_OPEN):
        return truncated(text, start, SYNTAX, f"The text ended before the <arg_value> of {key!r}.")
    if not text.startswith(VALUE_OPEN, pos):
        return broken(text, start, pos, finders, SYNTAX, f"<arg_key>{key}</arg_key> must be followed by <arg_value>.")
    close = finders.next(VALUE_CLOSE, pos)
    if close < 0:
        return truncated(text, start, SYNTAX, f"The text ended inside the <arg_value> of {key!r}.")
    raw = text[pos + len(VALUE_OPEN) : close]
    arguments[key] = Untyped(raw, typed_value(raw))
    return close + len(VALUE_CLOSE)


def _reopens(finders: Finders, pos: int, end: int) -> bool:
    """Another `<tool_call>` opens before `end`: a name or key reaching there is broken (and is not
    sliced, so a run of unclosed openers costs linear time)."""
    return 0 <= finders.next(CALL_OPEN, pos) < end


def _is_glm(template: str) -> bool:
    """GLM's `[gMASK]<sop>` prompt with `<arg_key>`/`<arg_value>` calls."""
    return "[gMASK]<sop>" in template and KEY_OPEN in template and VALUE_OPEN in template


def _is_glm4_5(template: str, vocab: frozenset[str]) -> bool:
    """GLM-4.5/4.6: no `clear_thinking` switch (GLM-4.7's)."""
    return _is_glm(template) and "clear_thinking" not in template


def _is_glm4_7(template: str, vocab: frozenset[str]) -> bool:
    """GLM-4.7: the `clear_thinking` switch and a generation prompt that opens `<think>`."""
    return _is_glm(template) and "clear_thinking" in template


GLM4_5 = register_chat_format(
    ChatFormat(
        name="glm4_5",
        description="GLM-4.5/4.6: <tool_call>NAME<arg_key>..<arg_value>.. calls, <think> first, no end token",
        parser=GLM45Parser,
        reasoning=THINK,
        prefills_reasoning=False,
        leading_reasoning_only=True,
        end_of_turn=_STOPS,
        turn_end="<|observation|>",
        turn_end_opens_next=True,
        keep_tokens=(CALL_OPEN, CALL_CLOSE, KEY_OPEN, KEY_CLOSE, VALUE_OPEN, VALUE_CLOSE, "<think>", "</think>"),
        drops_past_reasoning=True,
        history_rewriting=(
            "renders an empty <think></think> for assistant turns before the last user message; with "
            "thinking off appends /nothink to user messages and pre-fills <think></think>"
        ),
        control_markers=("<|system|>", "<|user|>", "<|assistant|>", "<|observation|>", "<tool_response>", "</tool_response>"),
        matches=_is_glm4_5,
    )
)

GLM4_7 = register_chat_format(
    ChatFormat(
        name="glm4_7",
        description="GLM-4.7: compact <tool_call>NAME<arg_key>..</arg_key><arg_value>.. calls (no newlines), "
        "<think> pre-filled, no end token",
        parser=GLM45Parser,
        reasoning=THINK,
        prefills_reasoning=True,
        leading_reasoning_only=True,
        end_of_turn=_STOPS,
        turn_end="<|observation|>",
        turn_end_opens_next=True,
        keep_tokens=GLM4_5.keep_tokens,
        drops_past_reasoning=True,
        history_rewriting=(
            "renders a bare </think> for assistant turns before the last user message (unless "
            "clear_thinking is false) and strips the reasoning and the answer"
        ),
        matches=_is_glm4_7,
    )
)
