"""Values written as text are typed by the tool's schema (chat/schema.py), the same for every
XML-style family; without a schema each keeps the format's own reading."""

from __future__ import annotations

import pytest

from rlfactory_nb.chat import get_parser
from rlfactory_nb.chat.schema import Untyped, typed
from rlfactory_nb.types import ToolSpec

SCHEMA = {"type": "object", "properties": {
    "label": {"type": "string"}, "count": {"type": "integer"}, "ratio": {"type": "number"},
    "flag": {"type": "boolean"}, "options": {"type": "object"}, "tags": {"type": "array"},
    "maybe": {"type": ["integer", "null"]}, "free": {},
}}
TOOLS = [ToolSpec("f", "", SCHEMA)]
VALUES = {"label": "3", "count": "7", "ratio": "2.5", "flag": "true", "options": '{"a": 1}', "tags": "[1, 2]",
          "maybe": "null", "free": "{\"b\": 2}"}
EXPECTED = {"label": "3", "count": 7, "ratio": 2.5, "flag": True, "options": {"a": 1}, "tags": [1, 2], "maybe": None,
            "free": {"b": 2}}
TEXTS = {
    "qwen3_xml": "<tool_call>\n<function=f>\n" + "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in VALUES.items())
    + "</function>\n</tool_call>",
    "glm4_5": "<tool_call>f" + "".join(f"<arg_key>{k}</arg_key><arg_value>{v}</arg_value>" for k, v in VALUES.items()) + "</tool_call>",
    "deepseek_v32": "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"f\">\n" + "".join(
        f'<｜DSML｜parameter name="{k}" string="true">{v}</｜DSML｜parameter>\n' for k, v in VALUES.items())
    + "</｜DSML｜invoke>\n</｜DSML｜function_calls>",
    "kimi_k3": "<|open|>tools<|sep|><|open|>call tool=\"f\" index=\"1\"<|sep|>" + "".join(
        f'<|open|>argument key="{k}" type="string"<|sep|>{v}<|close|>argument<|sep|>' for k, v in VALUES.items())
    + "<|close|>call<|sep|><|close|>tools<|sep|>",
}


@pytest.mark.parametrize("family", list(TEXTS))
def test_every_xml_family_types_values_by_the_schema(family: str) -> None:
    """DSML and K3 here mark every value a string; the schema has the last word (free has no type:
    the format's reading stays, a string for DSML/K3, JSON for the untyped formats)."""
    result = get_parser(family).parse(TEXTS[family], tools=TOOLS)
    assert result.errors == []
    expected = dict(EXPECTED, free=VALUES["free"] if family in ("deepseek_v32", "kimi_k3") else EXPECTED["free"])
    assert result.calls[0].arguments == expected
    assert not any(isinstance(v, Untyped) for v in result.calls[0].arguments.values())


def test_openai_form_tools_are_read_too_and_other_tools_change_nothing() -> None:
    openai = [{"type": "function", "function": {"name": "f", "parameters": SCHEMA}}]
    assert get_parser("glm4_5").parse(TEXTS["glm4_5"], tools=openai).calls[0].arguments == EXPECTED
    other = get_parser("glm4_5").parse(TEXTS["glm4_5"], tools=[ToolSpec("g", "", SCHEMA)]).calls[0].arguments
    assert other["label"] == 3 and other["count"] == 7, "no schema for f: the text's JSON reading"


@pytest.mark.parametrize(
    "text, schema, expected",
    [("abc", {"type": "integer"}, "fallback"), ("3.5", {"type": "integer"}, "fallback"), ("3.0", {"type": "integer"}, 3),
     ("1", {"type": "boolean"}, "fallback"), ("true", {"type": "number"}, "fallback"), ("[1]", {"type": "object"}, "fallback")],
)
def test_a_text_that_does_not_read_as_the_declared_type_keeps_the_formats_reading(text: str, schema: dict, expected) -> None:
    assert typed(Untyped(text, "fallback"), schema) == expected
