"""Tool calls inside a section of special tokens, read by structure (DeepSeek, Kimi K2):

    SECTION_OPEN CALL_OPEN <call head> <JSON arguments> CALL_CLOSE CALL_OPEN ... CALL_CLOSE SECTION_CLOSE

The families differ only in their markers and in the head of a call (DeepSeek's `function<sep>NAME`
and fence, Kimi's `functions.NAME:IDX<|tool_call_argument_begin|>`), so each family passes its
markers and a `read_call`; this module reads the section around the calls and the JSON in them.

A call stands only once its CALL_CLOSE is read, so a turn cut off by the token limit never runs a
partial call (a missing SECTION_CLOSE at the very end of the text loses nothing). Arguments are one
JSON value decoded where they start, so a CALL_CLOSE inside a JSON string is data. Every search
moves forward only, and broken calls resync on the next marker, so hostile text costs linear time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlfactory_nb.chat.blocks import Finder, assemble
from rlfactory_nb.chat.parsers import ParseResult
from rlfactory_nb.chat.qwen3 import THINK
from rlfactory_nb.types import MalformedCall, ToolCall

NAME = re.compile(r"[A-Za-z0-9_.\-]+")
"""what a tool name may be: a name written as JSON or with a marker in it is a broken call"""
_SPACE = re.compile(r"\s*")
_JSON = json.JSONDecoder()


@dataclass(frozen=True)
class SectionMarkers:
    """One family's section and call markers, and the hint every error about them shows."""

    section_open: str
    section_close: str
    call_open: str
    call_close: str
    hint: str


@dataclass(frozen=True)
class Read:
    """One call read from `text[start:end]`; `arguments` is its JSON text as written."""

    result: ToolCall | MalformedCall
    end: int
    arguments: str = ""


class Reader:
    """The text being read, with forward-only finders for the markers a broken call resyncs on."""

    def __init__(self, text: str, markers: SectionMarkers):
        self.text, self.markers = text, markers
        self.finders = {m: Finder(text, m) for m in (markers.call_open, markers.call_close)}

    def skip_space(self, pos: int) -> int:
        return _SPACE.match(self.text, pos).end()

    def cut(self, pos: int, *markers: str) -> bool:
        """The text ends at `pos` or partway through one of `markers` (the token limit cut it)."""
        rest = self.text[pos : pos + max(map(len, markers)) + 1]
        return any(marker.startswith(rest) for marker in markers)

    def error(self, start: int, message: str) -> MalformedCall:
        return MalformedCall(f"{message} {self.markers.hint}", raw=self.text[start:])

    def broken(self, start: int, pos: int, message: str) -> Read:
        """A call unreadable from `pos`: it runs through the next CALL_CLOSE, or up to the next
        CALL_OPEN if one comes first (that one is read on its own)."""
        close_marker = self.markers.call_close
        close, reopen = self.finders[close_marker].next(pos), self.finders[self.markers.call_open].next(pos)
        if close >= 0 and (reopen < 0 or close < reopen):
            end = close + len(close_marker)
        else:
            end = reopen if reopen >= 0 else len(self.text)
        return Read(MalformedCall(f"{message} {self.markers.hint}", raw=self.text[start:end]), end)

    def truncated(self, start: int, message: str) -> Read:
        return Read(self.error(start, f"The text ended inside a tool call {message}"), len(self.text))


ReadCall = Callable[[Reader, int], Read]
"""(reader, where a CALL_OPEN starts) -> the call read from there"""


def parse(
    text: str, markers: SectionMarkers, read_call: ReadCall, starts_inside: bool, max_calls: int
) -> ParseResult:
    """One turn: a leading `<think>` block (calls in it are drafts: counted, not run), then text
    with call sections."""
    pieces = lambda part: _pieces(part, markers, read_call)
    return assemble(text, pieces, markers.call_open, markers.hint, THINK, starts_inside, max_calls)


def _pieces(text: str, markers: SectionMarkers, read_call: ReadCall) -> list[str | ToolCall | MalformedCall]:
    """Plain text, calls and broken calls, in order."""
    reader, pieces, pos = Reader(text, markers), [], 0
    while (start := text.find(markers.section_open, pos)) >= 0:
        pieces.append(text[pos:start])
        pos = _read_section(reader, start, pieces, read_call)
    pieces.append(text[pos:])
    return pieces


