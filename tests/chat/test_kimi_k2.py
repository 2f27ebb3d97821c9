"""The kimi_k2 family (Kimi-K2-Thinking's template): calls rendered by the reference template parse
back; truncated, malformed and hostile text never yields a wrong call; a 3-turn rollout equals the
full render. The template writes an empty think block for every turn up to the last answer without
calls, so a rollout equals the render when its turns do not reason; one whose turns reason differs
where the render dropped the reasoning (the drift check reports it)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rlfactory_nb.chat import detect_chat_format, get_chat_format, get_parser
from tests.chat import conformance
from tests.chat.templates import TemplateOnly, render, template_text

END = "<|im_end|>"
MARKERS = ["<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
           "<|tool_call_argument_begin|>", "<|tool_call_end|>"]
ADDED = [("[BOS]", True), ("[EOS]", True), (END, True), ("<|im_user|>", True), ("<|im_assistant|>", True),
         ("<|im_system|>", True), ("<|im_middle|>", True), ("<think>", True), ("</think>", True),
         *((m, True) for m in MARKERS)]
WEATHER = ("get_weather", {"city": "Paris"})
TIME = ("get_time", {"zone": "Europe/Paris"})
NESTED = ("search", {"query": "café 東京 🚀 \"quoted\"", "filters": {"tags": ["a", "b"], "limit": 3}, "exact": True})
MARKERS_AS_DATA = ("write_file", {"text": "ends with <|tool_call_end|><|tool_calls_section_end|> and </think>"})
CASES = {
    "single": ([WEATHER], "", ""),
    "parallel": ([WEATHER, TIME], "", ""),
    "no arguments": ([("now", {})], "", ""),
    "nested and unicode": ([NESTED], "", ""),
    "markers inside a value": ([MARKERS_AS_DATA], "", ""),
    "text before the call": ([WEATHER], "Let me look that up.", ""),
    "with reasoning": ([WEATHER], "Checking.", "The user wants the weather in Paris."),
}
USER = {"role": "user", "content": "What is the weather in Paris?"}
PARSER = get_parser("kimi_k2")
CALL = "<|tool_calls_section_begin|><|tool_call_begin|>{}<|tool_call_end|><|tool_calls_section_end|>"


def sampled_turn(calls: list[tuple[str, dict]], content: str, reasoning: str) -> str:
    """The call turn as the template renders it after the generation prompt, up to <|im_end|>."""
    message: dict[str, Any] = {"role": "assistant", "content": content, "reasoning_content": reasoning}
    message["tool_calls"] = [{"id": f"functions.{n}:{i}", "type": "function", "function": {"name": n, "arguments": a}}
                             for i, (n, a) in enumerate(calls)]
    template = template_text("kimi_k2")
    prompt = render(template, [USER], add_generation_prompt=True)
    full = render(template, [USER, message])
    assert full.startswith(prompt)
    return full[len(prompt):].split(END)[0]


@pytest.mark.parametrize("case", list(CASES))
def test_rendered_turn_parses_back(case: str) -> None:
    calls, content, reasoning = CASES[case]
    text = sampled_turn(calls, content, reasoning)
    result = PARSER.parse(text)
    assert [(c.name, c.arguments) for c in result.calls] == calls, text
    assert (result.errors, result.answer, result.reasoning, result.calls_in_reasoning) == ([], content, reasoning, 0)
    message = get_chat_format("kimi_k2").assistant_message(text, result.calls, result.reasoning)
    assert [c["id"] for c in message["tool_calls"]] == [f"functions.{n}:{i}" for i, (n, _) in enumerate(calls)]


def test_prompt_does_not_prefill_reasoning_and_auto_picks_kimi_k2() -> None:
    prompt = render(template_text("kimi_k2"), [USER], add_generation_prompt=True, enable_thinking=True)
    assert prompt.endswith("<think>") == get_chat_format("kimi_k2").prefills_reasoning
    assert detect_chat_format(TemplateOnly(template_text("kimi_k2"))).name == "kimi_k2"


def test_truncated_at_every_token_never_yields_a_partial_call() -> None:
    tokenizer = conformance.family_tokenizer("kimi_k2", ADDED, "[EOS]", bos_token="[BOS]")
    text = sampled_turn([NESTED], "Let me search.", "Search it.")
    complete, opened = text.index("<|tool_call_end|>") + 1, text.index("<|tool_calls_section_begin|>") + 1
    for cut in conformance.truncations(text, tokenizer):
        result = PARSER.parse(cut)
        if len(cut) >= complete:
            assert [(c.name, c.arguments) for c in result.calls] == [NESTED], cut
        else:
            assert result.calls == [] and bool(result.errors) == (len(cut) >= opened), cut


@pytest.mark.parametrize(
    "body, says",
    [
        ('functions.get_weather:0{"city": "Paris"}', "before <|tool_call_argument_begin|>"),
        ('functions.get_weather:0<|tool_call_argument_begin|>{"city": Paris}', "not valid JSON"),
        ('functions.get_weather:0<|tool_call_argument_begin|>"Paris"', "must be a JSON object"),
        ('functions.{"a": 1}:0<|tool_call_argument_begin|>{}', "not a plain name"),
        ('functions.get_weather:0<|tool_call_argument_begin|>{} more', "Expected <|tool_call_end|>"),
    ],
)
def test_malformed_call_is_an_error_and_no_call(body: str, says: str) -> None:
    result = PARSER.parse("<think></think>Sure." + CALL.format(body))
    assert result.calls == [] and len(result.errors) == 1, result.errors
    assert says in result.errors[0].message and "functions.TOOL_NAME:INDEX" in result.errors[0].message


def test_broken_calls_and_drafts_in_reasoning_are_not_run() -> None:
    good = "<|tool_call_begin|>functions.now:1<|tool_call_argument_begin|>{}<|tool_call_end|>"
    broken = "<|tool_call_begin|>functions.x:0<|tool_call_argument_begin|>{bad"
    result = PARSER.parse(f"<think></think><|tool_calls_section_begin|>{broken}{good}<|tool_calls_section_end|>")
    assert [c.name for c in result.calls] == ["now"] and len(result.errors) == 1
    draft = PARSER.parse(f"<think>maybe {CALL.format('functions.f:0<|tool_call_argument_begin|>{}')}</think>No call.")
    assert draft.calls == [] and draft.calls_in_reasoning == 1 and draft.answer == "No call."


HOSTILE = {
    "unclosed section": lambda n: "<|tool_calls_section_begin|>" + "x" * n,
    "nested brackets": lambda n: CALL.format("functions.f:0<|tool_call_argument_begin|>" + "[" * n),
    "lone surrogates": lambda n: CALL.format("functions.\ud800:0<|tool_call_argument_begin|>{\"\udfff\": \"\ud83d\"}") * (n // 60),
    "markers in arguments": lambda n: CALL.format('functions.f:0<|tool_call_argument_begin|>{"a": "' + "<|tool_call_end|>" * (n // 17) + '"}'),
    "many openers": lambda n: "<|tool_calls_section_begin|><|tool_call_begin|>" * (n // 47),
    "unterminated strings": lambda n: "<|tool_calls_section_begin|>" + '<|tool_call_begin|>f<|tool_call_argument_begin|>{"a": "\\"' * (n // 50),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_text_is_bounded_and_linear(case: str) -> None:
    result = conformance.assert_bounded(PARSER, HOSTILE[case](100_000))
    assert len(result.calls) <= 8 and len(result.errors) <= 9
    conformance.assert_linear(PARSER, HOSTILE[case])


def test_ten_megabytes_of_markers_stay_bounded() -> None:
    conformance.assert_bounded(PARSER, "".join(MARKERS) * 80_000)


def turn(index: int, call: tuple[str, dict] | None, answer: str = "") -> tuple[str, str]:
    if call is None:
        return f"<think></think>{answer}", END
    name, arguments = call
    return f"<think></think>{answer}" + CALL.format(f"functions.{name}:{index}<|tool_call_argument_begin|>{json.dumps(arguments)}"), END


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return conformance.family_tokenizer("kimi_k2", ADDED, "[EOS]", bos_token="[BOS]")


async def test_rollout_equals_the_full_render(tokenizer) -> None:
    turns = [turn(0, WEATHER, "Checking."), turn(1, ("get_time", {"zone": "CET"})), turn(2, None, "Sunny, 12:00.")]
    traj = await conformance.rollout_against_render(tokenizer, "kimi_k2", turns)
    assert traj.metadata["drift_position"] == -1 and traj.num_turns == 3
    assert [c.name for c in traj.tool_calls()] == ["get_weather", "get_time"]
    assert conformance.final_answer(traj) == "Sunny, 12:00."


def test_one_grpo_step(tokenizer, tmp_path) -> None:
    conformance.train_one_step(tokenizer, tmp_path)
