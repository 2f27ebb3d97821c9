"""The Qwen3 / Hermes parser: a table of model outputs. The call cap and the property tests over
random text are fault cases: tests/faults/test_model_output.py."""

from __future__ import annotations

import pytest

from rlfactory_nb.chat import format_error_for_model, get_parser, parser_names
from rlfactory_nb.types import MalformedCall
from tests.chat.conformance import assert_bounded, assert_linear

CALC = '{"name": "calculator", "arguments": {"expression": "12*3"}}'


def block(body: str) -> str:
    return f"<tool_call>\n{body}\n</tool_call>"


# (text, expected calls as (name, arguments), expected error substrings in order, expected content)
CASES = [
    pytest.param("The answer is 36.", [], [], "The answer is 36.", id="plain text"),
    pytest.param(block(CALC), [("calculator", {"expression": "12*3"})], [], "", id="one call"),
    pytest.param(
        "Let me compute.\n" + block(CALC) + "\nDone.",
        [("calculator", {"expression": "12*3"})],
        [],
        "Let me compute.\n\nDone.",
        id="text before and after",
    ),
    pytest.param(
        block(CALC) + "\n" + block('{"name": "search", "arguments": {"query": "x"}}'),
        [("calculator", {"expression": "12*3"}), ("search", {"query": "x"})],
        [],
        "",
        id="two calls",
    ),
    pytest.param(
        f"<tool_call>{CALC}</tool_call>", [("calculator", {"expression": "12*3"})], [], "", id="no newlines"
    ),
    pytest.param(
        '<tool_call>  \n\n {\n  "name" : "calculator",\n\t"arguments": {"expression": "12*3"}\n}\r\n\n</tool_call>',
        [("calculator", {"expression": "12*3"})],
        [],
        "",
        id="extra whitespace and CRLF",
    ),
    pytest.param(
        block('{"name": "calculator", "arguments": "{\\"expression\\": \\"1+1\\"}"}'),
        [("calculator", {"expression": "1+1"})],
        [],
        "",
        id="arguments as a JSON string",
    ),
    pytest.param(
        block('{"name": "clock", "arguments": ""}'),
        [("clock", {})],
        [],
        "",
        id="arguments as an empty string",
    ),
    pytest.param(block('{"name": "clock"}'), [("clock", {})], [], "", id="arguments omitted"),
    pytest.param(block('{"name": "clock", "arguments": null}'), [("clock", {})], [], "", id="arguments null"),
    pytest.param(
        "Computing " + f"<tool_call>\n{CALC}\n",
        [("calculator", {"expression": "12*3"})],
        [],
        "Computing",
        id="truncated after complete JSON",
    ),
    pytest.param(
        '<tool_call>\n{"name": "calculator", "arguments": {"expr',
        [],
        ["ended inside a <tool_call> block with incomplete JSON"],
        "",
        id="truncated inside JSON",
    ),
    pytest.param(
        block('{"name": "calculator", "arguments": {"expression": "1+1"}'),
        [],
        ["not valid JSON (Expecting ',' delimiter at line 1 column 58)"],
        "",
        id="invalid JSON alone",
    ),
    pytest.param(
        block(CALC) + block("{name: calculator}") + block('{"name": "search", "arguments": {"query": "q"}}'),
        [("calculator", {"expression": "12*3"}), ("search", {"query": "q"})],
        ["not valid JSON (Expecting property name enclosed in double quotes"],
        "",
        id="invalid JSON between valid calls",
    ),
    pytest.param(block(CALC + " trailing"), [], ["extra text after the JSON value"], "", id="extra data"),
    pytest.param(
        f"<tool_call>{CALC}" + block('{"name": "search", "arguments": {}}'),
        [("search", {})],
        ["missing its </tool_call> before the next <tool_call>"],
        "",
        id="unclosed mid-text",
    ),
    pytest.param(block(""), [], ["is empty"], "", id="empty block"),
    pytest.param(block('{"arguments": {"x": 1}}'), [], ['has no "name"'], "", id="missing name"),
    pytest.param(
        block('{"name": 7, "arguments": {}}'),
        [],
        ['"name" must be a non-empty string'],
        "",
        id="name not str",
    ),
    pytest.param(
        block('{"name": "  ", "arguments": {}}'),
        [],
        ['"name" must be a non-empty string'],
        "",
        id="blank name",
    ),
    pytest.param(
        block('{"name": "calculator", "arguments": [1, 2]}'),
        [],
        ['"arguments" must be a JSON object, got a array'],
        "",
        id="arguments a list",
    ),
    pytest.param(
        block('{"name": "calculator", "arguments": "12*3"}'),
        [],
        ['"arguments" is a string that is not valid JSON'],
        "",
        id="arguments a non-JSON string",
    ),
    pytest.param(
        block('{"name": "calculator", "arguments": "[1]"}'),
        [],
        ['"arguments" must be a JSON object'],
        "",
        id="arguments a string holding a list",
    ),
    pytest.param(
        block(f"[{CALC}]"), [], ["holds a JSON array; write one block per call"], "", id="array of calls"
    ),
    pytest.param(block('"calculator"'), [], ["must hold a JSON object, got a string"], "", id="bare string"),
    pytest.param(
        block('{"name": "搜索", "arguments": {"query": "東京の天気 🌧", "note": "naïve"}}') + " 好的",
        [("搜索", {"query": "東京の天気 🌧", "note": "naïve"})],
        [],
        "好的",
        id="unicode",
    ),
    pytest.param(
        "<think>maybe " + block(CALC) + "</think>No call needed.",
        [],
        [],
        "<think>maybe " + block(CALC) + "</think>No call needed.",
        id="call inside think is not run",
    ),
    pytest.param(
        "<think>plan: call it</think>\n" + block(CALC),
        [("calculator", {"expression": "12*3"})],
        [],
        "<think>plan: call it</think>",
        id="call after think",
    ),
    pytest.param(
        "reasoning " + block(CALC) + "</think>\nanswer",
        [],
        [],
        "reasoning " + block(CALC) + "</think>\nanswer",
        id="think opened in the prompt",
    ),
    pytest.param(
        "<think>still thinking " + block(CALC),
        [],
        [],
        "<think>still thinking " + block(CALC),
        id="unclosed think runs to the end",
    ),
    pytest.param(
        block('{"name": "c", "arguments": {"x": ' + "[" * 5000 + "]" * 5000 + "}}"),
        [],
        ["nested too deeply"],
        "",
        id="deep nesting",
    ),
    pytest.param(
        block('{"name": "c", "arguments": {"x": ' + "9" * 5000 + "}}"),
        [],
        ["not valid JSON"],
        "",
        id="integer too long for Python",
    ),
    pytest.param("a </tool_call> b", [], [], "a </tool_call> b", id="stray closing tag is text"),
    pytest.param(
        block('{"name": "write", "arguments": {"text": "end with </tool_call> then <tool_call>"}}') + " ok",
        [("write", {"text": "end with </tool_call> then <tool_call>"})],
        [],
        "ok",
        id="tags inside a JSON string are data",
    ),
    pytest.param(
        block('{"name": "write", "arguments": {"text": "a \\" </tool_call> \\\\"}}'),
        [("write", {"text": 'a " </tool_call> \\'})],
        [],
        "",
        id="escaped quotes and backslashes before a tag in a string",
    ),
    pytest.param(
        '<tool_call>\n{"name": "f", "arguments": {"a": "x\n</tool_call> after',
        [],
        ["not valid JSON"],
        "after",
        id="a raw newline ends an unterminated string",
    ),
    pytest.param(
        '<tool_call>\n{"name": "f", "arguments": {"a": "x </tool_call> after',
        [],
        ["ended inside a <tool_call> block"],
        "",
        id="an unterminated string runs to the end",
    ),
]


