"""The DeepSeek tool-call format (family `deepseek_v3`: DeepSeek-V3, R1 and V3.1):

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
    ```json
    {"city": "Paris"}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>

V3 and R1 write a call as `TYPE<｜tool▁sep｜>NAME` and fenced JSON; V3.1 drops the type and the
fence: `<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜>`. One
parser reads both: JSON right after `<｜tool▁sep｜>` is V3.1's shape, a name line is V3's. Note the
full-width bar (U+FF5C) and the lower block (U+2581) in every marker.

A call is read by its structure, left to right: the arguments are decoded as one JSON value where
they start (json's `raw_decode`), so a value that contains `<｜tool▁call▁end｜>` is data, and a call
stands only once its `<｜tool▁call▁end｜>` is read (a turn cut off by the token limit never runs a
partial call; a missing `<｜tool▁calls▁end｜>` at the very end loses nothing).

Reasoning is a `<think>` block at the start of the turn. R1's generation prompt pre-fills
`<think>\\n` and V3.1's does with `thinking` on, so sampled text starts inside it. Calls in it are
drafts: counted, not run. Every search moves forward only, so hostile text costs linear time.

The module also registers the family's record; `assistant_message` writes history the way R1 and
V3.1 read it (arguments as the JSON text the model wrote, R1's pre-filled `<think>\\n` restored).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rlfactory_nb.chat import reasoning
from rlfactory_nb.chat.format import ChatFormat, register_chat_format
from rlfactory_nb.chat.parsers import ParseResult, cap_calls, check_max_calls, register_parser
from rlfactory_nb.chat.qwen3 import THINK, THINK_OPEN
from rlfactory_nb.chat.qwen3_xml import _Finder
from rlfactory_nb.types import MalformedCall, Message, ToolCall

SECTION_OPEN, SECTION_CLOSE = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_OPEN, CALL_CLOSE, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
END_OF_SENTENCE = "<｜end▁of▁sentence｜>"
FORMAT_HINT = (
    "Write calls as <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>TOOL_NAME\n```json\n"
    "{arguments as a JSON object}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜> (DeepSeek-V3.1: "
    "<｜tool▁call▁begin｜>TOOL_NAME<｜tool▁sep｜>{arguments}<｜tool▁call▁end｜>)."
)
_HEAD_LIMIT = 256
"""characters searched for `<｜tool▁sep｜>` and for the end of the name line: names are short, and a
bounded window keeps a run of broken calls linear"""
_NAME = re.compile(r"[A-Za-z0-9_.:\-]+")
_SPACE = re.compile(r"\s*")
_JSON = json.JSONDecoder()


@dataclass(frozen=True)
class _Read:
    """One call read from `text[start:end]`; `arguments` is the JSON text as written."""

    result: ToolCall | MalformedCall
    end: int
    arguments: str = ""


class _Text:
    """The text being read, with forward-only finders for the markers a broken call resyncs on."""

    def __init__(self, text: str):
        self.text = text
        self.finders = {m: _Finder(text, m) for m in (CALL_OPEN, CALL_CLOSE)}

    def skip_space(self, pos: int) -> int:
        return _SPACE.match(self.text, pos).end()

    def cut(self, pos: int, *markers: str) -> bool:
        """The text ends at `pos` or partway through one of `markers` (the token limit cut it)."""
        rest = self.text[pos : pos + max(map(len, markers)) + 1]
        return any(marker.startswith(rest) for marker in markers)

    def error(self, start: int, message: str) -> MalformedCall:
        return MalformedCall(f"{message} {FORMAT_HINT}", raw=self.text[start:])

    def broken(self, start: int, pos: int, message: str) -> _Read:
        """A call unreadable from `pos`: it runs through the next `<｜tool▁call▁end｜>`, or up to the
        next `<｜tool▁call▁begin｜>` if one comes first (that one is read on its own)."""
        close, reopen = self.finders[CALL_CLOSE].next(pos), self.finders[CALL_OPEN].next(pos)
        if close >= 0 and (reopen < 0 or close < reopen):
            end = close + len(CALL_CLOSE)
        else:
            end = reopen if reopen >= 0 else len(self.text)
        return _Read(MalformedCall(f"{message} {FORMAT_HINT}", raw=self.text[start:end]), end)

    def truncated(self, start: int, message: str) -> _Read:
        return _Read(self.error(start, f"The text ended inside a tool call: {message}"), len(self.text))


@register_parser("deepseek_v3")
@dataclass(frozen=True)
class DeepSeekV3Parser:
    """Reads `<｜tool▁calls▁begin｜>` sections in V3/R1's and V3.1's shapes; see the module docstring."""

    max_calls: int = 8
    """calls run per turn, and broken calls answered one by one (as qwen3's parser)"""
    starts_in_reasoning: bool = False
    """the generation prompt pre-filled `<think>`: the text starts inside the think block"""

    def __post_init__(self) -> None:
        check_max_calls(self.max_calls)

    def parse(self, text: str) -> ParseResult:
        return parse_leading_reasoning(
            text, self.starts_in_reasoning, _pieces, CALL_OPEN, self.max_calls, FORMAT_HINT
        )


Pieces = Callable[[str], Sequence["str | ToolCall | MalformedCall"]]


def parse_leading_reasoning(
    text: str, starts_inside: bool, pieces: Pieces, call_open: str, max_calls: int, hint: str
) -> ParseResult:
    """A turn whose reasoning is a leading `<think>` block and whose calls `pieces` reads from the
    rest (plain text, calls and broken calls in order); calls in the reasoning count as drafts."""
    content: list[str] = []
    answer: list[str] = []
    calls: list[ToolCall] = []
    errors: list[MalformedCall] = []
    unreported = drafted = 0
    for part in reasoning.segments(text, THINK, starts_inside, leading_only=True):
        if part.in_reasoning:
            content.append(part.text)
            drafted += part.text.count(call_open)
            continue
        for piece in pieces(part.text):
            if isinstance(piece, str):
                content.append(piece)
                answer.append(piece)
            elif isinstance(piece, ToolCall):
                calls.append(piece)
            elif len(errors) < max_calls:
                errors.append(piece)
            else:
                unreported += 1
    calls, errors = cap_calls(calls, errors, unreported, max_calls, call_open, hint)
    return ParseResult(
        content="".join(content).strip(),
        calls=calls,
        errors=errors,
        reasoning=reasoning.split(text, THINK, starts_inside, leading_only=True)[0],
        answer="".join(answer).strip(),
        calls_in_reasoning=drafted,
    )


def _pieces(text: str) -> list[str | ToolCall | MalformedCall]:
    """Plain text, calls and broken calls, in order."""
    reader, pieces, pos = _Text(text), [], 0
    while (start := text.find(SECTION_OPEN, pos)) >= 0:
        pieces.append(text[pos:start])
        pos = _read_section(reader, start, pieces)
    pieces.append(text[pos:])
    return pieces


def _read_section(reader: _Text, start: int, out: list[str | ToolCall | MalformedCall]) -> int:
    """The calls of the section opening at `start`, appended to `out`; returns where it ends."""
    text, pos, read_any = reader.text, start + len(SECTION_OPEN), False
    while True:
        pos = reader.skip_space(pos)
        if text.startswith(CALL_OPEN, pos):
            read = _read_call(reader, pos)
            out.append(read.result)
            pos, read_any = read.end, True
        elif text.startswith(SECTION_CLOSE, pos):
            return pos + len(SECTION_CLOSE)
        elif reader.cut(pos, CALL_OPEN, SECTION_CLOSE):
            if not read_any:
                out.append(reader.error(start, "The text ended inside <｜tool▁calls▁begin｜> before a call."))
            return len(text)
        else:
            read = reader.broken(pos, pos, "Unexpected text in a tool-call section; expected "
                                 "<｜tool▁call▁begin｜> or <｜tool▁calls▁end｜>.")
            out.append(read.result)
            pos = read.end


def _read_call(reader: _Text, start: int) -> _Read:
    """The call opening at `start`: `HEAD<｜tool▁sep｜>`, then V3.1's JSON (HEAD is the name) or, after
    V3's type `function`, the name line and fenced JSON."""
    text, pos = reader.text, start + len(CALL_OPEN)
    sep = text.find(SEP, pos, pos + _HEAD_LIMIT)
    if sep < 0:
        if len(text) <= pos + _HEAD_LIMIT and CALL_CLOSE not in text[pos:]:
            return reader.truncated(start, "before <｜tool▁sep｜>.")
        return reader.broken(start, pos, "A call must name its tool before <｜tool▁sep｜>.")
    head, pos = text[pos:sep].strip(), reader.skip_space(sep + len(SEP))
    if pos >= len(text):
        return reader.truncated(start, "after <｜tool▁sep｜>.")
    if head != "function" or text.startswith("{", pos):  # V3.1: the head is the name, JSON follows
        return _arguments(reader, start, pos, head, fenced=False)
    line_end = text.find("\n", pos, pos + _HEAD_LIMIT)
    if line_end < 0:
        if len(text) <= pos + _HEAD_LIMIT:
            return reader.truncated(start, "in the tool name.")
        return reader.broken(start, pos, "The tool name after <｜tool▁sep｜> must end its line.")
    name, pos = text[pos:line_end].strip(), reader.skip_space(line_end)
    for fence in ("```json", "```"):
        if text.startswith(fence, pos):
            return _arguments(reader, start, reader.skip_space(pos + len(fence)), name, fenced=True)
    if reader.cut(pos, "```json"):
        return reader.truncated(start, "before the ```json fence.")
    return reader.broken(start, pos, "The arguments must follow the name in a ```json fence.")


def _arguments(reader: _Text, start: int, pos: int, name: str, fenced: bool) -> _Read:
    """The JSON object at `pos`, the closing fence (V3) and `<｜tool▁call▁end｜>`."""
    text = reader.text
    if not _NAME.fullmatch(name):
        return reader.broken(start, pos, f"The tool name {name[:40]!r} is not a plain name (letters, digits, _ . : -).")
    decoded = _decode(text, pos)
    if decoded.error == "truncated":
        return reader.truncated(start, "in the arguments.")
    if decoded.error:
        return reader.broken(start, decoded.end, f"The arguments {decoded.error}.")
    arguments, end = decoded.value, decoded.end
    if not isinstance(arguments, dict):
        return reader.broken(start, end, "The arguments must be a JSON object.")
    json_text, pos = text[pos:end], reader.skip_space(end)
    if fenced and text.startswith("```", pos):
        pos = reader.skip_space(pos + 3)
    elif fenced and not reader.cut(pos, "```"):
        return reader.broken(start, pos, "The ```json fence is not closed with ```.")
    if text.startswith(CALL_CLOSE, pos):
        end = pos + len(CALL_CLOSE)
        return _Read(ToolCall(name=name, arguments=arguments, raw=text[start:end]), end, json_text)
    if reader.cut(pos, "```", CALL_CLOSE):
        return reader.truncated(start, "before <｜tool▁call▁end｜>.")
    return reader.broken(start, pos, "Expected <｜tool▁call▁end｜> after the arguments.")


@dataclass(frozen=True)
class _Decoded:
    """One JSON value read at a position: the value and where it ends, or what is wrong and where."""

    value: Any = None
    end: int = 0
    error: str = ""
    """"" when read; "truncated" when the text ended inside it; else what is wrong"""


def _decode(text: str, pos: int) -> _Decoded:
    """The JSON value at `pos`, decoded from growing slices of the text: json's errors count lines
    from the start of the string they are given, so decoding in place would cost the position of
    every broken call (quadratic); a slice that grows fourfold costs its final length."""
    size = 256
    while True:
        stop = min(len(text), pos + size)
        try:
            value, end = _JSON.raw_decode(text[pos:stop])
            if end < stop - pos or stop == len(text):  # a value ending at the cut may go on past it
                return _Decoded(value, pos + end)
        except RecursionError:
            return _Decoded(end=pos, error="are nested too deeply")
        except json.JSONDecodeError as exc:
            cut_short = exc.msg.startswith("Unterminated string") or exc.pos >= stop - pos - 8
            if cut_short and stop == len(text):
                return _Decoded(end=len(text), error="truncated")
            if not cut_short:
                return _Decoded(end=pos + exc.pos, error=f"are not valid JSON ({exc.msg} at character {exc.pos})")
        size *= 4


class JSONArguments(dict):
    """Call arguments that a template can both `tojson` (vLLM's V3 template) and concatenate as
    text (R1 and V3.1 write `... + arguments + ...`): concatenation gives the JSON as sampled."""

    def __init__(self, arguments: dict[str, Any], text: str):
        super().__init__(arguments)
        self.text = text

    def __add__(self, other: str) -> str:
        return self.text + other

    def __radd__(self, other: str) -> str:
        return other + self.text


def assistant_message(text: str, calls: Sequence[ToolCall], reasoning_text: str = "") -> Message:
    """The turn as the templates read it: content is the text before the first call's section,
    exactly as sampled (they write `content + <｜tool▁calls▁begin｜>...`), with R1's pre-filled
    `<think>\\n` restored when the text starts inside reasoning; arguments are `JSONArguments`."""
    content = text
    if calls:
        content = text[: text.rfind(SECTION_OPEN, 0, max(text.find(calls[0].raw), 0))]
    if reasoning.segments(text, THINK)[0].in_reasoning and not text.startswith(THINK_OPEN):
        content = f"{THINK_OPEN}\n{content}"
    message: Message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [_message_call(call) for call in calls]
    return message


def _message_call(call: ToolCall) -> dict[str, Any]:
    read = _read_call(_Text(call.raw), 0)
    return {"type": "function", "function": {"name": call.name, "arguments": JSONArguments(call.arguments, read.arguments)}}


def _is_deepseek(template: str, vocab: frozenset[str]) -> bool:
    """DeepSeek's tool-call section marker, with its full-width bars."""
    return SECTION_OPEN in template and CALL_OPEN in template


DEEPSEEK_V3 = register_chat_format(
    ChatFormat(
        name="deepseek_v3",
        description="DeepSeek-V3, R1 and V3.1: <｜tool▁calls▁begin｜> sections (V3/R1 fenced JSON, V3.1 bare JSON)",
        parser=DeepSeekV3Parser,
        reasoning=THINK,
        prefills_reasoning=True,
        leading_reasoning_only=True,
        end_of_turn=(END_OF_SENTENCE,),
        turn_end=END_OF_SENTENCE,
        keep_tokens=(SECTION_OPEN, SECTION_CLOSE, CALL_OPEN, CALL_CLOSE, SEP),
        drops_past_reasoning=True,
        history_rewriting=(
            "R1 drops the reasoning of an answer given right after a user turn and renders a second "
            "call turn without <｜tool▁calls▁begin｜>; V3.1 renders history turns as non-thinking "
            "(</think> after <｜Assistant｜>); vLLM's V3 template leaks indentation and newlines"
        ),
        matches=_is_deepseek,
        assistant_message=assistant_message,
    )
)
