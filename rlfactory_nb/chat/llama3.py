"""The Llama 3.1 / 3.2 tool-call format (family `llama3`): the whole assistant message is one JSON call,

    <|start_header_id|>assistant<|end_header_id|>

    {"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>

optionally after `<|python_tag|>` (a special token Llama 3.1 writes before calls in ipython mode,
then ending the turn with `<|eom_id|>`). There is no tag around the call and no reasoning, so the
parser is strict: a message is a call only when all of it (after `<|python_tag|>`) is a JSON object
with a "name" and "parameters" (or "arguments"). Any other text is an answer, also one that starts
with `{` (a JSON answer such as `{"city": "Paris"}`). A message that starts like a call
(`{"name": ...`) but is not valid JSON, text before `<|python_tag|>`, or a tagged message that is not
a call is a broken call, reported to the model. The templates take one call per turn (3.1's raises on
more), so a JSON list of calls is reported too, not run: Llama 3.x is not trained to write lists.

Reading is one `json.loads` of the message (linear, bounded by the message) after two anchored
checks; a tag or bracket inside a JSON string is data, since the string is read by the JSON parser.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlfactory_nb.chat.format import ChatFormat, register_chat_format
from rlfactory_nb.chat.parsers import (
    ParseResult,
    check_max_calls,
    describe_json_error,
    json_call,
    register_parser,
)
from rlfactory_nb.types import MalformedCall, ToolCall, ToolSpec

PYTHON_TAG = "<|python_tag|>"
FORMAT_HINT = (
    'To call a tool, write only {"name": "<tool name>", "parameters": {<arguments as a JSON object>}} '
    "as the whole message, one call per turn."
)
_CALL_START = re.compile(r'\[?+[ \t\r\n]*+\{[ \t\r\n]*+"name"[ \t\r\n]*+:')
"""how a bare call (or a list of them) opens: the text is then read as a call, broken or not"""


@register_parser("llama3")
@dataclass(frozen=True)
class Llama3Parser:
    """Reads a whole-message JSON call; see the module docstring."""

    max_calls: int = 8
    """kept for a uniform parser interface: a Llama turn holds one call at most"""
    starts_in_reasoning: bool = False
    """unused: Llama 3 has no reasoning blocks"""

    def __post_init__(self) -> None:
        check_max_calls(self.max_calls)

    def parse(self, text: str, tools: Sequence[ToolSpec] | None = None) -> ParseResult:
        message = text.strip()
        if message.startswith(PYTHON_TAG):
            read = _read(message[len(PYTHON_TAG) :], message, tagged=True)
        elif _CALL_START.match(message):
            read = _read(message, message, tagged=False)
        elif (tag := message.find(PYTHON_TAG)) >= 0:
            error = _error("Text comes before <|python_tag|>; a call must be the whole message.", message[tag:])
            return ParseResult(message[:tag].strip(), errors=[error], answer=message[:tag].strip())
        else:
            read = None
        if read is None:
            return ParseResult(message, answer=message)
        if isinstance(read, ToolCall):
            return ParseResult("", calls=[read])
        return ParseResult("", errors=[read])


def _read(body: str, raw: str, tagged: bool) -> ToolCall | MalformedCall | None:
    """The call `body` holds, a broken call, or None when the (untagged) text is not a call."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        return _error(_invalid(exc, body), raw)
    if isinstance(data, list) and data and all(map(_call_shaped, data)):
        return _error(f"The message holds a list of {len(data)} calls; make one call per turn.", raw)
    if not _call_shaped(data):
        return _error(f"{PYTHON_TAG} must be followed by a JSON call.", raw) if tagged else None
    key = "parameters" if "parameters" in data else "arguments"
    return json_call(data, key, raw, lambda message: _error(message, raw))


def _call_shaped(data: Any) -> bool:
    return isinstance(data, dict) and "name" in data and ("parameters" in data or "arguments" in data)


def _invalid(exc: BaseException, body: str) -> str:
    """Why the call is not JSON; a text that ends first was cut off by the token limit."""
    ended = isinstance(exc, json.JSONDecodeError) and (
        exc.pos >= len(body.rstrip()) or exc.msg.startswith("Unterminated string")
    )
    where = "The text ended inside the JSON call" if ended else "The call is not valid JSON"
    return f"{where} ({describe_json_error(exc)})."


def _error(message: str, raw: str) -> MalformedCall:
    return MalformedCall(f"{message} {FORMAT_HINT}", raw=raw)


def _is_llama3(template: str, vocab: frozenset[str]) -> bool:
    """Llama 3 header tokens with `{"name": ..., "parameters": ...}` calls (3.1, 3.2, 3.3)."""
    return "<|start_header_id|>" in template and "<|eot_id|>" in template and '"parameters"' in template


LLAMA3 = register_chat_format(
    ChatFormat(
        name="llama3",
        description='Llama 3.1/3.2/3.3: the whole message is {"name", "parameters"} JSON, one call per turn',
        parser=Llama3Parser,
        reasoning=None,
        prefills_reasoning=False,
        leading_reasoning_only=False,
        end_of_turn=("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"),
        turn_end="<|eot_id|>",
        keep_tokens=(PYTHON_TAG,),
        drops_past_reasoning=False,
        history_rewriting=(
            "renders a past call turn as canonical JSON ending in <|eot_id|>: a sampled <|eom_id|> "
            "becomes <|eot_id|> (expected) and a sampled <|python_tag|> is dropped (reported as drift)"
        ),
        control_markers=("<|start_header_id|>", "<|end_header_id|>"),
        matches=_is_llama3,
        rendered_as=(("<|eom_id|>", "<|eot_id|>"),),
    )
)
