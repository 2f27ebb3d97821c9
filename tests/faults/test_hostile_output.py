"""Hostile model output (issue 19): text built to break the parser, the ToolSet or a tool server.
Lone surrogates, nesting 100,000 deep, integers too long to print, megabyte tool names, a `round` that
computes 10**10**7, and tags repeated to make a parser quadratic. Each comes back as a ToolResult or a
MalformedCall, quickly, and the real calculator server (over stdio, started once for the module) keeps
serving: after every case an ordinary call still gets its answer."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlfactory_nb._async import run_sync
from rlfactory_nb.chat import get_parser
from rlfactory_nb.tools import ToolSet
from rlfactory_nb.tools.servers.calculator import evaluate
from rlfactory_nb.tools.validate import InvalidArguments
from rlfactory_nb.types import ToolResult

pytestmark = pytest.mark.timeout(120)

TIMEOUT_S = 5.0
FAST_S = 1.0
"""what "quickly" means for a refused call: far below the timeout, far above a slow machine's noise"""
CALCULATOR = {
    "servers": [{"name": "calculator", "command": "python", "args": ["-m", "rlfactory_nb.tools.servers.calculator"]}]
}


@pytest.fixture(scope="module")
def calculator():
    """The real calculator server over stdio, shared by the module; the tests are sync (call_sync)
    because the session lives on the loop that started it."""
    tools = ToolSet.from_config(CALCULATOR, timeout_s=TIMEOUT_S, cache=False)
    tools.start_sync()
    yield tools
    tools.stop_sync()


def assert_still_serving(tools: ToolSet, restarts_before: int = 0) -> None:
    result = tools.call_sync("calculator", {"expression": "20+22"})
    assert (result.status, result.content) == ("ok", "42"), result
    assert tools.stats()["servers"]["calculator"] == {"state": "running", "restarts": restarts_before}


def nested(depth: int, leaf: object = 0) -> object:
    """`depth` lists around `leaf`, built without recursion."""
    for _ in range(depth):
        leaf = [leaf]
    return leaf


def nested_dict(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"a": value}
    return value


# -- item 5: a lone surrogate ------------------------------------------------------------------------

SURROGATE_CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "1+\\ud800"}}</tool_call>'


def test_a_lone_surrogate_is_invalid_args_and_no_server_sees_it(calculator):
    (call,) = get_parser("qwen3").parse(SURROGATE_CALL).calls
    for _ in range(5):  # one more than the restarts it used to cost
        bad, innocent = calculator.call_many_sync([call, ("calculator", {"expression": "3+3"})])
        assert bad.status == "invalid_args" and "surrogate" in bad.content and "\\ud800" in bad.content
        assert (innocent.status, innocent.content) == ("ok", "6")
        assert bad.content.encode("utf-8"), "the message itself is valid text the tokenizer can read"
    assert_still_serving(calculator)


@pytest.mark.parametrize(
    "arguments",
    [{"expression": "1+\ud800"}, {"expression": "1", "x": nested(300)}, {"expression": "1", "x": object()}],
    ids=["lone surrogate", "300 deep", "not JSON"],
)
def test_the_mcp_connection_refuses_what_it_cannot_send_without_a_crash(calculator, arguments):
    """A client-side serialisation failure is the caller's error, not the server's crash."""
    connection = calculator.connections["calculator"]
    with pytest.raises(InvalidArguments, match="cannot be sent"):
        run_sync(connection.call("calculator", arguments))
    assert_still_serving(calculator)


# -- item 9: the calculator's round ------------------------------------------------------------------

@pytest.mark.parametrize("expression", ["round(7, -10**7)", "round(10**999, -10**9)", "round(1, 10**999)"])
def test_round_with_huge_digits_is_refused_fast(expression):
    started = time.process_time()
    assert evaluate(expression).startswith("error: round's digits must be an integer")
    assert time.process_time() - started < 0.1


