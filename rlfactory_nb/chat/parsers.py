"""Tool-call parsers, looked up by name (a model family's `ChatFormat` names the one it uses).

A parser turns one assistant message into the text the user sees, the calls to run and the blocks it
could not read. Model text is untrusted and often malformed (most of all early in training), so
`parse` never raises on it: a broken call block becomes a `MalformedCall` that the agent loop shows the
model, which is how a policy learns the format instead of a rollout crashing.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from rlfactory_nb.errors import ArgumentTypeError, ConfigError, RegistryKeyError
from rlfactory_nb.types import MalformedCall, ToolCall, ToolSpec

_RAW_SHOWN_TO_MODEL = 300
"""characters of a broken block quoted back to the model; enough to locate the mistake"""


@dataclass(frozen=True)
class ParseResult:
    """What a parser read from one assistant message."""

    content: str
    """the message text with the parsed call blocks removed, stripped (reasoning left in place)"""
    calls: list[ToolCall] = field(default_factory=list)
    """well-formed calls to run, in the order they appear"""
    errors: list[MalformedCall] = field(default_factory=list)
    """call blocks that could not be read; the model is told about each"""
    reasoning: str = ""
    """the text inside the family's reasoning markers (markers removed), blocks joined by newlines"""
    answer: str = ""
    """the text outside reasoning with the parsed call blocks removed, stripped: what a reward reads"""
    calls_in_reasoning: int = 0
    """call blocks written inside reasoning: drafts, never run, counted so a drafting policy shows"""


class ToolCallParser(Protocol):
    """What the agent loop needs from a parser."""

    def parse(self, text: str, tools: Sequence[ToolSpec] | None = None) -> ParseResult:
        """`text` read; `tools` (the specs the agent offered) type values that a format writes as
        text by their schema (chat/schema.py); without them a parser reads values as it always has."""
        ...


P = TypeVar("P")
_PARSERS: dict[str, type] = {}


def register_parser(name: str) -> Callable[[type[P]], type[P]]:
    """Class decorator that makes a parser available as `get_parser(name)`; stack it for aliases."""

    def add(cls: type[P]) -> type[P]:
        if name in _PARSERS and _PARSERS[name] is not cls:
            raise ConfigError(f"parser name {name!r} is already registered by {_PARSERS[name].__name__}")
        _PARSERS[name] = cls
        return cls

    return add


def parser_names() -> list[str]:
    return sorted(_PARSERS)


def get_parser(name: str, **options: object) -> ToolCallParser:
    """A new parser by registry name; `options` are the parser's fields (e.g. `max_calls=4`)."""
    if name not in _PARSERS:
        raise RegistryKeyError(f"unknown tool-call parser {name!r}; known parsers: {', '.join(parser_names())}")
    cls = _PARSERS[name]
    if dataclasses.is_dataclass(cls):
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ArgumentTypeError(
                f"parser {name!r} has no option {', '.join(map(repr, unknown))}; "
                f"its options are: {', '.join(sorted(known))}"
            )
    return cls(**options)


def check_max_calls(max_calls: object) -> None:
    """A parser's `max_calls` option: an integer >= 1 (a bool is not one)."""
    if not isinstance(max_calls, int) or isinstance(max_calls, bool) or max_calls < 1:
        raise ConfigError(f"max_calls must be an integer >= 1, got {max_calls!r}")


def cap_calls(
    calls: list[ToolCall], errors: list[MalformedCall], unreported: int, max_calls: int, block: str, hint: str
) -> tuple[list[ToolCall], list[MalformedCall]]:
    """At most `max_calls` calls run per turn; the rest, and broken blocks past the first `max_calls`
    (`unreported`, each would be one more message to the model), are reported in one error each."""
    errors = list(errors)
    if unreported:
        errors.append(
            MalformedCall(
                f"{len(errors) + unreported} broken {block} blocks in one turn; only the first "
                f"{max_calls} are answered. {hint}"
            )
        )
    if len(calls) > max_calls:
        dropped, calls = calls[max_calls:], calls[:max_calls]
        errors.append(
            MalformedCall(
                f"{len(calls) + len(dropped)} tool calls in one turn; only the first {max_calls} "
                f"were run. Make at most {max_calls} calls per turn.",
                raw="\n".join(call.raw for call in dropped),
            )
        )
    return calls, errors


def json_call(
    data: dict[str, Any], arguments_key: str, raw: str, error: Callable[[str], MalformedCall]
) -> ToolCall | MalformedCall:
    """The call a JSON object names: a non-empty string "name" and, under `arguments_key`, an
    object (a JSON string holding one, or none at all, loses nothing and is accepted)."""
    name = data.get("name")
    if name is None:
        return error('The call has no "name".')
    if not isinstance(name, str) or not name.strip():
        return error(f'"name" must be a non-empty string, got {json_type(name)} {short_json(name)}.')
    arguments = data.get(arguments_key)
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments.strip() or "{}")
        except (ValueError, RecursionError) as exc:
            return error(f'"{arguments_key}" is a string that is not valid JSON ({describe_json_error(exc)}).')
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return error(f'"{arguments_key}" must be a JSON object, got a {json_type(arguments)}.')
    return ToolCall(name=name.strip(), arguments=arguments, raw=raw)


def describe_json_error(exc: BaseException) -> str:
    """What `json.loads` found wrong, in words for the model."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if isinstance(exc, json.JSONDecodeError):
        if exc.msg == "Extra data":
            return f"extra text after the JSON value at line {exc.lineno} column {exc.colno}"
        return f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    return str(exc)


def json_type(value: Any) -> str:
    """The JSON name of a decoded value's type ("object", "array", ...)."""
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def short_json(value: Any, limit: int = 40) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + "..."


def without_end(text: str, ends: tuple[str, ...]) -> str:
    """`text` less an end-of-turn token written at its very end (a recorded output may keep the stop
    token as text; decoded turns never hold it): it is no part of the answer.

    >>> without_end("It is sunny.<|eot|>", ("<|eot|>", "<|eom|>"))
    'It is sunny.'
    """
    stripped = text.rstrip()
    for end in ends:
        if stripped.endswith(end):
            return stripped[: -len(end)]
    return text


def format_error_for_model(error: MalformedCall) -> str:
    """The text the model sees in place of a tool result for a call block it got wrong."""
    text = f"Error: your tool call was not executed. {error.message}"
    if error.raw:
        raw = error.raw if len(error.raw) <= _RAW_SHOWN_TO_MODEL else error.raw[:_RAW_SHOWN_TO_MODEL] + "..."
        text += f"\nThe call as written:\n{raw}"
    return text
