"""The deepseek_v3 family (DeepSeek-V3 via vLLM's template, R1, V3.1): calls rendered by each reference
template parse back; truncated, malformed and hostile text never yields a wrong call; rollouts.

What a rollout can be held to differs per template. V3.1 (non-thinking): the ids equal the full
render. R1: equal for one call turn then the answer (its template renders a second call turn without
`<｜tool▁calls▁begin｜>`, so two call turns drift, reported). vLLM's V3 template is not
prefix-preserving (a newline after the generation prompt, leaked indentation), so there the ids equal
the full render once whitespace is removed."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from rlfactory_nb.chat import detect_chat_format, get_chat_format, get_parser
from rlfactory_nb.rollout.agent import Agent
from tests.chat import conformance
from tests.chat.templates import TemplateOnly, render, template_text

TEMPLATES = ["deepseek_v3", "deepseek_r1", "deepseek_v3_1"]
EOS = "<｜end▁of▁sentence｜>"
MARKERS = ["<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>",
           "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>"]
ADDED = [("<｜begin▁of▁sentence｜>", True), (EOS, True), ("<｜User｜>", False), ("<｜Assistant｜>", False),
         ("<think>", False), ("</think>", False), *((m, False) for m in MARKERS)]
WEATHER = ("get_weather", {"city": "Paris"})
TIME = ("get_time", {"zone": "Europe/Paris"})
NESTED = ("search", {"query": "café 東京 🚀 \"quoted\"", "filters": {"tags": ["a", "b"], "limit": 3}, "exact": True})
MARKERS_AS_DATA = ("write_file", {"text": "ends with <｜tool▁call▁end｜><｜tool▁calls▁end｜>\n```\n} and <think>"})
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
PARSER = get_parser("deepseek_v3")


def message(name: str, calls: list[tuple[str, dict]], content: str, reasoning: str) -> dict[str, Any]:
    """The assistant message each template reads: R1 always thinks (its prompt opens <think>), V3.1
    thinks when asked; R1 and V3.1 take arguments as a JSON string."""
    if name == "deepseek_r1" or reasoning:
        content = f"{reasoning}\n</think>\n\n{content}"
    as_text = name != "deepseek_v3"
    tool_calls = [{"type": "function", "function": {"name": n, "arguments": json.dumps(a, ensure_ascii=False) if as_text else a}}
                  for n, a in calls]
    return {"role": "assistant", "content": content, "tool_calls": tool_calls}


def sampled_turn(name: str, calls: list[tuple[str, dict]], content: str, reasoning: str) -> tuple[str, bool]:
    """The sampled part of the render (after <｜Assistant｜> and V3.1's </think>, up to the end of
    sentence) and whether the prompt pre-filled <think>."""
    template = template_text(name)
    full = render(template, [USER, message(name, calls, content, reasoning)], bos_token="")
    head = "<｜Assistant｜></think>" if name == "deepseek_v3_1" else "<｜Assistant｜>"
    return full.split(head, 1)[1].split(EOS)[0], name == "deepseek_r1" or bool(reasoning)


@pytest.mark.parametrize("name", TEMPLATES)
@pytest.mark.parametrize("case", list(CASES))
def test_rendered_turn_parses_back(name: str, case: str) -> None:
    calls, content, reasoning = CASES[case]
    if reasoning and name == "deepseek_v3":
        pytest.skip("DeepSeek-V3 writes no reasoning")
    text, prefilled = sampled_turn(name, calls, content, reasoning)
    result = get_parser("deepseek_v3", starts_in_reasoning=prefilled).parse(text)
    assert [(c.name, c.arguments) for c in result.calls] == calls, text
    assert (result.errors, result.answer, result.reasoning, result.calls_in_reasoning) == ([], content, reasoning, 0)


@pytest.mark.parametrize("name", ["deepseek_r1", "deepseek_v3_1"])
def test_history_renders_the_turn_as_sampled(name: str) -> None:
    """The record's assistant_message gives R1 and V3.1 the arguments text as sampled (not a dict)."""
    text, prefilled = sampled_turn(name, [NESTED, WEATHER], "Looking.", "")
    chat_format = get_chat_format("deepseek_v3")
    history = chat_format.assistant_message(text, chat_format.new_parser(starts_in_reasoning=prefilled).parse(text).calls, "")
    assert render(template_text(name), [USER, history]).split(EOS)[0].endswith(text)


