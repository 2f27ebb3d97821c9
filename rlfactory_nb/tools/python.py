"""Plain Python functions as tools: `@tool` derives the JSON schema from type hints and the docstring.

A reward helper or a quick lookup is often one function in a notebook cell; making it an MCP server
would be ceremony. The model sees the same kind of spec either way:

>>> @tool
... def add(a: int, b: int = 0) -> int:
...     '''Add two integers.
...
...     Args:
...         a: the first addend
...         b: the second addend
...     '''
...     return a + b
>>> add.spec.input_schema["properties"]["a"]
{'type': 'integer', 'description': 'the first addend'}
>>> add.spec.input_schema["required"]
['a']
>>> add(2, 3)
5

Synchronous functions run in a thread of the tool pool (rlfactory_nb/_threads.py) so that a slow one
does not stall the event loop (and the other calls in flight); a timeout abandons the thread rather
than killing it, and an abandoned thread no longer counts against the pool.
"""

from __future__ import annotations

import enum
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlfactory_nb._threads import in_thread
from rlfactory_nb.code_names import load_object
from rlfactory_nb.errors import ArgumentTypeError
from rlfactory_nb.types import ToolSpec


@dataclass(frozen=True)
class ToolReply:
    """What a tool function may return instead of a plain value: the text the model reads, and
    `details` for people (an agent tool's transcript), kept in `ToolResult.details`, never shown to
    the model."""

    text: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PythonTool:
    """A Python function with the spec the model sees. Calling it calls the function."""

    fn: Callable[..., Any]
    name: str
    description: str
    input_schema: dict[str, Any]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.input_schema, server="python")

    async def run(self, arguments: Mapping[str, Any]) -> ToolReply:
        """Call with keyword arguments; the result as the text the model reads (and its details)."""
        if inspect.iscoroutinefunction(self.fn):
            value = await self.fn(**arguments)
        else:
            value = await in_thread("tool", self.fn, **arguments)
        return value if isinstance(value, ToolReply) else ToolReply(result_text(value))


def tool(
    fn: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None
) -> Any:
    """Decorator (`@tool` or `@tool(name=..., description=...)`) turning a function into a PythonTool."""

    def wrap(function: Callable[..., Any]) -> PythonTool:
        summary, schema = schema_from_function(function)
        return PythonTool(function, name or function.__name__, description or summary, schema)

    return wrap(fn) if fn is not None else wrap


def as_python_tool(obj: Any, name: str | None = None, description: str | None = None) -> PythonTool:
    """A PythonTool from a PythonTool, a function, or a "module:function" string."""
    if isinstance(obj, str):
        obj = load_function(obj)
    if isinstance(obj, PythonTool):
        if name is None and description is None:
            return obj
        obj = obj.fn
    if not callable(obj):
        raise ArgumentTypeError(f"a Python tool must be a function or 'module:function', got {obj!r}")
    return tool(obj, name=name, description=description)


def load_function(target: str, key: str = "functions") -> Any:
    """The function "package.module:function" or "path/to/file.py:function" names (`key`: the tools
    file's entry that named it, for the error)."""
    return load_object(target, key, "function tool")


def result_text(value: Any) -> str:
    """What the model reads for a return value: strings as they are, everything else as JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    try:
        return json.dumps(value, ensure_ascii=False)
    except TypeError:
        return str(value)


def schema_from_function(fn: Callable[..., Any]) -> tuple[str, dict[str, Any]]:
    """(description, JSON schema of the keyword arguments) from `fn`'s signature and docstring."""
    summary, param_docs = parse_docstring(inspect.getdoc(fn) or "")
    hints = typing.get_type_hints(fn)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.kind is param.POSITIONAL_ONLY:
            raise ArgumentTypeError(
                f"tool {fn.__name__}: parameter {param.name!r} is positional-only; tools take keywords"
            )
        prop = json_schema_of(hints.get(param.name, Any))
        if param.name in param_docs:
            prop["description"] = param_docs[param.name]
        if param.default is param.empty:
            required.append(param.name)
        elif _is_json(param.default):
            prop["default"] = param.default
        properties[param.name] = prop
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return summary, schema


_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


def json_schema_of(hint: Any) -> dict[str, Any]:
    """The JSON schema of one type hint (the common cases; anything else accepts any value).

    >>> json_schema_of(list[int])
    {'type': 'array', 'items': {'type': 'integer'}}
    >>> json_schema_of(int | None)
    {'type': ['integer', 'null']}
    """
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint in _SIMPLE:
        return {"type": _SIMPLE[hint]}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [member.value for member in hint]}
    if origin in (typing.Union, types.UnionType):
        options = [json_schema_of(a) for a in args]
        if all(set(o) == {"type"} and isinstance(o["type"], str) for o in options):
            return {"type": [o["type"] for o in options]}
        return {"anyOf": options}
    if hint in (list, tuple, set) or origin in (list, tuple, set, Sequence):
        items = json_schema_of(args[0]) if args else {}
        return {"type": "array", "items": items} if items else {"type": "array"}
    if hint is dict or origin in (dict, Mapping):
        value = json_schema_of(args[1]) if len(args) == 2 else {}
        return {"type": "object", "additionalProperties": value} if value else {"type": "object"}
    return {}


_SECTION = re.compile(r"^(Args|Arguments|Parameters|Returns|Return|Raises|Yields|Examples?|Notes?):\s*$")
_GOOGLE_ARG = re.compile(r"^(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_ARG = re.compile(r"^:param\s+(?:[^:]*\s)?(\w+):\s*(.*)$")


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(description, {parameter: description}) from a Google-style or Sphinx-style docstring."""
    description: list[str] = []
    params: dict[str, str] = {}
    section, current = "", ""
    for line in doc.splitlines():
        stripped = line.strip()
        if match := _SECTION.match(stripped):
            section, current = match.group(1), ""
        elif match := _SPHINX_ARG.match(stripped):
            section, current = "sphinx", match.group(1)
            params[current] = match.group(2)
        elif section in ("Args", "Arguments", "Parameters", "sphinx"):
            match = _GOOGLE_ARG.match(stripped)
            if match and section != "sphinx" and not line.startswith(" " * 8):
                current = match.group(1)
                params[current] = match.group(2)
            elif current and stripped:
                params[current] = f"{params[current]} {stripped}".strip()
        elif not section:
            description.append(stripped)
    return " ".join(" ".join(description).split()), params


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True
