"""Argument values typed by the tool's schema, for formats that write every value as text.

XML-style call formats (qwen3_xml's `<parameter=K>`, GLM's `<arg_value>`, DeepSeek's DSML
`<parameter ... string="false">`, Kimi K3's `<|open|>argument type=...`) carry each value as text.
Read alone, `label="3"` is ambiguous: the number 3 or the string "3". vLLM's and SGLang's parsers
settle it with the tools of the request, and so do ours when the agent passes its `ToolSpec`s to
`parse(text, tools=...)`:

- a parameter the schema calls a string stays the text as written, even when it reads `3` or `{"a": 1}`;
- one it calls an integer, number, boolean, null, object or array is converted when the text reads
  as that type;
- anything else (no schema, a parameter the schema does not name, a union type, a text that does not
  read as the declared type) keeps the format's own reading: its `fallback`. Without schemas that
  is today's behaviour: the format's marker (DSML's `string=`, K3's `type=`) or, for formats with no
  marker, the JSON value the text reads as (chat/blocks.py `typed_value`).

A reader puts an `Untyped` in the arguments; `resolve` turns every one into its final value, so
no parser returns an `Untyped`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any, Self

from rlfactory_nb.chat.parsers import ParseResult
from rlfactory_nb.types import ToolCall, ToolSpec


class Untyped(str):
    """A value as written, with the format's own reading of it (`fallback`) for when no schema says."""

    fallback: Any

    def __new__(cls, text: str, fallback: Any) -> Self:
        value = super().__new__(cls, text)
        value.fallback = fallback
        return value


def resolve(result: ParseResult, tools: Sequence[ToolSpec] | None) -> ParseResult:
    """`result` with every `Untyped` argument typed by `tools`' schemas (or its fallback)."""
    if not any(isinstance(v, Untyped) for call in result.calls for v in call.arguments.values()):
        return result
    schemas = dict(_schema_of(tool) for tool in tools or ())
    calls = [_typed_call(call, schemas.get(call.name)) for call in result.calls]
    return dataclasses.replace(result, calls=calls)


def _schema_of(tool: ToolSpec | dict[str, Any]) -> tuple[str, Any]:
    """(name, parameters schema) of a `ToolSpec`, or of a tool in OpenAI's form (what a request's
    `tools` hold), so a caller with either can pass it."""
    if isinstance(tool, ToolSpec):
        return tool.name, tool.input_schema
    function = tool.get("function", tool) if isinstance(tool, dict) else {}
    return str(function.get("name", "")), function.get("parameters") or function.get("input_schema")


def _typed_call(call: ToolCall, schema: dict[str, Any] | None) -> ToolCall:
    properties = schema.get("properties") if isinstance(schema, dict) else None
    properties = properties if isinstance(properties, dict) else {}
    arguments = {key: typed(value, properties.get(key)) for key, value in call.arguments.items()}
    return dataclasses.replace(call, arguments=arguments)


def typed(value: Any, schema: Any) -> Any:
    """`value` as the parameter `schema` declares it; a value already typed is left as it is.

    >>> typed(Untyped("3", 3), {"type": "string"}), typed(Untyped("3", "3"), {"type": "integer"})
    ('3', 3)
    >>> typed(Untyped("yes", "yes"), {"type": "boolean"}), typed(Untyped("null", None), {"type": ["string", "null"]})
    ('yes', None)
    """
    if not isinstance(value, Untyped):
        return value
    declared = schema.get("type") if isinstance(schema, dict) else None
    kinds = [declared] if isinstance(declared, str) else [k for k in declared if isinstance(k, str)] if isinstance(declared, list) else []
    for kind in kinds:  # a list (["integer", "null"]) tries each other type before a string
        convert = _CONVERTERS.get(kind)
        converted = convert(value.strip()) if convert is not None else _NO
        if converted is not _NO:
            return converted
    return str(value) if "string" in kinds else value.fallback


_NO = object()


def _json_of(kind: type | tuple[type, ...]):
    def convert(text: str) -> Any:
        try:
            decoded = json.loads(text)
        except (ValueError, RecursionError):
            return _NO
        if isinstance(decoded, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
            return _NO
        return decoded if isinstance(decoded, kind) else _NO

    return convert


def _integer(text: str) -> Any:
    value = _json_of((int, float))(text)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, int) else _NO


def _boolean(text: str) -> Any:
    return {"true": True, "false": False, "True": True, "False": False}.get(text, _NO)


_CONVERTERS = {
    "integer": _integer,
    "number": _json_of((int, float)),
    "boolean": _boolean,
    "null": lambda text: None if text in ("null", "None") else _NO,
    "object": _json_of(dict),
    "array": _json_of(list),
}
