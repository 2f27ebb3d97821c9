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

Blocks are read with chat/blocks.py: every search starts where the previous one of its marker
stopped, so hostile text costs linear time, and nothing here raises on model text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlfactory_nb.chat.blocks import (
    Finders,
    Read,
    Syntax,
    assemble,
    broken,
    cut_marker,
    skip_space,
    truncated,
    typed_value,
)
from rlfactory_nb.chat.format import ChatFormat, register_chat_format
from rlfactory_nb.chat.parsers import ParseResult, check_max_calls, register_parser
from rlfactory_nb.chat.qwen3 import THINK
from rlfactory_nb.chat.schema import Untyped, resolve
from rlfactory_nb.types import MalformedCall, ToolCall, ToolSpec

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
FUNCTION_OPEN, FUNCTION_CLOSE = "<function=", "</function>"
PARAMETER_OPEN, PARAMETER_CLOSE = "<parameter=", "</parameter>"
FORMAT_HINT = (
    "Write each call as <tool_call>\n<function=TOOL_NAME>\n<parameter=ARGUMENT_NAME>\nvalue\n</parameter>\n"
    "</function>\n</tool_call>"
)
_NEXT_PARAMETER, _FUNCTION_LINE = "\n" + PARAMETER_OPEN, "\n" + FUNCTION_CLOSE
_EMPTY_BLOCK = f"A <tool_call> block is empty: the next <tool_call> follows it. {FORMAT_HINT}"
SYNTAX = Syntax(CALL_OPEN, CALL_CLOSE, FORMAT_HINT)


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

    def parse(self, text: str, tools: Sequence[ToolSpec] | None = None) -> ParseResult:
        result = assemble(text, split_pieces, CALL_OPEN, FORMAT_HINT, THINK, self.starts_in_reasoning, self.max_calls)
        return resolve(result, tools)


def _read_block(text: str, start: int, finders: Finders) -> Read:
    """The call block opening at `start`: its structure, read left to right."""
    pos = skip_space(text, start + len(CALL_OPEN))
    if text.startswith(CALL_OPEN, pos):  # cheap: a run of openers is the commonest hostile text
        return Read(MalformedCall(_EMPTY_BLOCK, raw=text[start:pos]), pos)
    if cut_marker(text, pos, FUNCTION_OPEN):
        return truncated(text, start, SYNTAX, "The text ended inside a <tool_call> block before <function=...>.")
    if not text.startswith(FUNCTION_OPEN, pos):
        return broken(text, start, pos, finders, SYNTAX, "A <tool_call> block must start with <function=TOOL_NAME>.")
    return _read_function(text, start, pos, finders, wrapped=True)


def _read_function(text: str, start: int, pos: int, finders: Finders, wrapped: bool) -> Read:
    """The `<function=NAME>` at `pos` and its parameters; `wrapped`: inside a `<tool_call>` block
    whose `</tool_call>` must follow (Qwen3-Coder also writes the function bare)."""
    name, pos = _tag_value(text, pos + len(FUNCTION_OPEN))
    if name is None and pos >= len(text):
        return truncated(text, start, SYNTAX, "The text ended inside the <function=...> tag.")
    if name is None:
        return broken(text, start, pos, finders, SYNTAX, "The <function=...> tag is not closed with '>' on its line.")
    if not name:
        return broken(text, start, pos, finders, SYNTAX, "The <function=...> tag has no tool name.")
    arguments: dict[str, Any] = {}
    while True:
        pos = skip_space(text, pos)
        if text.startswith(PARAMETER_OPEN, pos):
            key, pos = _tag_value(text, pos + len(PARAMETER_OPEN))
            if key is None and pos >= len(text):
                return truncated(text, start, SYNTAX, "The text ended inside a <parameter=...> tag.")
            if not key:
                return broken(text, start, pos, finders, SYNTAX, "A <parameter=...> tag has no name or no closing '>'.")
            if key in arguments:
                return broken(text, start, pos, finders, SYNTAX, f"The parameter {key!r} is given twice.")
            close, after = _value_end(finders, pos)
            if close < 0:
                return truncated(text, start, SYNTAX, f"The text ended inside <parameter={key}>.")
            arguments[key] = _value(text[pos:close])
            pos = after
        elif text.startswith(FUNCTION_CLOSE, pos):
            after = skip_space(text, pos + len(FUNCTION_CLOSE))
            if not wrapped:
                return Read(ToolCall(name=name, arguments=arguments, raw=text[start:after]), after)
            return _closing(text, start, after, name, arguments, finders)
        elif cut_marker(text, pos, PARAMETER_OPEN, FUNCTION_CLOSE):
            return truncated(text, start, SYNTAX, f"The text ended inside <function={name}> before </function>.")
        else:
            return broken(text, start, pos, finders, SYNTAX, f"Unexpected text inside <function={name}>; expected "
                           "<parameter=NAME> or </function>.")