@pytest.mark.parametrize(
    "expression, answer",
    [("round(123456, -3)", "123000"), ("round(2.567, 2)", "2.57"), ("round(9**999, -1000)", "0"), ("round(2.5)", "2")],
)
def test_round_within_its_bounds_still_works(expression, answer):
    assert evaluate(expression) == answer


def test_one_costly_expression_does_not_starve_a_concurrent_call(calculator):
    slow, simple = calculator.call_many_sync(
        [("calculator", {"expression": "round(7, -10**7)"}), ("calculator", {"expression": "1+1"})]
    )
    assert slow.status == "error" and slow.latency_s < FAST_S
    assert (simple.status, simple.content) == ("ok", "2") and simple.latency_s < FAST_S
    assert_still_serving(calculator)


LIMIT_EXPRESSIONS = [
    "round(9**1000, -1000)", "round(9**1000, 1000)", "9**1000 * 9**1000 * 9**1000", "9**1000 // 7**900",
    "9**1000 % 7**900", "pow(9, 1000)", "log(9**1000)", "max(9**1000, 8**1000, 7**1000)", "floor(1e308)",
    "2**3321", "(10**999)**(10**999)", "1.5**(10**999)", "sqrt(9**1000)", "(9**1000)/(7**1000)",
]


def test_every_operation_at_its_limits_costs_milliseconds():
    """The server evaluates one expression at a time per thread, and big-integer C code holds the GIL:
    the only protection for the other calls is that no allowed operation is slow."""
    for expression in LIMIT_EXPRESSIONS:
        started = time.process_time()
        evaluate(expression)
        assert time.process_time() - started < 0.05, expression


# -- item 10: the parser is linear -------------------------------------------------------------------

def parse_time_ratio(text: str, longer: str, rounds: int = 5) -> float:
    """CPU time to parse `longer` over time to parse `text`, the best of `rounds` runs each, taken in
    turns so that load from other processes weighs on both alike."""
    parser = get_parser("qwen3")
    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        for index, sample in enumerate((text, longer)):
            started = time.process_time()
            parser.parse(sample)
            best[index] = min(best[index], time.process_time() - started)
    return best[1] / best[0]


@pytest.mark.parametrize(
    "unit",
    [
        pytest.param(lambda n: "<tool_call>" * n, id="open tags"),
        pytest.param(lambda n: "<tool_call>{" * n, id="open tags and braces"),
        pytest.param(lambda n: "<tool_call>" * n + "</tool_call>" * n, id="nested tags"),
    ],
)
def test_the_parser_is_linear_in_the_text(unit):
    """Two doublings of the text multiply the time by about 4, below 7 with noise (the quadratic
    parser's 16 showed as 10 to 14 at these sizes; it took 3.1 s for 40,000 opening tags, 0.44 MB)."""
    ratio = parse_time_ratio(unit(8_000), unit(32_000))
    assert ratio < 7, f"parse time grew {ratio:.1f}x when the text grew 4x"


def test_broken_blocks_past_the_cap_are_counted_in_one_error():
    """10,000 broken blocks are not 10,000 messages to the model (each would be a tool message)."""
    result = get_parser("qwen3", max_calls=4).parse("<tool_call>{bad}</tool_call>" * 10_000)
    assert result.calls == [] and len(result.errors) == 5
    assert "10000 broken <tool_call> blocks in one turn; only the first 4 are answered" in result.errors[-1].message
    openers = get_parser("qwen3", max_calls=4).parse("<tool_call>" * 10_000)  # one run of openers: one block
    assert openers.calls == [] and 1 <= len(openers.errors) <= 5


# -- item 11: ToolSet.call returns a result for anything ---------------------------------------------

DEEP_TEXT = '{"expression": "1", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
HUGE_INTEGER_TEXT = '{"expression": "1", "n": ' + "9" * 5000 + "}"
DEEP_200 = '{"expression": "1+1", "x": ' + "[" * 200 + "]" * 200 + "}"