@pytest.mark.parametrize("text, calls, errors, content", CASES)
def test_parse_table(text: str, calls: list, errors: list[str], content: str) -> None:
    result = get_parser("qwen3").parse(text)
    assert [(c.name, c.arguments) for c in result.calls] == calls
    assert len(result.errors) == len(errors), result.errors
    for error, expected in zip(result.errors, errors):
        assert expected in error.message
        assert '"name": "<tool name>"' in error.message, "every error shows the model the expected format"
    assert result.content == content


def test_raw_is_the_exact_block_text() -> None:
    text = "x " + block(CALC) + " y " + block("{bad")
    result = get_parser("qwen3").parse(text)
    assert result.calls[0].raw == block(CALC)
    assert result.errors[0].raw == block("{bad")
    assert result.calls[0].raw in text and result.errors[0].raw in text


def test_calls_in_think_option_runs_them() -> None:
    text = "<think>" + block(CALC) + "</think>"
    result = get_parser("qwen3", calls_in_think=True).parse(text)
    assert [c.name for c in result.calls] == ["calculator"]
    assert result.content == "<think></think>"


def test_hermes_is_an_alias() -> None:
    assert type(get_parser("hermes")) is type(get_parser("qwen3"))
    assert {"hermes", "qwen3"} <= set(parser_names())


def test_unknown_parser_lists_known_names() -> None:
    with pytest.raises(KeyError, match="unknown tool-call parser 'no_such'.*hermes, .*qwen3"):
        get_parser("no_such")


def test_unknown_option_lists_options() -> None:
    with pytest.raises(TypeError, match="no option 'max_call'.*calls_in_think, max_calls"):
        get_parser("qwen3", max_call=2)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_bad_cap_is_rejected(bad: object) -> None:
    with pytest.raises(ValueError, match="max_calls must be an integer >= 1"):
        get_parser("qwen3", max_calls=bad)


def test_format_error_for_model_quotes_the_call() -> None:
    error = get_parser("qwen3").parse(block("{oops")).errors[0]
    text = format_error_for_model(error)
    assert text.startswith("Error: your tool call was not executed. The <tool_call> block is not valid JSON")
    assert text.endswith(block("{oops"))


def test_format_error_for_model_shortens_long_calls() -> None:
    text = format_error_for_model(MalformedCall("bad", raw="x" * 10_000))
    assert len(text) < 400 and text.endswith("...")


@pytest.mark.parametrize(
    "make",
    [
        lambda n: "<tool_call>" * (n // 11),
        lambda n: '<tool_call>{"a": "' + "</tool_call>" * (n // 12),
        lambda n: '<tool_call>{"a": "' + '\\"' * (n // 2) + "</tool_call>",
        lambda n: '<tool_call>"</tool_call>' * (n // 24),
    ],
    ids=["openers", "closes in an unterminated string", "escaped quotes", "quotes and closes"],
)
def test_finding_the_closing_tag_is_linear(make) -> None:
    parser = get_parser("qwen3")
    result = assert_bounded(parser, make(4_000_000))
    assert len(result.errors) <= 10
    assert_linear(parser, make, n=100_000)
