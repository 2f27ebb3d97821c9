"""DeepSeek's DSML tool calls (families `deepseek_v32` and `deepseek_v4`), read by structure:

    <｜DSML｜function_calls>
    <｜DSML｜invoke name="get_weather">
    <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜function_calls>

V3.2 names the section `function_calls`, V4 `tool_calls`, and V4.1 spells every tag with a leading
space (`<｜DSML｜ calls>`, `<｜DSML｜ invoke`, `<｜DSML｜ parameter`). One reader takes all three
dialects, each section in the dialect its opener names (a model fine-tuned from another generation
keeps its habits, and no spelling can be mistaken for another).

A value runs to its own `</｜DSML｜parameter>`, so a value that contains the section's closing tag
is data. `string="true"` marks a raw string; `string="false"` a JSON value (a text that is not JSON
stays the text: never a lost call). With the tool's schema the value is typed by it (chat/schema.py).
A call stands only once its `</｜DSML｜invoke>` is read: a turn cut by the token limit never runs a
partial call. Every search moves forward only (chat/blocks.py `Finders`), so hostile text costs one pass.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from rlfactory_nb.chat.blocks import Finders, Piece, assemble, skip_space
from rlfactory_nb.chat.parsers import ParseResult, without_end
from rlfactory_nb.chat.reasoning import ReasoningMarkers
from rlfactory_nb.chat.schema import Untyped
from rlfactory_nb.types import MalformedCall, ToolCall

DSML = "｜DSML｜"
_HEADER_LIMIT = 512
"""characters searched for the `>` that ends an invoke or parameter tag: attributes are short, and
a bounded window keeps a run of broken tags linear"""
_INVOKE_ATTRIBUTES = re.compile(r'[ \t]*name="([^"<>\n]*)"[ \t]*>')
_PARAMETER_ATTRIBUTES = re.compile(r'[ \t]*name="([^"<>\n]*)"(?:[ \t]*string="((?i:true|false))")?[ \t]*>')


@dataclass(frozen=True)
class Dialect:
    """One generation's tag names: the section's, the call's and the parameter's."""

    section: str
    invoke: str
    parameter: str

    @property
    def open(self) -> str:
        return f"<{DSML}{self.section}>"

    @property
    def close(self) -> str:
        return f"</{DSML}{self.section}>"

    def tag(self, name: str) -> str:
        return f"<{DSML}{name}"

    def end(self, name: str) -> str:
        return f"</{DSML}{name}>"

    def hint(self) -> str:
        return (
            f"Write calls as {self.open}\n{self.tag(self.invoke)} name=\"TOOL_NAME\">\n"
            f"{self.tag(self.parameter)} name=\"ARGUMENT\" string=\"true\">text{self.end(self.parameter)}\n"
            f"{self.end(self.invoke)}\n{self.close} (string=\"false\" and a JSON value for numbers, "
            "booleans, arrays and objects)."
        )


V32 = Dialect("function_calls", "invoke", "parameter")
V4 = Dialect("tool_calls", "invoke", "parameter")
V41 = Dialect(" calls", " invoke", " parameter")
DIALECTS = (V32, V4, V41)
_HINTS = {d: d.hint() for d in DIALECTS}


def parse(text: str, main: Dialect, markers: ReasoningMarkers, starts_inside: bool, max_calls: int) -> ParseResult:
    """One assistant turn: leading reasoning (its sections are drafts), then text and DSML sections;
    `main` is the family's own dialect, which the hint in errors shows."""
    text = without_end(text, ("<｜end▁of▁sentence｜>",))
    return assemble(text, split_sections, main.open, _HINTS[main], markers, starts_inside, max_calls)


def split_sections(text: str) -> list[Piece]:
    """Plain text and the calls (and broken calls) of each DSML section, in order."""
    finders = Finders(text)
    pieces: list[Piece] = []
    pos = 0
    while True:
        found = [(at, d) for d in DIALECTS if (at := finders.next(d.open, pos)) >= 0]
        if not found:
            break
        start, dialect = min(found, key=lambda item: item[0])
        pieces.append(text[pos:start])
        calls, pos = _read_section(text, start, dialect, finders)
        pieces += calls
    pieces.append(text[pos:])
    return pieces


def _read_section(text: str, start: int, d: Dialect, finders: Finders) -> tuple[list[Piece], int]:
    """The calls of the section opening at `start`, and where the text goes on after it."""
    out: list[Piece] = []
    pos = start + len(d.open)
    invoke = d.tag(d.invoke)
    while True:
        pos = skip_space(text, pos)
        if text.startswith(d.close, pos):
            return out, pos + len(d.close)
        if text.startswith(invoke, pos):
            result, pos = _read_invoke(text, pos, d, finders)
            out.append(result)
            continue
        if pos >= len(text) or _cut(text, pos, d.close, invoke):
            if pos < len(text) or not out:  # cut inside a tag, or before any call
                out.append(MalformedCall(f"The text ended inside {d.open} before {d.close}. {_HINTS[d]}", text[start:]))
            return out, len(text)
        message = f"Unexpected text inside {d.open}; expected {invoke} name=...> or {d.close}. {_HINTS[d]}"
        if _opens_section(text, pos):  # a new section: read on its own, after a run of empty ones
            if not out:
                while _opens_section(text, pos):
                    pos = skip_space(text, pos + len(next(x.open for x in DIALECTS if text.startswith(x.open, pos))))
            out.append(MalformedCall(f"{d.open} is not closed. {_HINTS[d]}", raw=text[start:pos]))
            return out, pos
        stops = [at for m in (invoke, d.close, *(x.open for x in DIALECTS)) if (at := finders.next(m, pos + 1)) >= 0]
        end = min(stops) if stops else len(text)
        out.append(MalformedCall(message, raw=text[pos:end]))
        pos = end
        if end >= len(text):
            return out, end


