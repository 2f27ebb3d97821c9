"""The Hermes / Qwen3 tool-call format:

    <tool_call>
    {"name": "calculator", "arguments": {"expression": "12*3"}}
    </tool_call>

This is what the Qwen3 chat template teaches (its `<tool_call>` tags are single tokens, ids 151657 and
151658). The parser is lenient where leniency loses nothing (whitespace, arguments sent as a JSON
string, a closing tag cut off by the token limit after complete JSON) and strict where guessing would
reward a sloppy format (missing name, arguments that are not an object, unclosed blocks mid-text).
A block ends at the first `</tool_call>` outside a JSON string: an argument value that holds the tag
(a tool asked to write docs about tool calls) is data, not the end of the call.

Calls inside `<think>...</think>` are reasoning about a call, not a call, so they are left in the text,
counted in `calls_in_reasoning` and not run unless `calls_in_think=True`. A `</think>` with no opening
tag closes a think block that began in the prompt (templates that pre-fill `<think>\\n`); an unclosed
`<think>` runs to the end (chat/reasoning.py).

The module also registers the `qwen3` family (Qwen3, Qwen3-2507): its ChatFormat record. Qwen2.5
writes the same calls without reasoning (chat/qwen2_5.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from rlfactory_nb.chat import reasoning
from rlfactory_nb.chat.format import ChatFormat, register_chat_format
from rlfactory_nb.chat.parsers import (
    ParseResult,
    cap_calls,
    check_max_calls,
    describe_json_error,
    json_call,
    json_type,
    register_parser,
)
from rlfactory_nb.types import MalformedCall, ToolCall, ToolSpec

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
THINK = reasoning.ReasoningMarkers(THINK_OPEN, THINK_CLOSE)
FORMAT_HINT = (
    'Write each call as <tool_call>\n{"name": "<tool name>", "arguments": {<arguments as a JSON object>}}'
    "\n</tool_call>"
)

Ending = Literal["closed", "next_open", "truncated"]

_BODY = re.compile(r'(?:[^"<]++|<(?!/?tool_call>)|"[^"\\\n]*+(?:\\.[^"\\\n]*+)*+"?)*+')
"""A block's body: everything up to the first `<tool_call>` or `</tool_call>` outside a JSON
string, so an argument value holding a tag is data. A string runs to its unescaped quote or to a
raw newline (which JSON forbids in a string: the block is broken anyway, and a tag on a later line
is then a real one). Possessive quantifiers never backtrack: one left-to-right pass."""
_OPENER_RUN = re.compile(r"(?:<tool_call>[ \t\r\n]*+)*(?=<tool_call>)")
"""openers with nothing but space between them, up to the last one (which may open a real block)"""


@dataclass(frozen=True)
class _Block:
    raw: str
    """the block as written, tags included"""
    body: str
    """the text between the tags"""
    ending: Ending
    """closed by </tool_call>, cut by the next <tool_call>, or cut by the end of the text"""


@register_parser("hermes")
@register_parser("qwen3")
@dataclass(frozen=True)
class Qwen3Parser:
    """Reads `<tool_call>{json}</tool_call>` blocks; see the module docstring."""

    markers: ClassVar[reasoning.ReasoningMarkers | None] = THINK
    """the family's reasoning markers (a family without reasoning subclasses with None)"""
    max_calls: int = 8
    """calls run per turn, and broken blocks answered one by one; further calls are dropped and
    reported to the model as one error, further broken blocks are counted in one error"""
    calls_in_think: bool = False
    """run calls written inside <think>...</think> (off: they are reasoning, left in the text)"""
    starts_in_reasoning: bool = False
    """the generation prompt pre-filled `<think>`: the text starts inside a think block"""

    def __post_init__(self) -> None:
        check_max_calls(self.max_calls)

    def parse(self, text: str, tools: Sequence[ToolSpec] | None = None) -> ParseResult:
        content: list[str] = []
        answer: list[str] = []
        calls: list[ToolCall] = []
        errors: list[MalformedCall] = []
        unreported = 0  # broken blocks past the first max_calls: each would be a message to the model
        parts = reasoning.segments(text, self.markers, self.starts_in_reasoning)
        drafted = 0 if self.calls_in_think else sum(p.text.count(CALL_OPEN) for p in parts if p.in_reasoning)
        for part in parts:
            active = self.calls_in_think or not part.in_reasoning
            for piece in _split_blocks(part.text) if active else [part.text]:
                if isinstance(piece, str):
                    content.append(piece)
                    if not part.in_reasoning:
                        answer.append(piece)
                    continue
                read = _read_block(piece)
                if isinstance(read, ToolCall):
                    calls.append(read)
                elif len(errors) < self.max_calls:
                    errors.append(read)
                else:
                    unreported += 1
        calls, errors = cap_calls(calls, errors, unreported, self.max_calls, CALL_OPEN, FORMAT_HINT)
        return ParseResult(
            content="".join(content).strip(),
            calls=calls,
            errors=errors,
            reasoning=reasoning.split(text, self.markers, self.starts_in_reasoning)[0],
            answer="".join(answer).strip(),
            calls_in_reasoning=drafted,
        )


