"""The glm4_7 family (GLM-4.7, compact calls with no newlines): turns the reference template renders
parse back to the same calls, answer and reasoning, a rollout equals the full render with thinking
on (pre-filled `<think>`) and off, `auto` tells GLM-4.7 from GLM-4.5, values are typed by the
schema, and hostile compact text never raises and stays linear."""

from __future__ import annotations

from typing import Any

import pytest

from rlfactory_nb.chat import detect_chat_format, get_chat_format, get_parser
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.rollout.tokens import delta_text
from rlfactory_nb.types import ToolSpec
from tests.chat import conformance
from tests.chat.encoders import template_file
from tests.chat.templates import TemplateOnly, render, template_text

NAME = "glm4_7"
TEMPLATE = "glm4_7_flash.jinja"
WEATHER = ("get_weather", {"city": "Paris"})
NESTED = ("search", {"query": "café 東京 🚀 \"quoted\"", "filters": {"tags": ["a", "b"], "limit": 3}, "exact": True})
MARKERS_AS_DATA = ("write_file", {"path": "docs.md", "text": "Calls end with </tool_call>; <arg_key> and <think> too."})
CASES = {
    "single": ([WEATHER], "", ""),
    "parallel": ([WEATHER, ("get_time", {"zone": "Europe/Paris"})], "", ""),
    "no arguments": ([("now", {})], "", ""),
    "nested and unicode": ([NESTED], "", ""),
    "markers inside a value": ([MARKERS_AS_DATA], "", ""),
    "text before the call": ([WEATHER], "Let me look that up.", ""),
    "with reasoning": ([WEATHER], "Checking.", "The user wants the weather in Paris."),
    "answer only, with reasoning": ([], "It is sunny.", "I know this one."),
}
USER = {"role": "user", "content": "What is the weather in Paris?"}
ROLES = ["[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>", "<|endoftext|>"]
MARKERS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
           "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"]


def glm_tokenizer() -> Any:
    added = [(t, True) for t in ROLES] + [(t, False) for t in MARKERS]
    return build_tokenizer(added_tokens=added, eos_token="<|endoftext|>", template=template_file(TEMPLATE))


