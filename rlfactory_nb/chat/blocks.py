"""Reading tool-call blocks by their structure, in linear time: what the tag-delimited families share
(qwen3_xml's `<function=...>`, glm4_5's `<arg_key>`, gemma4's `call:NAME{...}`).

A family's block reader walks one block left to right, each value running to its own closing marker,
so a value that contains the block's closing tag is data. Every search for a marker starts where the
previous search for it stopped (`Finder`), so hostile text costs one pass however many blocks open.

A block the reader cannot follow is a `MalformedCall` that runs to the block's closing tag, or up to
the next opener if that comes first (so a broken block never swallows the next call); a block the text
ends inside is one too (the token limit cut it: never a partial call).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlfactory_nb.chat import reasoning
from rlfactory_nb.chat.parsers import ParseResult, cap_calls
from rlfactory_nb.types import MalformedCall, ToolCall

_SPACE = re.compile(r"[ \t\r\n]*")


class Finder:
    """The next occurrence of one marker at or after a position that only moves forward: each search
    covers text no earlier search covered, so all of them together cost one pass."""

    def __init__(self, text: str, marker: str):
        self.text, self.marker, self._at = text, marker, -2  # -2: not searched yet

    def next(self, pos: int) -> int:
        """Index of the first `marker` at or after `pos`, or -1."""
        if self._at == -1 or self._at >= pos:
            return self._at
        self._at = self.text.find(self.marker, pos)
        return self._at


class Finders:
    """A `Finder` per marker of one text, made on first use."""

    def __init__(self, text: str):
        self.text = text
        self._finders: dict[str, Finder] = {}

    def next(self, marker: str, pos: int) -> int:
        """Index of the first `marker` at or after `pos`, or -1."""
        finder = self._finders.get(marker) or self._finders.setdefault(marker, Finder(self.text, marker))
        return finder.next(pos)


@dataclass(frozen=True)
class Syntax:
    """A family's block: its opening and closing tags, and the hint every error shows."""

    open: str
    close: str
    hint: str


@dataclass(frozen=True)
class Read:
    """One call block read from `text[start:end]`."""

    result: ToolCall | MalformedCall
    end: int


BlockReader = Callable[[str, int, Finders], Read]
"""(text, index of a block's opening tag, the text's finders) -> the block read"""
Piece = str | ToolCall | MalformedCall


def parse_turn(
    text: str, syntax: Syntax, read: BlockReader, markers: reasoning.ReasoningMarkers, starts_inside: bool,
    max_calls: int,
) -> ParseResult:
    """One assistant turn of call blocks that `read` reads (see `assemble`)."""
    pieces = lambda part: split_blocks(part, syntax.open, read)
    return assemble(text, pieces, syntax.open, syntax.hint, markers, starts_inside, max_calls)


def assemble(
    text: str, pieces: Callable[[str], list[Piece]], opener: str, hint: str,
    markers: reasoning.ReasoningMarkers, starts_inside: bool, max_calls: int,
) -> ParseResult:
    """One assistant turn: a leading reasoning block (its `opener`s are drafts: counted, not read),
    then the text outside it cut into `pieces` (text, calls, broken calls); at most `max_calls` calls
    run and broken ones past that are counted in one error (`cap_calls`)."""
    content: list[str] = []
    answer: list[str] = []
    calls: list[ToolCall] = []
    errors: list[MalformedCall] = []
    unreported = drafted = 0
    for part in reasoning.segments(text, markers, starts_inside, leading_only=True):
        if part.in_reasoning:
            content.append(part.text)
            drafted += part.text.count(opener)
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
    calls, errors = cap_calls(calls, errors, unreported, max_calls, opener, hint)
    return ParseResult(
        content="".join(content).strip(),
        calls=calls,
        errors=errors,
        reasoning=reasoning.split(text, markers, starts_inside, leading_only=True)[0],
        answer="".join(answer).strip(),
        calls_in_reasoning=drafted,
    )


def split_blocks(text: str, opener: str, read: BlockReader) -> list[Piece]:
    """Plain text and read call blocks, in order."""
    finders = Finders(text)
    pieces: list[Piece] = []
    pos = 0
    while (start := finders.next(opener, pos)) >= 0:
        pieces.append(text[pos:start])
        block = read(text, start, finders)
        pieces.append(block.result)
        pos = block.end
    pieces.append(text[pos:])
    return pieces


def broken(text: str, start: int, pos: int, finders: Finders, syntax: Syntax, message: str) -> Read:
    """A block that cannot be read from `pos` on: it runs to the next closing tag or, if another
    opener comes first, up to that one (which is read on its own)."""
    close, reopen = finders.next(syntax.close, pos), finders.next(syntax.open, pos)
    if close >= 0 and (reopen < 0 or close < reopen):
        end = close + len(syntax.close)
    else:
        end = reopen if reopen >= 0 else len(text)
    return Read(MalformedCall(f"{message} {syntax.hint}", raw=text[start:end]), end)


def truncated(text: str, start: int, syntax: Syntax, message: str) -> Read:
    """A block the text ends inside."""
    return Read(MalformedCall(f"{message} {syntax.hint}", raw=text[start:]), len(text))


def cut_marker(text: str, pos: int, *markers: str) -> bool:
    """The text ends at `pos` or partway through one of `markers` (the token limit cut it there)."""
    rest = text[pos : pos + max(map(len, markers)) + 1]
    return any(marker.startswith(rest) for marker in markers)


def skip_space(text: str, pos: int) -> int:
    return _SPACE.match(text, pos).end()


def typed_value(raw: str) -> Any:
    """A value written untyped (templates write strings raw and other values as JSON; Qwen3.5 writes
    booleans with Python's `str`): the JSON object, array, number, true/false/null or Python True/False
    it reads as, else the string. So a string whose text is `42` arrives as the number 42."""
    literal = raw.strip()
    if literal in ("True", "False"):
        return literal == "True"
    if literal[:1] in '{["-0123456789' or literal in ("true", "false", "null"):
        try:
            return json.loads(literal)
        except (ValueError, RecursionError):
            return raw
    return raw