def _opens_section(text: str, pos: int) -> bool:
    return text.startswith(f"<{DSML}", pos) and any(text.startswith(x.open, pos) for x in DIALECTS)


def _read_invoke(text: str, start: int, d: Dialect, finders: Finders) -> tuple[ToolCall | MalformedCall, int]:
    """One `<｜DSML｜invoke name="N">` ... `</｜DSML｜invoke>` call at `start`."""
    invoke_end, parameter, parameter_end = d.end(d.invoke), d.tag(d.parameter), d.end(d.parameter)
    pos = start + len(d.tag(d.invoke))
    header = _INVOKE_ATTRIBUTES.match(text[pos : pos + _HEADER_LIMIT])
    if header is None:
        return _broken_or_cut(text, start, pos, d, finders, f'{d.tag(d.invoke)} must be followed by name="TOOL_NAME">.')
    name, pos = header.group(1).strip(), pos + header.end()
    if not name:
        return _broken(text, start, pos, d, finders, "The call has no tool name.")
    arguments: dict[str, Any] = {}
    while True:
        pos = skip_space(text, pos)
        if text.startswith(invoke_end, pos):
            end = pos + len(invoke_end)
            return ToolCall(name=name, arguments=arguments, raw=text[start:end]), end
        if not text.startswith(parameter, pos):
            message = f"Unexpected text inside the call of {name!r}; expected {parameter} name=...> or {invoke_end}."
            return _broken_or_cut(text, start, pos, d, finders, message, parameter, invoke_end)
        tag_start = pos + len(parameter)
        attributes = _PARAMETER_ATTRIBUTES.match(text[tag_start : tag_start + _HEADER_LIMIT])
        if attributes is None:
            message = f'{parameter} must be followed by name="ARGUMENT" string="true|false">.'
            return _broken_or_cut(text, start, tag_start, d, finders, message)
        key, is_string = attributes.group(1), attributes.group(2)
        if key in arguments:
            return _broken(text, start, pos, d, finders, f"The argument {key!r} is given twice.")
        pos = tag_start + attributes.end()
        close = finders.next(parameter_end, pos)
        if close < 0:
            return _cut_off(text, start, d, f"The text ended inside the value of {key!r}.")
        arguments[key] = _value(text[pos:close], is_string)
        pos = close + len(parameter_end)


def _value(raw: str, is_string: str | None) -> Untyped:
    """A parameter's text and its reading without a schema: `string="true"` the text, else the
    JSON value it reads as (the text when it does not read as JSON)."""
    if is_string is not None and is_string.lower() == "true":
        return Untyped(raw, raw)
    try:
        return Untyped(raw, json.loads(raw))
    except (ValueError, RecursionError):
        return Untyped(raw, raw)


def _broken_or_cut(
    text: str, start: int, pos: int, d: Dialect, finders: Finders, message: str, *markers: str
) -> tuple[MalformedCall, int]:
    """A call unreadable at `pos`: cut off when the text ends there (or inside a tag), else broken."""
    if pos >= len(text) or (markers and _cut(text, pos, *markers)) or finders.next(">", pos) < 0:
        return _cut_off(text, start, d, "The text ended inside a call.")
    return _broken(text, start, pos, d, finders, message)


def _broken(text: str, start: int, pos: int, d: Dialect, finders: Finders, message: str) -> tuple[MalformedCall, int]:
    """A broken call runs through its `</｜DSML｜invoke>`, or up to the section's end or the next
    call when one comes first (that one is read on its own)."""
    invoke_end = d.end(d.invoke)
    through = finders.next(invoke_end, pos)
    stops = [at for m in (d.close, d.tag(d.invoke), *(x.open for x in DIALECTS)) if (at := finders.next(m, pos)) >= 0]
    upto = min(stops) if stops else len(text)
    end = through + len(invoke_end) if 0 <= through < upto else upto
    return MalformedCall(f"{message} {_HINTS[d]}", raw=text[start:end]), end


def _cut_off(text: str, start: int, d: Dialect, message: str) -> tuple[MalformedCall, int]:
    return MalformedCall(f"{message} {_HINTS[d]}", raw=text[start:]), len(text)


def _cut(text: str, pos: int, *markers: str) -> bool:
    rest = text[pos : pos + max(map(len, markers)) + 1]
    return any(marker.startswith(rest) for marker in markers)