def sampled_turn(calls: list[tuple[str, dict]], content: str, reasoning: str) -> str:
    """The full render minus the generation prompt (thinking on when the turn has reasoning)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [{"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls]
    if reasoning:
        message["reasoning_content"] = reasoning
    template, thinking = template_file(TEMPLATE), bool(reasoning)
    prompt = render(template, [USER], add_generation_prompt=True, enable_thinking=thinking)
    full = render(template, [USER, message], enable_thinking=thinking)
    assert full.startswith(prompt), "the template renders the turn after its own generation prompt"
    return full[len(prompt) :]


@pytest.mark.parametrize("case", list(CASES))
def test_rendered_turn_parses_back(case: str) -> None:
    calls, content, reasoning = CASES[case]
    text = sampled_turn(calls, content, reasoning)
    assert "\n" not in text.replace(NESTED[1]["query"], ""), "GLM-4.7 writes calls with no newlines"
    result = get_chat_format(NAME).new_parser(starts_in_reasoning=bool(reasoning)).parse(text)
    assert [(c.name, c.arguments) for c in result.calls] == calls, text
    assert result.errors == [] and (result.answer, result.reasoning) == (content, reasoning)


def test_the_record_matches_the_template_and_auto_tells_it_from_glm4_5() -> None:
    template, fmt = template_file(TEMPLATE), get_chat_format(NAME)
    prompt = render(template, [USER], add_generation_prompt=True, enable_thinking=True)
    assert prompt.endswith(fmt.reasoning.open) == fmt.prefills_reasoning
    assert detect_chat_format(TemplateOnly(template)).name == NAME
    assert detect_chat_format(TemplateOnly(template_text("glm4_5"))).name == "glm4_5"


def test_the_delta_after_a_call_starts_after_the_sampled_observation_token() -> None:
    delta = delta_text(glm_tokenizer(), [{"role": "tool", "content": "sunny"}], False, get_chat_format(NAME))
    assert delta == "<tool_response>sunny</tool_response><|assistant|></think>"


def test_truncated_at_every_token_never_yields_a_partial_call() -> None:
    text = sampled_turn([NESTED, WEATHER], "Let me search.", "Search it.")
    parser = get_chat_format(NAME).new_parser(starts_in_reasoning=True)
    for cut in conformance.truncations(text, glm_tokenizer()):
        result = parser.parse(cut)
        complete = cut.count("</tool_call>")
        assert [(c.name, c.arguments) for c in result.calls] == [NESTED, WEATHER][:complete], cut
        if "</think>" not in cut:
            assert (result.answer, result.reasoning) == ("", cut.strip()), "a turn cut inside reasoning"


def test_values_are_typed_by_the_schema_when_given() -> None:
    text = "<tool_call>label<arg_key>text</arg_key><arg_value>3</arg_value><arg_key>n</arg_key><arg_value>7</arg_value></tool_call>"
    schema = {"type": "object", "properties": {"text": {"type": "string"}, "n": {"type": "number"}}}
    assert get_parser(NAME).parse(text).calls[0].arguments == {"text": 3, "n": 7}, "without schemas: as JSON reads"
    assert get_parser(NAME).parse(text, tools=[ToolSpec("label", "", schema)]).calls[0].arguments == {"text": "3", "n": 7}


HOSTILE = {
    "10 MB of openers": lambda n: "<tool_call>" * (n // 11),
    "compact keys without values": lambda n: "<tool_call>f" + "<arg_key>a</arg_key>" * (n // 20),
    "lone surrogates": lambda n: "<tool_call>\ud800<arg_key>\udfff</arg_key><arg_value>\ud83d</arg_value></tool_call>" * (n // 70),
    "markers inside an argument": lambda n: "<tool_call>f<arg_key>a</arg_key><arg_value>" + "</tool_call><tool_call>" * (n // 23) + "</arg_value></tool_call>",
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_text_is_bounded_and_linear(case: str) -> None:
    make = HOSTILE[case]
    size = 10_000_000 if case == "10 MB of openers" else 1_000_000
    result = conformance.assert_bounded(get_parser(NAME), make(size), seconds=30.0)
    assert len(result.calls) <= 8 and len(result.errors) <= 9
    conformance.assert_linear(get_parser(NAME), make, n=100_000)  # large enough to time above a loaded machine's noise


def _turns(thinking: bool) -> list[tuple[str, str]]:
    think = lambda text: f"{text}</think>" if thinking else ""
    weather = "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>"
    time = "Now the time.<tool_call>get_time<arg_key>zone</arg_key><arg_value>Europe/Paris</arg_value></tool_call>"
    return [
        (think("I need the weather.") + weather, "<|observation|>"),
        (think("Now the time.") + time, "<|observation|>"),
        (think("Both known.") + "It is sunny in Paris, and 12:00.", "<|user|>"),
    ]


@pytest.mark.parametrize("thinking", [False, True])
async def test_rollout_equals_the_full_render(thinking: bool) -> None:
    traj = await conformance.rollout_against_render(glm_tokenizer(), "auto", _turns(thinking), enable_thinking=thinking)
    assert traj.num_turns == 3 and traj.metadata["drift_position"] == -1
    assert [c.name for t in traj.turns for c in t.calls] == ["get_weather", "get_time"]
    assert conformance.final_answer(traj) == "It is sunny in Paris, and 12:00."
    assert traj.turns[0].reasoning == ("I need the weather." if thinking else "")


@pytest.mark.slow
def test_one_grpo_step(tmp_path) -> None:
    conformance.train_one_step(glm_tokenizer(), tmp_path)