ARGUMENT_CASES = [
    pytest.param(DEEP_TEXT, "nested too deeply", id="100k-deep JSON text"),
    pytest.param({"expression": "1", "x": nested_dict(100_000)}, "nested too deeply", id="100k-deep dict"),
    pytest.param(HUGE_INTEGER_TEXT, "not valid JSON", id="5000-digit integer as text"),
    pytest.param({"expression": "1", "n": 10**5000}, "integer too long", id="5000-digit integer"),
    pytest.param(DEEP_200, "nested too deeply", id="200-deep extra argument"),
    pytest.param({"expression": "1", 7: "x"}, "keys must be strings", id="integer key"),
    pytest.param({"expression": "1", "\udfff": "x"}, "surrogate", id="surrogate in a key"),
]


@pytest.mark.parametrize("arguments, message", ARGUMENT_CASES)
def test_arguments_that_break_serialisation_are_invalid_args_quickly(calculator, arguments, message):
    result = calculator.call_sync("calculator", arguments)
    assert isinstance(result, ToolResult) and result.status == "invalid_args", result
    assert message in result.content and len(result.content) < 500
    assert result.latency_s < FAST_S
    assert_still_serving(calculator)


@pytest.mark.parametrize(
    "name",
    [123, None, ["calculator"], nested(100_000), "x" * 1_000_000, "calc\ud800"],
    ids=["int", "None", "list", "100k-deep list", "1 MB name", "surrogate"],
)
def test_any_tool_name_is_an_unknown_tool_result_with_the_name_truncated(calculator, name):
    result = calculator.call_sync(name, {"expression": "1"})
    assert isinstance(result, ToolResult) and result.status == "unknown_tool", result
    assert len(result.name) <= 200 and len(result.content) < 500 and "Available tools: calculator" in result.content
    result.content.encode("utf-8")
    result.name.encode("utf-8")
    assert result.latency_s < FAST_S


# -- property test: random Unicode and deep JSON through the parser and the ToolSet ------------------

ANY_CHARACTER = st.one_of(st.characters(), st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF))
"""all of Unicode, lone surrogates included (a broken engine or detokenizer can produce them)"""
JSON_SCALAR = st.one_of(
    st.text(ANY_CHARACTER, max_size=20), st.integers(), st.floats(), st.booleans(), st.none()
)


@st.composite
def json_text(draw) -> str:
    """A JSON value as text: random scalars, lone surrogates escaped or raw, nested up to 3000 deep."""
    value = draw(st.recursive(JSON_SCALAR, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.text(ANY_CHARACTER, max_size=5), inner, max_size=3), max_leaves=8))
    text = json.dumps(value, ensure_ascii=draw(st.booleans()))
    depth = draw(st.sampled_from([0, 1, 31, 33, 120, 200, 3000]))
    opener, closer = draw(st.sampled_from([("[", "]"), ('{"k": ', "}")]))
    return opener * depth + text + closer * depth


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    name=st.one_of(st.just("calculator"), st.text(ANY_CHARACTER, max_size=30)),
    expression=st.one_of(st.text(ANY_CHARACTER, max_size=30), st.sampled_from(["1+1", "round(7, -10**7)"])),
    extra=st.one_of(st.none(), json_text()),
    noise=st.text(ANY_CHARACTER, max_size=30),
)
def test_random_unicode_and_deep_json_always_get_a_result_and_the_server_survives(
    calculator, name, expression, extra, noise
):
    arguments = '{"expression": ' + json.dumps(expression, ensure_ascii=False)
    arguments += (', "extra": ' + extra if extra is not None else "") + "}"
    text = f'{noise}<tool_call>{{"name": {json.dumps(name)}, "arguments": {arguments}}}</tool_call>{noise}'
    parsed = get_parser("qwen3").parse(text)
    requests = [(call.name, call.arguments) for call in parsed.calls] + [(name, arguments)]
    for request_name, request_arguments in requests:
        started = time.perf_counter()
        result = calculator.call_sync(request_name, request_arguments)
        assert isinstance(result, ToolResult) and result.status != "timeout", result
        assert time.perf_counter() - started < TIMEOUT_S
        result.content.encode("utf-8")  # whatever the model sent, it reads back valid text
    assert_still_serving(calculator)
