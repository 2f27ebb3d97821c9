"""The XML tool-call format of Qwen3-Coder and Qwen3.5 / 3.6 / 3.8 (family `qwen3_xml`):

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

A block is read by its structure, not by searching for `</tool_call>`: each value runs to its own
`</parameter>`, so a value that contains `</tool_call>` or `<function=` (a file-writing tool asked to
document tool calls) is data. Only a value containing `\\n</parameter>` itself cannot be told apart.

Values carry no types: the templates write strings raw and other values as JSON (Qwen3.5 writes
numbers and booleans with Python's `str`, so `True`). A value that reads as a JSON object, array,
number, true/false/null, or Python's True/False becomes that value; anything else stays a string.
So a string parameter whose value is `42` arrives as the number 42 (typing values against the
tool's schema is left for later).

Reasoning is a `<think>` block at the start of the turn only (the templates write it first; the
generation prompt with thinking on pre-fills `<think>\\n`, so sampled text starts inside it). Calls
in it are drafts: not run, counted. A later `<think>` is text.

Every search starts where the previous one of its marker stopped (`_Finder`), so hostile text costs
linear time, and nothing here raises on model text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from rlfactory_nb.chat import reasoning
from rlfactory_nb.chat.format import ChatFormat, register_chat_format
from rlfactory_nb.chat.parsers import ParseResult, cap_calls, check_max_calls, register_parser
from rlfactory_nb.chat.qwen3 import THINK
from rlfactory_nb.types import MalformedCall, ToolCall

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
FUNCTION_OPEN, FUNCTION_CLOSE = "<function=", "</function>"
PARAMETER_OPEN, PARAMETER_CLOSE = "<parameter=", "</parameter>"
FORMAT_HINT = (
    "Write each call as <tool_call>\n<function=TOOL_NAME>\n<parameter=ARGUMENT_NAME>\nvalue\n</parameter>\n"
    "</function>\n</tool_call>"
)
_EMPTY_BLOCK = f"A <tool_call> block is empty: the next <tool_call> follows it. {FORMAT_HINT}"
_SPACE = re.compile(r"[ \t\r\n]*")


class _Finder:
    """The next occurrence of one marker at or after a position that only moves forward: each search
    covers text no earlier search covered, so all of them together cost one pass."""

    def __init__(self, text: str, marker: str):
        self.text, self.marker, self._at = text, marker, -2  # -2: not searched yet

    def next(self, pos: int) -> int:
        """Index of the first `marker` at or after `pos`, or -1."""
        if self._at == -1 or (self._at >= pos):
            return self._at
        self._at = self.text.find(self.marker, pos)
        return self._at


@dataclass(frozen=True)
class _Read:
    """One call block read from `text[start:end]`."""

    result: ToolCall | MalformedCall
    end: int


@register_parser("qwen3_xml")
@dataclass(frozen=True)
class Qwen3XMLParser:
    """Reads `<tool_call><function=...><parameter=...>` blocks; see the module docstring."""

    max_calls: int = 8
    """calls run per turn, and broken blocks answered one by one (as qwen3's parser)"""
    starts_in_reasoning: bool = False
    """the generation prompt pre-filled `<think>`: the text starts inside the think block"""

    def __post_init__(self) -> None:
        check_max_calls(self.max_calls)

    def parse(self, text: str) -> ParseResult:
        content: list[str] = []
        answer: list[str] = []
        calls: list[ToolCall] = []
        errors: list[MalformedCall] = []
        unreported = drafted = 0
        parts = reasoning.segments(text, THINK, self.starts_in_reasoning, leading_only=True)
        for part in parts:
            if part.in_reasoning:
                content.append(part.text)
                drafted += part.text.count(CALL_OPEN)
                continue
            for piece in _pieces(part.text):
                if isinstance(piece, str):
                    content.append(piece)
                    answer.append(piece)
                elif isinstance(piece, ToolCall):
                    calls.append(piece)
                elif len(errors) < self.max_calls:
                    errors.append(piece)
                else:
                    unreported += 1
        calls, errors = cap_calls(calls, errors, unreported, self.max_calls, CALL_OPEN, FORMAT_HINT)
        return ParseResult(
            content="".join(content).strip(),
            calls=calls,
            errors=errors,
            reasoning=reasoning.split(text, THINK, self.starts_in_reasoning, leading_only=True)[0],
            answer="".join(answer).strip(),
            calls_in_reasoning=drafted,
        )


def _pieces(text: str) -> list[str | ToolCall | MalformedCall]:
    """Plain text and read call blocks, in order."""
    finders = {marker: _Finder(text, marker) for marker in (CALL_OPEN, CALL_CLOSE, PARAMETER_CLOSE)}
    pieces: list[str | ToolCall | MalformedCall] = []
    pos = 0
    while (start := finders[CALL_OPEN].next(pos)) >= 0:
        pieces.append(text[pos:start])
        read = _read_block(text, start, finders)
        pieces.append(read.result)
        pos = read.end
    pieces.append(text[pos:])
    return pieces


def _read_block(text: str, start: int, finders: dict[str, _Finder]) -> _Read:
    """The call block opening at `start`: its structure, read left to right."""
    pos = _skip_space(text, start + len(CALL_OPEN))
    if text.startswith(CALL_OPEN, pos):  # cheap: a run of openers is the commonest hostile text
        return _Read(MalformedCall(_EMPTY_BLOCK, raw=text[start:pos]), pos)
    if _cut_marker(text, pos, FUNCTION_OPEN):
        return _truncated(text, start, "The text ended inside a <tool_call> block before <function=...>.")
    if not text.startswith(FUNCTION_OPEN, pos):
        return _broken(text, start, pos, finders, "A <tool_call> block must start with <function=TOOL_NAME>.")
    name, pos = _tag_value(text, pos + len(FUNCTION_OPEN))
    if name is None and pos >= len(text):
        return _truncated(text, start, "The text ended inside the <function=...> tag.")
    if name is None:
        return _broken(text, start, pos, finders, "The <function=...> tag is not closed with '>' on its line.")
    if not name:
        return _broken(text, start, pos, finders, "The <function=...> tag has no tool name.")
    arguments: dict[str, Any] = {}
    while True:
        pos = _skip_space(text, pos)
        if text.startswith(PARAMETER_OPEN, pos):
            key, pos = _tag_value(text, pos + len(PARAMETER_OPEN))
            if key is None and pos >= len(text):
                return _truncated(text, start, "The text ended inside a <parameter=...> tag.")
            if not key:
                return _broken(text, start, pos, finders, "A <parameter=...> tag has no name or no closing '>'.")
            if key in arguments:
                return _broken(text, start, pos, finders, f"The parameter {key!r} is given twice.")
            close = finders[PARAMETER_CLOSE].next(pos)
            if close < 0:
                return _truncated(text, start, f"The text ended inside <parameter={key}>.")
            arguments[key] = _value(text[pos:close])
            pos = close + len(PARAMETER_CLOSE)
        elif text.startswith(FUNCTION_CLOSE, pos):
            return _closing(text, start, _skip_space(text, pos + len(FUNCTION_CLOSE)), name, arguments, finders)
        elif _cut_marker(text, pos, PARAMETER_OPEN, FUNCTION_CLOSE):
            return _truncated(text, start, f"The text ended inside <function={name}> before </function>.")
        else:
            return _broken(text, start, pos, finders, f"Unexpected text inside <function={name}>; expected "
                           "<parameter=NAME> or </function>.")


def _closing(
    text: str, start: int, pos: int, name: str, arguments: dict[str, Any], finders: dict[str, _Finder]
) -> _Read:
    """After `</function>`: the block's `</tool_call>`, or the end of the text (a closing tag cut
    off by the token limit after a complete call loses nothing, as in qwen3's parser)."""
    if text.startswith(CALL_CLOSE, pos):
        end = pos + len(CALL_CLOSE)
        return _Read(ToolCall(name=name, arguments=arguments, raw=text[start:end]), end)
    if _cut_marker(text, pos, CALL_CLOSE):
        return _Read(ToolCall(name=name, arguments=arguments, raw=text[start:]), len(text))
    return _broken(text, start, pos, finders, "Expected </tool_call> after </function>.")


def _broken(text: str, start: int, pos: int, finders: dict[str, _Finder], message: str) -> _Read:
    """A block that cannot be read from `pos` on: it runs to the next `</tool_call>` or, if another
    `<tool_call>` comes first, up to that one (which is read on its own)."""
    close, reopen = finders[CALL_CLOSE].next(pos), finders[CALL_OPEN].next(pos)
    if close >= 0 and (reopen < 0 or close < reopen):
        end = close + len(CALL_CLOSE)
    else:
        end = reopen if reopen >= 0 else len(text)
    return _Read(MalformedCall(f"{message} {FORMAT_HINT}", raw=text[start:end]), end)


def _truncated(text: str, start: int, message: str) -> _Read:
    return _Read(MalformedCall(f"{message} {FORMAT_HINT}", raw=text[start:]), len(text))


def _cut_marker(text: str, pos: int, *markers: str) -> bool:
    """The text ends at `pos` or partway through one of `markers` (the token limit cut it there)."""
    rest = text[pos : pos + max(map(len, markers)) + 1]
    return any(marker.startswith(rest) for marker in markers)


def _tag_value(text: str, pos: int) -> tuple[str | None, int]:
    """The `NAME` of `<function=NAME>` or `<parameter=NAME>` (stripped) and the position after its
    `>` and one newline; (None, position) when no `>` closes it on its line, the position being the
    text's end when the text ends first."""
    close = text.find(">", pos)
    line_end = text.find("\n", pos, len(text) if close < 0 else close)
    if line_end >= 0:
        return None, line_end
    if close < 0:
        return None, len(text)
    after = close + 1
    if text.startswith("\n", after):
        after += 1
    return text[pos:close].strip(), after


def _skip_space(text: str, pos: int) -> int:
    return _SPACE.match(text, pos).end()


def _value(raw: str) -> Any:
    """A parameter's value: the text between the tags less the template's newline on each side, as a
    JSON value when it reads as one (see the module docstring), else the string."""
    raw = raw.removeprefix("\n")
    raw = raw.removesuffix("\n")
    literal = raw.strip()
    if literal in ("True", "False"):
        return literal == "True"
    if literal[:1] in '{["-0123456789' or literal in ("true", "false", "null"):
        try:
            return json.loads(literal)
        except (ValueError, RecursionError):
            return raw
    return raw


def _is_qwen3_xml(template: str, vocab: frozenset[str]) -> bool:
    """ChatML turns whose calls are `<function=NAME>` with `<parameter=KEY>` children."""
    return "<|im_start|>" in template and FUNCTION_OPEN in template and PARAMETER_OPEN in template


QWEN3_XML = register_chat_format(
    ChatFormat(
        name="qwen3_xml",
        description="Qwen3-Coder and Qwen3.5/3.6/3.8: XML <function=...> calls, <think> pre-filled",
        parser=Qwen3XMLParser,
        reasoning=THINK,
        prefills_reasoning=True,
        leading_reasoning_only=True,
        end_of_turn=("<|im_end|>", "<|endoftext|>"),
        turn_end="<|im_end|>",
        keep_tokens=(),
        drops_past_reasoning=True,
        history_rewriting=(
            "drops the think block of assistant turns before the last user query (Qwen3.6's "
            "preserve_thinking keeps them); with thinking off each generation prompt pre-fills an empty "
            "<think>\\n\\n</think>\\n\\n"
        ),
        matches=_is_qwen3_xml,
    )
)
