"""The Mistral tool-call format (family `mistral`): calls follow a `[TOOL_CALLS]` token.

Tokenizer v13 and later (the v15 reference template) write one marker per call, with no call id:

    Let me check.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{}</s>

Older models wrote other shapes after the same marker, and the parser reads them too: v11 puts a
call id before the arguments (`[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{...}`), and v3-v7
(Mistral-Small-3.1) a JSON list (`[TOOL_CALLS] [{"name": ..., "arguments": {...}, "id": ...}]`).
`[TOOL_CALLS]`, `[ARGS]`, `[CALL_ID]`, `[THINK]` and `[/THINK]` are special tokens, so decoding keeps
them (the record's keep_tokens).

Nothing closes a call: the arguments end where their JSON value ends. The parser finds that end by
counting brackets outside JSON strings, then decodes the value alone, so a `[TOOL_CALLS]` inside an
argument string is data and text after the value is content. Each block is read left to right and
the next marker is searched from where the block ended, so hostile text costs linear time; nothing
here raises on model text.

Magistral reasons in a `[THINK]...[/THINK]` block at the start of the turn, inline in the content
(the template renders the content as sampled, so history keeps it). A later `[THINK]` is text; calls
inside the block are drafts: not run, counted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlfactory_nb.chat import messages, reasoning
from rlfactory_nb.chat.format import ChatFormat, register_chat_format
from rlfactory_nb.chat.parsers import ParseResult, cap_calls, check_max_calls, json_type, register_parser
from rlfactory_nb.types import MalformedCall, Message, ToolCall, ToolSpec

CALLS, ARGS, CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"
THINK = reasoning.ReasoningMarkers("[THINK]", "[/THINK]")
FORMAT_HINT = 'Write each call as [TOOL_CALLS]TOOL_NAME[ARGS]{"argument": "value"} (arguments as a JSON object).'
_NAME = re.compile(r"[\w.\-]*")
"""a tool name (or a v11 call id): letters, digits, `_`, `.`, `-`; it ends at the `[` of `[ARGS]`"""
_SPACE = re.compile(r"\s*")
_MARKER_RUN = re.compile(r"(?:\[TOOL_CALLS\]\s*+)++")
_JSON_TOKEN = re.compile(r'"(?:[^"\\\n]++|\\.)*+"?|[^"{}\[\]]++|.', re.DOTALL)
"""a JSON string (to its quote or a raw newline), a run of other text, or one bracket"""

_LIST = re.compile(r"\[\s*[{\]]")
"""the start of the v3-v7 JSON list (`[` then `{` or `]`), not a `[` of a special token"""


@dataclass(frozen=True)
class _Read:
    """What one block yields (its calls, or one error) and the position after it."""

    results: list[ToolCall | MalformedCall]
    end: int


@register_parser("mistral")
@dataclass(frozen=True)
class MistralParser:
    """Reads `[TOOL_CALLS]NAME[ARGS]{json}` calls and the older shapes; see the module docstring."""

    max_calls: int = 8
    """calls run per turn, and broken blocks answered one by one (as qwen3's parser)"""
    starts_in_reasoning: bool = False
    """the prompt pre-filled `[THINK]` (no Mistral template does; kept for the parser contract)"""

    def __post_init__(self) -> None:
        check_max_calls(self.max_calls)

    def parse(self, text: str, tools: Sequence[ToolSpec] | None = None) -> ParseResult:
        content: list[str] = []
        answer: list[str] = []
        calls: list[ToolCall] = []
        errors: list[MalformedCall] = []
        unreported = drafted = 0
        for part in reasoning.segments(text, THINK, self.starts_in_reasoning, leading_only=True):
            if part.in_reasoning:
                content.append(part.text)
                drafted += part.text.count(CALLS)
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
        calls, errors = cap_calls(calls, errors, unreported, self.max_calls, CALLS, FORMAT_HINT)
        return ParseResult(
            content="".join(content).strip(),
            calls=calls,
            errors=errors,
            reasoning=reasoning.split(text, THINK, self.starts_in_reasoning, leading_only=True)[0],
            answer="".join(answer).strip(),
            calls_in_reasoning=drafted,
        )


def _pieces(text: str) -> list[str | ToolCall | MalformedCall]:
    """Plain text and read call blocks, in order; each search starts where the last block ended."""
    pieces: list[str | ToolCall | MalformedCall] = []
    pos = 0
    while (start := text.find(CALLS, pos)) >= 0:
        pieces.append(text[pos:start])
        last = text.rfind(CALLS, start, _MARKER_RUN.match(text, start).end())
        if last > start:  # one error for a run of bare markers: 10 MB of them is one regex match
            empty = text[start:last]
            pieces.append(MalformedCall(f"{empty.count(CALLS)} {CALLS} with no call after it. {FORMAT_HINT}", empty))
        read = _read_block(text, last)
        pieces.extend(read.results)
        pos = read.end
    pieces.append(text[pos:])
    return pieces


def _read_block(text: str, start: int) -> _Read:
    """The block at `start`: `NAME[ARGS]{...}`, `NAME[CALL_ID]ID[ARGS]{...}`, or a JSON list."""
    pos = _skip_space(text, start + len(CALLS))
    if text.startswith("{", pos) or _LIST.match(text, pos):
        return _read_json_calls(text, start, pos)
    name_end = _NAME.match(text, pos).end()
    name = text[pos:name_end]
    pos = _skip_space(text, name_end)
    if text.startswith(CALL_ID, pos):
        pos = _skip_space(text, _NAME.match(text, pos + len(CALL_ID)).end())
    rest = text[pos : pos + len(CALL_ID) + 1]  # enough to tell a marker cut off by the end of the text
    if any(marker.startswith(rest) for marker in (ARGS, CALL_ID)):
        return _error(text, start, len(text), f"The text ended after {CALLS} before {ARGS}.")
    if not name:
        return _broken(text, start, pos, f"{CALLS} must be followed by the tool name.")
    if not text.startswith(ARGS, pos):
        return _broken(text, start, pos, f"Expected {ARGS} after the tool name {name!r}.")
    value = _json_value(text, start, _skip_space(text, pos + len(ARGS)), f"the {ARGS} of {name!r}")
    if isinstance(value, _Read):
        return value
    arguments, end = value
    if not isinstance(arguments, dict):
        return _error(text, start, end, f"The {ARGS} of {name!r} must be a JSON object, got a JSON {json_type(arguments)}.")
    return _Read([ToolCall(name=name, arguments=arguments, raw=text[start:end])], end)


def _read_json_calls(text: str, start: int, pos: int) -> _Read:
    """The v3-v7 shape: a JSON list of `{"name", "arguments", "id"}` objects (or one such object)."""
    value = _json_value(text, start, pos, f"the JSON after {CALLS}")
    if isinstance(value, _Read):
        return value
    data, end = value
    items = data if isinstance(data, list) else [data]
    if not items:
        return _error(text, start, end, f"The JSON list after {CALLS} is empty.")
    raw = text[start:end]
    return _Read([_list_call(item, raw) for item in items], end)


def _list_call(item: Any, raw: str) -> ToolCall | MalformedCall:
    def error(message: str) -> MalformedCall:
        return MalformedCall(f"{message} {FORMAT_HINT}", raw=raw)

    if not isinstance(item, dict):
        return error(f"Each call in the JSON list must be an object, got a JSON {json_type(item)}.")
    name, arguments = item.get("name"), item.get("arguments", {})
    if not isinstance(name, str) or not name.strip():
        return error(f'"name" must be a non-empty string, got a JSON {json_type(name)}.')
    if isinstance(arguments, str):  # some servers send arguments as a JSON string
        try:
            arguments = json.loads(arguments or "{}")
        except (ValueError, RecursionError):
            return error(f'The "arguments" of {name!r} are a string that is not valid JSON.')
    if not isinstance(arguments, dict):
        return error(f'The "arguments" of {name!r} must be a JSON object, got a JSON {json_type(arguments)}.')
    return ToolCall(name=name.strip(), arguments=arguments, raw=raw)


def _json_value(text: str, start: int, pos: int, what: str) -> tuple[Any, int] | _Read:
    """(the JSON object or array at `pos`, the position after it), or the block's error. The value
    is cut out by `_json_end` and decoded alone, so a decoding error costs the value's length (a
    decoder's error on the whole text counts its lines from the start: quadratic over many blocks)."""
    if not text.startswith(("{", "["), pos):
        if pos == len(text):
            return _error(text, start, pos, f"The text ended before {what}.")
        return _broken(text, start, pos, f"Expected a JSON object as {what}.")
    end = _json_end(text, pos)
    if end < 0:
        return _error(text, start, len(text), f"The text ended inside {what} (incomplete JSON).")
    try:
        return json.loads(text[pos:end]), end
    except RecursionError:
        return _error(text, start, end, f"Could not read {what}: nested too deeply.")
    except json.JSONDecodeError as exc:
        return _error(text, start, end, f"Could not read {what}: {exc.msg} at column {exc.colno}.")


def _json_end(text: str, pos: int) -> int:
    """The end of the JSON object or array opening at `pos` (after the bracket that closes it,
    brackets inside strings not counted), or -1 when the text ends first. A string ends at its
    unescaped quote or at a raw newline (JSON forbids one in a string: the value is broken anyway).
    A broken value's block runs to that end, so every character is scanned once."""
    depth = 0
    for token in _JSON_TOKEN.finditer(text, pos):
        char = text[token.start()]
        if char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return token.end()
    return -1


def _broken(text: str, start: int, pos: int, message: str) -> _Read:
    """A block that cannot be read from `pos` on: it runs up to the next `[TOOL_CALLS]`, read on its own."""
    end = text.find(CALLS, pos)
    return _error(text, start, len(text) if end < 0 else end, message)


def _error(text: str, start: int, end: int, message: str) -> _Read:
    return _Read([MalformedCall(f"{message} {FORMAT_HINT}", raw=text[start:end])], end)


def _skip_space(text: str, pos: int) -> int:
    return _SPACE.match(text, pos).end()


def _assistant_message(text: str, calls: list[ToolCall], reasoning: str = "") -> Message:
    """The default message with a 9-character id on each call, matching `named_tool_message`'s
    `tool_call_id`: the v3-v11 templates refuse a call without one (v15 renders no ids)."""
    message = messages.assistant_message(text, calls, reasoning)
    for index, call in enumerate(message.get("tool_calls", [])):
        call["id"] = messages.call_id(index)
    return message


def _is_mistral(template: str, vocab: frozenset[str]) -> bool:
    """`[INST]` turns with `[TOOL_CALLS]` calls (every Mistral tokenizer version since v3)."""
    return "[INST]" in template and CALLS in template


MISTRAL = register_chat_format(
    ChatFormat(
        name="mistral",
        description="Mistral and Magistral: [TOOL_CALLS]NAME[ARGS]{json} (and the v3-v11 shapes), [THINK] reasoning",
        parser=MistralParser,
        reasoning=THINK,
        prefills_reasoning=False,
        leading_reasoning_only=True,
        end_of_turn=("</s>",),
        turn_end="</s>",
        keep_tokens=(CALLS, ARGS, CALL_ID, THINK.open, THINK.close),
        drops_past_reasoning=False,
        history_rewriting=(
            "none in a rollout: content (with any [THINK] block) is rendered as sampled and calls as "
            "NAME[ARGS] + the arguments' JSON; consecutive messages of one role are merged"
        ),
        control_markers=("[INST]", "[/INST]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]"),
        matches=_is_mistral,
        assistant_message=_assistant_message,
        tool_message=messages.named_tool_message,
    )
)