@pytest.mark.parametrize("name, prefills", [("deepseek_v3", False), ("deepseek_r1", True), ("deepseek_v3_1", True)])
def test_the_generation_prompt_prefills_reasoning_where_the_record_says(name: str, prefills: bool) -> None:
    prompt = render(template_text(name), [USER], add_generation_prompt=True, enable_thinking=True)
    assert prompt.rstrip().endswith("<think>") == prefills
    assert get_chat_format("deepseek_v3").prefills_reasoning, "R1 and V3.1 pre-fill; the agent reads V3's prompt"


@pytest.mark.parametrize("name", TEMPLATES)
def test_auto_picks_deepseek_v3(name: str) -> None:
    assert detect_chat_format(TemplateOnly(template_text(name))).name == "deepseek_v3"


@pytest.mark.parametrize("name", ["deepseek_r1", "deepseek_v3_1"])
def test_truncated_at_every_token_never_yields_a_partial_call(name: str) -> None:
    tokenizer = conformance.family_tokenizer(name, ADDED, EOS)
    text, prefilled = sampled_turn(name, [NESTED], "Let me search.", "")
    parser = get_parser("deepseek_v3", starts_in_reasoning=prefilled)
    complete, opened = text.index("<｜tool▁call▁end｜>") + 1, text.index("<｜tool▁calls▁begin｜>") + 1
    for cut in conformance.truncations(text, tokenizer):
        result = parser.parse(cut)
        if len(cut) >= complete:
            assert [(c.name, c.arguments) for c in result.calls] == [NESTED], cut
        else:
            assert result.calls == [] and bool(result.errors) == (len(cut) >= opened), cut


CALL = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"


@pytest.mark.parametrize(
    "body, says",
    [
        ('get_weather {"city": "Paris"}', "before <｜tool▁sep｜>"),
        ('get_weather<｜tool▁sep｜>{"city": Paris}', "not valid JSON"),
        ('get_weather<｜tool▁sep｜>["Paris"]', "must be a JSON object"),
        ('{"a": 1}<｜tool▁sep｜>{"city": "Paris"}', "not a plain name"),
        ('tool<｜tool▁sep｜>get_weather\n```json\n{"city": "Paris"}\n```', "not valid JSON"),
        ('function<｜tool▁sep｜>get_weather\n{"city": "Paris"}', "```json fence"),
        ('function<｜tool▁sep｜>get_weather\n```json\n{"city": "Paris"}\n', "Expected ``` after the arguments"),
        ('get_weather<｜tool▁sep｜>{"city": "Paris"} trailing', "Expected <｜tool▁call▁end｜>"),
    ],
)
def test_malformed_call_is_an_error_and_no_call(body: str, says: str) -> None:
    result = PARSER.parse("Sure. " + CALL.format(body))
    assert result.calls == [] and len(result.errors) == 1, result.errors
    assert says in result.errors[0].message and "```json" in result.errors[0].message, "shows the format"


def test_a_broken_call_does_not_swallow_the_next_one_nor_a_call_in_reasoning() -> None:
    good = '<｜tool▁call▁begin｜>now<｜tool▁sep｜>{}<｜tool▁call▁end｜>'
    result = PARSER.parse(f"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>x<｜tool▁sep｜>{{bad{good}<｜tool▁calls▁end｜>")
    assert [c.name for c in result.calls] == ["now"] and len(result.errors) == 1
    draft = get_parser("deepseek_v3", starts_in_reasoning=True).parse(f"maybe {CALL.format('f<｜tool▁sep｜>{}')}</think>ok")
    assert draft.calls == [] and draft.calls_in_reasoning == 1 and draft.answer == "ok"