def _read_section(reader: Reader, start: int, out: list[Any], read_call: ReadCall) -> int:
    """The calls of the section opening at `start`, appended to `out`; returns where it ends."""
    text, markers = reader.text, reader.markers
    pos, read_any = start + len(markers.section_open), False
    while True:
        pos = reader.skip_space(pos)
        if text.startswith(markers.call_open, pos):
            read = read_call(reader, pos)
            out.append(read.result)
            pos, read_any = read.end, True
        elif text.startswith(markers.section_close, pos):
            return pos + len(markers.section_close)
        elif reader.cut(pos, markers.call_open, markers.section_close):
            if not read_any:
                out.append(reader.error(start, f"The text ended inside {markers.section_open} before a call."))
            return len(text)
        else:
            message = f"Unexpected text in a tool-call section; expected {markers.call_open} or {markers.section_close}."
            read = reader.broken(pos, pos, message)
            out.append(read.result)
            pos = read.end


def read_arguments(reader: Reader, start: int, pos: int, name: str, before_close: str = "") -> Read:
    """The rest of a call whose tool is `name`: a JSON object at `pos`, then `before_close` if the
    family writes one (DeepSeek's closing fence), then CALL_CLOSE."""
    text, close = reader.text, reader.markers.call_close
    if not NAME.fullmatch(name):
        return reader.broken(start, pos, f"The tool name {name[:40]!r} is not a plain name (letters, digits, _ . -).")
    decoded = decode_json(text, pos)
    if decoded.error == "truncated":
        return reader.truncated(start, "in the arguments.")
    if decoded.error:
        return reader.broken(start, decoded.end, f"The arguments {decoded.error}.")
    if not isinstance(decoded.value, dict):
        return reader.broken(start, decoded.end, "The arguments must be a JSON object.")
    json_text, pos = text[pos : decoded.end], reader.skip_space(decoded.end)
    if before_close and text.startswith(before_close, pos):
        pos = reader.skip_space(pos + len(before_close))
    elif before_close and not reader.cut(pos, before_close):
        return reader.broken(start, pos, f"Expected {before_close} after the arguments.")
    if text.startswith(close, pos):
        end = pos + len(close)
        return Read(ToolCall(name=name, arguments=decoded.value, raw=text[start:end]), end, json_text)
    if reader.cut(pos, before_close or close, close):
        return reader.truncated(start, f"before {close}.")
    return reader.broken(start, pos, f"Expected {close} after the arguments.")


@dataclass(frozen=True)
class Decoded:
    """One JSON value read at a position: the value and where it ends, or what is wrong and where."""

    value: Any = None
    end: int = 0
    error: str = ""
    """"" when read; "truncated" when the text ended inside it; else what is wrong"""


def decode_json(text: str, pos: int) -> Decoded:
    """The JSON value at `pos`, decoded from growing slices of the text: json's errors count lines
    from the start of the string they are given, so decoding in place would cost the position of
    every broken call (quadratic); a slice that grows fourfold costs its final length."""
    size = 256
    while True:
        stop = min(len(text), pos + size)
        try:
            value, end = _JSON.raw_decode(text[pos:stop])
            if end < stop - pos or stop == len(text):  # a value ending at the cut may go on past it
                return Decoded(value, pos + end)
        except RecursionError:
            return Decoded(end=pos, error="are nested too deeply")
        except json.JSONDecodeError as exc:
            cut_short = exc.msg.startswith("Unterminated string") or exc.pos >= stop - pos - 8
            if cut_short and stop == len(text):
                return Decoded(end=len(text), error="truncated")
            if not cut_short:
                return Decoded(end=pos + exc.pos, error=f"are not valid JSON ({exc.msg} at character {exc.pos})")
        size *= 4


def section_start(text: str, call: ToolCall, section_open: str) -> int:
    """Where the section holding `call` opens in `text` (0 when it cannot be found): the content a
    template writes before the calls ends there."""
    return max(text.rfind(section_open, 0, max(text.find(call.raw), 0)), 0)