def _split_blocks(text: str) -> list[str | _Block]:
    """Plain text and call blocks, in order, in one pass: each block's body is read once by
    `_BODY` and the next opening tag is searched from where the block ended, so hostile text
    (`"<tool_call>" * 40000`, an unterminated string) costs linear time, not quadratic."""
    pieces: list[str | _Block] = []
    pos = 0
    while (start := text.find(CALL_OPEN, pos)) >= 0:
        pieces.append(text[pos:start])
        run_end = _OPENER_RUN.match(text, start).end()
        if run_end > start:  # back-to-back openers: one broken block, not one object per opener
            pieces.append(_Block(text[start:run_end], text[start + len(CALL_OPEN) : run_end], "next_open"))
            start = run_end
        body_start = start + len(CALL_OPEN)
        body_end = _BODY.match(text, body_start).end()
        if text.startswith(CALL_CLOSE, body_end):
            pos = body_end + len(CALL_CLOSE)
            pieces.append(_Block(text[start:pos], text[body_start:body_end], "closed"))
        else:
            pos = body_end
            ending: Ending = "next_open" if body_end < len(text) else "truncated"
            pieces.append(_Block(text[start:pos], text[body_start:pos], ending))
    pieces.append(text[pos:])
    return pieces


def _read_block(block: _Block) -> ToolCall | MalformedCall:
    def error(message: str) -> MalformedCall:
        return MalformedCall(f"{message} {FORMAT_HINT}", raw=block.raw)

    if block.ending == "next_open":
        return error("A <tool_call> block is missing its </tool_call> before the next <tool_call>.")
    body = block.body.strip()
    if not body:
        return error("The <tool_call> block is empty.")
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        if block.ending == "truncated":
            return error(
                f"The text ended inside a <tool_call> block with incomplete JSON ({describe_json_error(exc)})."
            )
        return error(f"The <tool_call> block is not valid JSON ({describe_json_error(exc)}).")
    return _to_call(data, block.raw, error)


def _to_call(data: Any, raw: str, error: Callable[[str], MalformedCall]) -> ToolCall | MalformedCall:
    if isinstance(data, list):
        return error("The <tool_call> block holds a JSON array; write one block per call.")
    if not isinstance(data, dict):
        return error(f"The <tool_call> block must hold a JSON object, got a {json_type(data)}.")
    return json_call(data, "arguments", raw, error)


def is_hermes_chatml(template: str) -> bool:
    """ChatML turns with Hermes JSON calls (`{"name": ..., "arguments": ...}` inside `<tool_call>`),
    not the XML form of qwen3_xml: Qwen3's and Qwen2.5's templates."""
    return "<|im_start|>" in template and CALL_OPEN in template and "<function=" not in template


def _is_qwen3(template: str, vocab: frozenset[str]) -> bool:
    """Hermes ChatML with think blocks (Qwen2.5's template has none)."""
    return is_hermes_chatml(template) and THINK_OPEN in template


QWEN3 = register_chat_format(
    ChatFormat(
        name="qwen3",
        description="Qwen3 and Qwen3-2507: Hermes JSON in <tool_call>, <think> reasoning",
        parser=Qwen3Parser,
        reasoning=THINK,
        prefills_reasoning=False,
        leading_reasoning_only=False,
        end_of_turn=("<|im_end|>", "<|endoftext|>"),
        turn_end="<|im_end|>",
        keep_tokens=(),
        drops_past_reasoning=True,
        history_rewriting=(
            "drops the think block of assistant turns before the last user query; in non-thinking mode "
            "each generation prompt pre-fills an empty <think>\\n\\n</think>\\n\\n that a full render drops"
        ),
        control_markers=("<tool_response>", "</tool_response>", "<|im_start|>"),
        matches=_is_qwen3,
    )
)
