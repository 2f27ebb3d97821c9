"""Checks on what the model asked for, before any tool, cache or server sees it.

A tool name and its arguments are model output, so they can be anything a parser lets through or a
caller passes: a name that is not a string, a megabyte of name, arguments nested 100,000 deep, an
integer too long to print, text with lone surrogates (which no UTF-8 pipe can carry: sent to an MCP
server, they broke its session and, call after call, used up its restarts). Each check here is
iterative and linear in the size of the input, and returns a message the model reads instead of
raising, so `ToolSet.call` can turn every one of them into an `invalid_args` or `unknown_tool`
result.

>>> check_arguments({"expression": "1+1"})
''
>>> check_arguments({"expression": "1+\\ud800"})
"'expression': the text holds a lone surrogate (\\\\ud800), which is not valid Unicode"
>>> shown_name("x" * 500)[95:]
'xxxxx... (500 chars)'
"""

from __future__ import annotations

import functools
import json
import logging
import math
import reprlib
from collections.abc import Mapping
from typing import Any

from rlfactory_nb.errors import InvalidArguments  # noqa: F401  (re-exported where callers import it)

logger = logging.getLogger(__name__)

MAX_DEPTH = 32
"""deepest nesting of objects and lists in arguments; tool arguments are shallow, and the MCP SDK
left a request nested about 200 deep unanswered (the call hung until its timeout)"""
MAX_INT_DIGITS = 4000
"""longest integer argument, in decimal digits (Python refuses to print one of over 4,300)"""
MAX_NAME_CHARS = 100
"""characters of a requested tool name echoed back to the model"""
MAX_MESSAGE_CHARS = 1000
"""characters of a message about invalid arguments (it may quote them)"""


_BITS_PER_DIGIT = math.log2(10)
_SCALARS = (str, int, float, bool, type(None))


def shown_name(name: object) -> str:
    """`name` as it can safely be echoed: a string, valid Unicode, at most MAX_NAME_CHARS long."""
    return shown_text(name if isinstance(name, str) else _short_repr(name), MAX_NAME_CHARS)


def shown_text(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`text` cut to `limit` characters, with lone surrogates written as escapes (`\\ud800`)."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


def cut_text(text: str, limit: int, length: int | None = None) -> str:
    """`text` cut to its first `limit` characters with a marker saying so, when it is longer (`length`:
    the whole text's length when `text` is already its start, as the tool cache keeps it): the one
    cut of every text that enters a trajectory (a ToolSet's results, rollout/guard.py `admitted`).

    >>> cut_text("abcdef", 3)
    'abc\\n[... truncated: showing 3 of 6 characters]'
    """
    length = len(text) if length is None else length
    if length <= limit:
        return text
    return f"{text[:limit]}\n[... truncated: showing {limit} of {length} characters]"


def load_arguments(text: str) -> tuple[Any, str]:
    """(the JSON value of `text`, "") or (None, why it is not valid JSON); blank text is `{}`."""
    try:
        return (json.loads(text) if text.strip() else {}), ""
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg} at position {exc.pos})"
    except RecursionError:
        return None, "not valid JSON (nested too deeply)"
    except ValueError as exc:  # an integer too long to convert
        return None, f"not valid JSON ({exc})"


def checked_arguments(name: str, schema: Mapping[str, Any], arguments: Mapping[str, Any] | str | None) -> tuple[dict[str, Any], str]:
    """(arguments, "") or ({}, the message the model reads about what is wrong with them): JSON text
    parsed, the value checked (`check_arguments`), then validated against the tool's JSON `schema`.
    Every tool call takes this path: a ToolSet's, and an environment's `@rf.tool` methods
    (envs/base.py), whose schemas are as binding as a server's."""
    if arguments is None:
        arguments = {}
    arguments, problem = load_arguments(arguments) if isinstance(arguments, str) else (arguments, "")
    if problem := problem or check_arguments(arguments):
        return {}, f"invalid arguments for {name}: {problem}"
    arguments = dict(arguments)  # type: ignore[arg-type]
    validator = schema_validator(schema)
    if validator is not None and (error := _first_error(validator, arguments)):
        return {}, f"invalid arguments for {name}: {error}"
    return arguments, ""


def warm() -> None:
    """Import jsonschema now (it takes seconds): from a worker thread, so that the first argument check
    does not stall an event loop (`ToolSet.start`, an environment made by rollout/episode.py)."""
    import jsonschema  # noqa: F401


def schema_validator(schema: Mapping[str, Any]) -> Any:
    """A jsonschema validator for `schema` (kept per schema text: an environment's tools are bound
    anew each episode), or None when the schema is itself invalid."""
    return _validator(json.dumps(schema, sort_keys=True, default=str))


@functools.lru_cache(maxsize=256)
def _validator(schema_text: str) -> Any:
    import jsonschema  # imported here: `import jsonschema` takes seconds, paid at ToolSet.start()

    schema = json.loads(schema_text)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        logger.warning("tool input schema is invalid, arguments will not be checked: %s", exc.message)
        return None
    return cls(schema)


def _first_error(validator: Any, arguments: dict[str, Any]) -> str:
    import jsonschema

    error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
    if error is None:
        return ""
    where = "/".join(str(p) for p in error.absolute_path)
    return f"'{where}': {error.message}" if where else error.message


def check_arguments(arguments: object) -> str:
    """"" when `arguments` is a JSON object any tool can receive, otherwise what is wrong and where."""
    if not isinstance(arguments, Mapping):
        return f"expected a JSON object, got {type(arguments).__name__}"
    stack: list[tuple[str, Any, int]] = [("", arguments, 1)]  # (where, value, depth), walked without recursion
    while stack:
        where, value, depth = stack.pop()
        if problem := _problem(value, depth):
            return _located(where, problem)
        if isinstance(value, Mapping):
            for key, item in value.items():
                if not isinstance(key, str):
                    return _located(where, f"keys must be strings, got {type(key).__name__}")
                path = _join(where, shown_name(key))
                if problem := _text_problem(key):
                    return _located(path, problem)
                stack.append((path, item, depth + 1))
        elif isinstance(value, (list, tuple)):
            stack += [(_join(where, str(index)), item, depth + 1) for index, item in enumerate(value)]
    return ""


def _problem(value: Any, depth: int) -> str:
    if isinstance(value, (Mapping, list, tuple)):
        return f"nested too deeply (over {MAX_DEPTH} levels)" if depth > MAX_DEPTH else ""
    if not isinstance(value, _SCALARS):
        return f"{type(value).__name__} is not JSON data"
    if isinstance(value, str):
        return _text_problem(value)
    if isinstance(value, int) and value.bit_length() > MAX_INT_DIGITS * _BITS_PER_DIGIT:
        return f"integer too long (over {MAX_INT_DIGITS} digits)"
    return ""


def _text_problem(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start : exc.start + 1].encode("utf-8", "backslashreplace").decode("utf-8")
        return f"the text holds a lone surrogate ({bad}), which is not valid Unicode"
    return ""


def _short_repr(value: object) -> str:
    try:
        return reprlib.repr(value)
    except ValueError:  # an integer too long to print
        return f"<{type(value).__name__}>"


def _join(where: str, part: str) -> str:
    return f"{where}/{part}" if where else part


def _located(where: str, problem: str) -> str:
    return f"'{where}': {problem}" if where else problem