def _value_end(finders: Finders, pos: int) -> tuple[int, int]:
    """(end of the value starting at `pos`, where reading goes on): its `</parameter>`, or, for a
    parameter left unclosed (vLLM and SGLang read these), the line where the next `<parameter=` or
    `</function>` starts. (-1, -1): the text ends inside the value."""
    close = finders.next(PARAMETER_CLOSE, pos)
    ends = [at for marker in (_NEXT_PARAMETER, _FUNCTION_LINE) if (at := finders.next(marker, pos)) >= 0]
    unclosed = min(ends) if ends else -1
    if close >= 0 and (unclosed < 0 or close <= unclosed):
        return close, close + len(PARAMETER_CLOSE)
    if unclosed >= 0:
        return unclosed, unclosed + 1
    return -1, -1


def _closing(text: str, start: int, pos: int, name: str, arguments: dict[str, Any], finders: Finders) -> Read:
    """After `</function>`: the block's `</tool_call>`, or the end of the text (a closing tag cut
    off by the token limit after a complete call loses nothing, as in qwen3's parser)."""
    if text.startswith(CALL_CLOSE, pos):
        end = pos + len(CALL_CLOSE)
        return Read(ToolCall(name=name, arguments=arguments, raw=text[start:end]), end)
    if cut_marker(text, pos, CALL_CLOSE):
        return Read(ToolCall(name=name, arguments=arguments, raw=text[start:]), len(text))
    return broken(text, start, pos, finders, SYNTAX, "Expected </tool_call> after </function>.")


def split_pieces(text: str) -> list:
    """Plain text and read call blocks, in order: `<tool_call>` blocks, and bare `<function=...>`
    blocks that read as a whole call (one that does not, cut or broken, is text: never run)."""
    finders = Finders(text)
    pieces: list = []
    pos = written = 0
    while True:
        wrapped, bare = finders.next(CALL_OPEN, pos), finders.next(FUNCTION_OPEN, pos)
        if wrapped < 0 and bare < 0:
            break
        if wrapped >= 0 and (bare < 0 or wrapped < bare):
            block = _read_block(text, wrapped, finders)
            pieces += [text[written:wrapped], block.result]
            pos = written = block.end
            continue
        block = _read_function(text, bare, bare, finders, wrapped=False)
        if isinstance(block.result, ToolCall):
            pieces += [text[written:bare], block.result]
            pos = written = block.end
        else:
            pos = bare + len(FUNCTION_OPEN)
    pieces.append(text[written:])
    return pieces


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


def _value(raw: str) -> Untyped:
    """A parameter's value: the text between the tags less the template's newline on each side,
    typed by the tool's schema, or without one read as a JSON value when it reads as one (see the
    module docstring), else the string."""
    text = raw.removeprefix("\n").removesuffix("\n")
    return Untyped(text, typed_value(text))


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
        control_markers=("<tool_response>", "</tool_response>", "<|im_start|>"),
        matches=_is_qwen3_xml,
    )
)