HOSTILE = {
    "unclosed section": lambda n: "<｜tool▁calls▁begin｜>" + "x" * n,
    "nested brackets": lambda n: CALL.format("f<｜tool▁sep｜>" + "[" * n),
    "lone surrogates": lambda n: CALL.format("\ud800<｜tool▁sep｜>{\"\udfff\": \"\ud83d\"}") * (n // 50),
    "markers in arguments": lambda n: CALL.format("f<｜tool▁sep｜>{\"a\": \"" + "<｜tool▁call▁end｜>" * (n // 18) + "\"}"),
    "many openers": lambda n: "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>" * (n // 38),
    "names without sep": lambda n: "<｜tool▁calls▁begin｜>" + "<｜tool▁call▁begin｜>f" * (n // 20),
    "unterminated strings": lambda n: "<｜tool▁calls▁begin｜>" + "<｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\": \"\\\"" * (n // 30),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_text_is_bounded_and_linear(case: str) -> None:
    result = conformance.assert_bounded(PARSER, HOSTILE[case](100_000))
    assert len(result.calls) <= 8 and len(result.errors) <= 9
    conformance.assert_linear(PARSER, HOSTILE[case])


def test_ten_megabytes_of_markers_stay_bounded() -> None:
    conformance.assert_bounded(PARSER, "".join(MARKERS[:5]) * 250_000)


def turn(call: tuple[str, dict] | None, reasoning: str = "", answer: str = "", fenced: bool = False) -> tuple[str, str]:
    if call is None:
        return f"{reasoning}{answer}", EOS
    name, arguments = call
    body = f"function<｜tool▁sep｜>{name}\n```json\n{json.dumps(arguments)}\n```" if fenced else f"{name}<｜tool▁sep｜>{json.dumps(arguments)}"
    return f"{reasoning}{answer}{CALL.format(body)}", EOS


async def test_v3_1_rollout_equals_the_full_render() -> None:
    tokenizer = conformance.family_tokenizer("deepseek_v3_1", ADDED, EOS, bos_token="<｜begin▁of▁sentence｜>")
    turns = [turn(WEATHER, answer="Checking."), turn(("get_time", {"zone": "CET"})), turn(None, answer="Sunny, 12:00.")]
    traj = await conformance.rollout_against_render(tokenizer, "deepseek_v3", turns)
    assert traj.metadata["drift_position"] == -1 and traj.num_turns == 3
    assert conformance.final_answer(traj) == "Sunny, 12:00."


async def test_r1_rollout_equals_the_full_render_for_one_call_turn() -> None:
    tokenizer = conformance.family_tokenizer("deepseek_r1", ADDED, EOS, bos_token="<｜begin▁of▁sentence｜>")
    both = CALL.format("\n<｜tool▁call▁begin｜>".join(
        f"function<｜tool▁sep｜>{n}\n```json\n{json.dumps(a)}\n```<｜tool▁call▁end｜>" for n, a in [WEATHER, TIME]
    ).removesuffix("<｜tool▁call▁end｜>"))
    turns = [(f"Two tools.\n</think>\n\n{both}", EOS), turn(None, "<think>\nBoth answered.\n</think>\n\n", "Sunny, 12:00.")]
    traj = await conformance.rollout_against_render(tokenizer, "deepseek_v3", turns)
    assert traj.metadata["drift_position"] == -1 and [c.name for c in traj.tool_calls()] == ["get_weather", "get_time"]
    assert conformance.final_answer(traj) == "Sunny, 12:00."


async def test_v3_rollout_equals_the_full_render_but_for_whitespace() -> None:
    tokenizer = conformance.family_tokenizer("deepseek_v3", ADDED, EOS, bos_token="<｜begin▁of▁sentence｜>")
    turns = [turn(WEATHER, fenced=True), turn(TIME, fenced=True), turn(None, answer="Sunny, 12:00.")]
    engine = conformance.ReplayEngine(tokenizer, turns)
    agent = Agent(None, None, engine=engine, tokenizer=tokenizer, max_turns=3, drift="warn")
    traj = await agent.rollout([USER])
    assert traj.num_turns == 3 and [c.name for c in traj.tool_calls()] == ["get_weather", "get_time"]
    sampled = tokenizer.decode([i for i, m in zip(traj.response_ids, traj.loss_mask) if m])
    assert sampled == "".join(text + end for text, end in turns)
    rendered = render(template_text("deepseek_v3"), traj.messages, bos_token="<｜begin▁of▁sentence｜>")
    squeeze = re.compile(r"\s+")
    assert squeeze.sub("", tokenizer.decode(traj.prompt_ids + traj.response_ids)) == squeeze.sub("", rendered)


def test_one_grpo_step(tmp_path) -> None:
    tokenizer = conformance.family_tokenizer("deepseek_v3_1", ADDED, EOS, bos_token="<｜begin▁of▁sentence｜>")
    conformance.train_one_step(tokenizer, tmp_path)
