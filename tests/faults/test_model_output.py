"""Untrusted model output: empty, cut off, malformed, unknown tools, wrong argument types, calls in
think blocks, call floods, and random text. Each becomes a ToolResult or a MalformedCall the model reads,
is counted in the rollout metrics, and nothing raises (property tests feed the parser and the whole
agent loop with random and adversarial text)."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rollout.scripted import ScriptedEngine

from rlfactory_nb.chat import ParseResult, get_parser
from rlfactory_nb.rollout.agent import Agent
from rlfactory_nb.tools import ToolSet, tool
from rlfactory_nb.train.metrics import rollout_metrics

from .conftest import CALL

pytestmark = pytest.mark.timeout(120)

CALC = '{"name": "calculator", "arguments": {"expression": "12*3"}}'
CALCULATOR = {"servers": [{"name": "calculator", "command": "python", "args": ["-m", "rlfactory_nb.tools.servers.calculator"]}]}


def block(body: str) -> str:
    return f"<tool_call>\n{body}\n</tool_call>"


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def run(tokenizer, tools, first_reply: str, **options):
    """One rollout whose first assistant turn is `first_reply` and whose second is a plain answer."""
    engine = ScriptedEngine(tokenizer, {"q": [first_reply, "<answer>3</answer>"]})
    agent = Agent(None, tools, engine=engine, tokenizer=tokenizer, drift="off", **options)
    return agent.rollout([{"role": "user", "content": "q"}])


# -- each kind of bad output, through the agent loop ----------------------------------------------

BAD_OUTPUTS = [
    # (id, first reply, tool statuses, parse errors, what the model is told)
    ("empty generation", "", [], 0, None),
    ("unterminated call", '<tool_call>\n{"name": "add", "arguments": {"a": 1', [], 1, "ended inside a <tool_call> block"),
    ("invalid JSON", block('{"name": "add", "arguments": {"a": 1, "b": }}'), [], 1, "not valid JSON"),
    ("arguments not an object", block('{"name": "add", "arguments": [1, 2]}'), [], 1, '"arguments" must be a JSON object'),
    ("unknown tool", CALL.format(name="weather", args='{"city": "Paris"}'), ["unknown_tool"], 0, "unknown tool 'weather'"),
    ("wrong argument type", CALL.format(name="add", args='{"a": "one", "b": 2}'), ["invalid_args"], 0, "'a': 'one' is not of type 'integer'"),
    ("missing argument", CALL.format(name="add", args='{"a": 1}'), ["invalid_args"], 0, "'b' is a required property"),
    ("call inside think", "<think>" + CALL.format(name="add", args='{"a": 1, "b": 2}') + "</think>", [], 0, None),
]


@pytest.mark.parametrize("first_reply, statuses, errors, told", [case[1:] for case in BAD_OUTPUTS], ids=[c[0] for c in BAD_OUTPUTS])
async def test_bad_output_becomes_a_result_or_parse_error_the_model_reads(tokenizer, first_reply, statuses, errors, told):
    async with ToolSet.from_functions(add) as tools:
        traj = await run(tokenizer, tools, first_reply)
    turn = traj.turns[0]
    assert [r.status for r in turn.results] == statuses and len(turn.parse_errors) == errors
    tool_messages = [m["content"] for m in traj.messages if m["role"] == "tool"]
    if told is None:  # nothing to answer: the text is the final answer
        assert tool_messages == [] and traj.finish_reason == "stop" and traj.num_turns == 1
    else:
        assert len(tool_messages) == 1 and told in tool_messages[0], tool_messages
        assert traj.num_turns == 2 and traj.finish_reason == "stop", "the model got a second turn"
    metrics = rollout_metrics([traj])
    assert metrics["rollout/parse_errors"] == errors
    for status in statuses:
        assert metrics[f"tools/status/{status}"] == 1
    assert sum(traj.loss_mask) == len(traj.logprobs)


async def test_parse_errors_and_unknown_tools_are_shown_to_the_model(tokenizer):
    bad = '<tool_call>\n{"name": "calculator", "arguments": {"expression": }\n</tool_call>'
    unknown = CALL.format(name="weather", args='{"city": "Paris"}')
    engine = ScriptedEngine(tokenizer, {"go": [bad + unknown, "<answer>?</answer>"]})
    async with ToolSet.from_config(CALCULATOR) as tools:
        traj = await Agent(None, tools, engine=engine, tokenizer=tokenizer).rollout([{"role": "user", "content": "go"}])
    first = traj.turns[0]
    assert len(first.parse_errors) == 1 and [r.status for r in first.results] == ["unknown_tool"]
    tool_messages = [m["content"] for m in traj.messages if m["role"] == "tool"]
    assert len(tool_messages) == 2 and "weather" in tool_messages[0] and "JSON" in tool_messages[1]
    assert traj.finish_reason == "stop"


def test_calls_over_the_cap_become_one_error() -> None:
    text = "".join(block(f'{{"name": "t{i}", "arguments": {{}}}}') for i in range(5))
    result = get_parser("qwen3", max_calls=3).parse(text)
    assert [c.name for c in result.calls] == ["t0", "t1", "t2"]
    assert len(result.errors) == 1
    assert "5 tool calls in one turn; only the first 3 were run" in result.errors[0].message
    assert "t3" in result.errors[0].raw and "t4" in result.errors[0].raw


def test_default_cap_is_eight() -> None:
    text = "".join(block('{"name": "t", "arguments": {}}') for _ in range(9))
    result = get_parser("qwen3").parse(text)
    assert len(result.calls) == 8 and len(result.errors) == 1


# -- property tests: the parser ----------------------------------------------------------------------

FRAGMENTS = [
    "<tool_call>", "</tool_call>", "<think>", "</think>", "\n", " ", "{", "}", "[", "]", ",", ":", '"',
    '"name"', '"arguments"', '"calculator"', '{"expression": "1+2"}', '"{\\"a\\": 1}"', "null", "1e999",
    "NaN", "\\u", "東京", "🌧", CALC, "<tool_call>" + CALC,
]


def check_result(result: ParseResult, text: str, max_calls: int = 8) -> None:
    assert isinstance(result.content, str)
    assert len(result.calls) <= max_calls
    for call in result.calls:
        assert isinstance(call.name, str) and call.name.strip() == call.name and call.name
        assert isinstance(call.arguments, dict)
        assert call.raw in text
    for error in result.errors:
        assert isinstance(error.message, str) and error.message
    if "<tool_call>" not in text:
        assert result.calls == [] and result.errors == [] and result.content == text.strip()


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_random_text_never_raises(text: str) -> None:
    check_result(get_parser("qwen3").parse(text), text)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=5)), max_size=40), st.booleans())
def test_random_tag_and_json_mixes_never_raise(pieces: list[str], calls_in_think: bool) -> None:
    text = "".join(pieces)
    check_result(
        get_parser("qwen3", calls_in_think=calls_in_think, max_calls=3).parse(text), text, max_calls=3
    )


@settings(max_examples=100, deadline=None)
@given(
    st.text(min_size=1).filter(lambda name: name.strip() == name and "<" not in name),
    st.dictionaries(st.text(), st.one_of(st.integers(), st.text(), st.none(), st.floats(allow_nan=False))),
)
def test_any_well_formed_call_round_trips(name: str, arguments: dict) -> None:
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    if "<tool_call>" in body or "</tool_call>" in body or "think>" in body:
        return
    result = get_parser("qwen3").parse(block(body))
    assert [(c.name, c.arguments) for c in result.calls] == [(name, arguments)]


# -- property test: the whole agent loop ---------------------------------------------------------------

ADVERSARIAL = [
    *FRAGMENTS,
    CALL.format(name="add", args='{"a": 1, "b": 2}'),
    CALL.format(name="add", args='{"a": 1e309, "b": -0}'),
    CALL.format(name="add", args='{"a": [[[[[]]]]], "b": {"__class__": 1}}'),
    CALL.format(name="__import__('os').system('id')", args="{}"),
    block('{"name": "add", "arguments": "{\\"a\\": 1, \\"b\\": 2}"}'),
    "[" * 2000,
    "<|im_end|>", "<|im_start|>user\n", "<tool_response>", "</tool_response>", "\x00",
]
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=8)
"""text a tokenizer can encode (a model emits token ids, which never decode to lone surrogates)"""


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.sampled_from(ADVERSARIAL), TEXT), max_size=12))
def test_the_agent_loop_survives_any_model_output(tokenizer, pieces: list[str]) -> None:
    text = "".join(pieces)

    async def rollout():
        async with ToolSet.from_functions(add) as tools:
            return await run(tokenizer, tools, text, max_turns=3, max_new_tokens=4096, max_total_tokens=8192)

    traj = asyncio.run(rollout())
    assert traj.finish_reason in ("stop", "length", "max_turns") and 1 <= traj.num_turns <= 3
    assert sum(traj.loss_mask) == len(traj.logprobs) and len(traj.loss_mask) == len(traj.response_ids)
    turn = traj.turns[0]
    answered = [m for m in traj.messages if m["role"] == "tool"]
    if traj.num_turns > 1:  # every call and every broken block got an answer the model read
        assert len(answered) >= len(turn.results) + len(turn.parse_errors)
    metrics = rollout_metrics([traj])
    assert metrics["rollout/parse_errors"] == sum(len(t.parse_errors) for t in traj.turns)


class RandomIdsEngine:
    """Samples the given token ids as the model's output: what an untrained policy really emits,
    special tokens included."""

    def __init__(self, tokenizer, turns: list[list[int]]):
        self.turns, self.stop_token_ids = iter(turns), (tokenizer.eos_token_id,)

    async def generate(self, prompt_ids, sampling):
        from rlfactory_nb.engines.base import Generation

        ids = next(self.turns, [])[: sampling.max_new_tokens]
        return Generation(ids, [-1.0] * len(ids), "length" if len(ids) == sampling.max_new_tokens else "stop")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.data())
def test_the_agent_loop_survives_random_token_ids(tokenizer, data) -> None:
    vocab = len(tokenizer)
    turns = data.draw(st.lists(st.lists(st.integers(0, vocab - 1), max_size=60), min_size=1, max_size=3))

    async def rollout():
        async with ToolSet.from_functions(add) as tools:
            agent = Agent(None, tools, engine=RandomIdsEngine(tokenizer, turns), tokenizer=tokenizer,
                          drift="off", max_turns=3, max_new_tokens=64, max_total_tokens=4096)
            return await agent.rollout([{"role": "user", "content": "q"}])

    traj = asyncio.run(rollout())
    assert traj.finish_reason in ("stop", "length", "max_turns")
    assert sum(traj.loss_mask) == len(traj.logprobs)
