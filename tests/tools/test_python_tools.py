"""Python functions as tools: schemas from hints and docstrings, sync and async, errors as data."""

import asyncio
import enum
from typing import Literal

import pytest

from rlfactory_nb.tools import ToolSet, tool
from rlfactory_nb.tools.python import json_schema_of, parse_docstring, schema_from_function


class Unit(enum.Enum):
    METRIC = "metric"
    IMPERIAL = "imperial"


def convert(value: float, unit: Unit, precision: int = 2, tags: list[str] | None = None) -> str:
    """Convert a length.

    Args:
        value: the length
        unit: target system,
            metric or imperial
        precision (int): digits after the point
    """
    return f"{value:.{precision}f} {unit}"


def test_schema_from_hints_defaults_and_google_docstring():
    description, schema = schema_from_function(convert)
    assert description == "Convert a length."
    assert schema["required"] == ["value", "unit"]
    assert schema["additionalProperties"] is False
    props = schema["properties"]
    assert props["value"] == {"type": "number", "description": "the length"}
    assert props["unit"] == {
        "enum": ["metric", "imperial"],
        "description": "target system, metric or imperial",
    }
    assert props["precision"] == {"type": "integer", "description": "digits after the point", "default": 2}
    assert props["tags"]["anyOf"][0] == {"type": "array", "items": {"type": "string"}}


def test_sphinx_docstrings_and_literals():
    summary, params = parse_docstring(
        "Fetch a page.\n\n:param url: the address\n:param int retries: how often"
    )
    assert summary == "Fetch a page." and params == {"url": "the address", "retries": "how often"}
    assert json_schema_of(Literal["a", "b"]) == {"enum": ["a", "b"]}
    assert json_schema_of(dict[str, int]) == {"type": "object", "additionalProperties": {"type": "integer"}}


def test_decorator_options_and_positional_only_refusal():
    @tool(name="lookup", description="Look it up.")
    def find(key: str) -> str:
        return key

    assert (find.spec.name, find.spec.description, find("k")) == ("lookup", "Look it up.", "k")
    with pytest.raises(TypeError, match="positional-only"):
        tool(lambda x, /: x)


async def test_sync_and_async_functions_errors_and_timeouts():
    @tool
    async def slow(seconds: float) -> str:
        """Sleep."""
        await asyncio.sleep(seconds)
        return "done"

    @tool
    def divide(a: float, b: float) -> float:
        """Divide."""
        return a / b

    @tool
    def record() -> dict:
        """Structured answer."""
        return {"answer": 42, "unit": "m"}

    async with ToolSet.from_functions(slow, divide, record, timeout_s=0.3) as tools:
        fast, too_slow = await tools.call_many([("slow", {"seconds": 0.01}), ("slow", {"seconds": 5})])
        assert (fast.status, too_slow.status) == ("ok", "timeout")
        assert (await tools.call("divide", {"a": 1, "b": 4})).content == "0.25"
        failed = await tools.call("divide", {"a": 1, "b": 0})
        assert failed.status == "error" and "ZeroDivisionError" in failed.content
        assert (await tools.call("record", {})).content == '{"answer": 42, "unit": "m"}'


async def test_module_function_strings_are_imported():
    async with ToolSet.from_config({"functions": ["os.path:basename"]}) as tools:
        assert tools.names == ["basename"]
        assert (await tools.call("basename", {"p": "/a/b.txt"})).content == "b.txt"


async def test_global_and_per_tool_concurrency_limits():
    in_flight = {"now": 0, "peak": 0}

    async def busy(label: str) -> str:
        in_flight["now"] += 1
        in_flight["peak"] = max(in_flight["peak"], in_flight["now"])
        await asyncio.sleep(0.02)
        in_flight["now"] -= 1
        return label

    def peak_of(config, **settings):
        async def run():
            in_flight["peak"] = 0
            async with ToolSet.from_config(config, cache=False, **settings) as tools:
                results = await tools.call_many([("busy", {"label": str(i)}) for i in range(12)])
            assert [r.content for r in results] == [str(i) for i in range(12)]
            return in_flight["peak"]

        return run()

    assert await peak_of({"functions": [busy]}) == 12
    assert await peak_of({"functions": [busy]}, max_concurrency=3) == 3
    assert await peak_of({"functions": [{"function": busy, "max_concurrency": 2}]}) == 2
