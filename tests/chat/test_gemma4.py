"""The gemma4 family: calls rendered by the reference template parse back to the same calls, answer
and reasoning; a rollout whose results stay inside the model turn equals the full render but for
the reasoning the template drops; hostile text never raises and stays linear."""

from __future__ import annotations

from typing import Any

import pytest

from rlfactory_nb.chat import detect_chat_format, get_chat_format, get_parser
from rlfactory_nb.rollout.tokens import delta_text
from tests.chat import conformance
from tests.chat.templates import TemplateOnly, render, template_text

NAME = "gemma4"
WEATHER = ("get_weather", {"city": "Paris"})
NESTED = ("search", {"query": "café 東京 🚀 \"quoted\"", "filters": {"tags": ["a", "b"], "limit": 3, "deep": [[{"x": None}]]},
                     "exact": True, "ratio": -2.5})
MARKERS_AS_DATA = ("write_file", {"path": "docs.md", "text": "Calls end with }<tool_call|>; <|tool_call>call:x{ and <|channel> too."})
CASES = {
    "single": ([WEATHER], "", ""),
    "parallel": ([WEATHER, ("get_time", {"zone": "Europe/Paris"})], "", ""),
    "no arguments": ([("now", {})], "", ""),
    "nested and unicode": ([NESTED], "", ""),
    "markers inside a value": ([MARKERS_AS_DATA], "", ""),
    "text after the call": ([WEATHER], "Let me look that up.", ""),
    "with reasoning": ([WEATHER], "", "The user wants the weather in Paris."),
    "answer only": ([], "It is sunny.", ""),
}
USER = {"role": "user", "content": "What is the weather in Paris?"}
SPECIAL = ["<bos>", "<eos>", "<pad>", "<|turn>", "<turn|>", "<|think|>", "<|channel>", "<channel|>", "<|tool_call>",
           "<tool_call|>", "<|tool_response>", "<tool_response|>", "<|tool>", "<tool|>", '<|"|>']


def gemma_tokenizer() -> Any:
    added = [(token, True) for token in SPECIAL]  # all special in Gemma's tokenizer: keep_tokens must hold
    return conformance.family_tokenizer(NAME, added, eos_token="<eos>", bos_token="<bos>", pad_token="<pad>")


def sampled_turn(calls: list[tuple[str, dict]], content: str, reasoning: str) -> str:
    """What the model samples for this assistant turn: the full render minus the generation prompt
    (thinking on: no pre-filled channel), up to the `<|tool_response>` or `<turn|>` it stops on."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [{"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls]
    if reasoning:
        message["reasoning_content"] = reasoning
    template = template_text(NAME)
    prompt = render(template, [USER], add_generation_prompt=True, enable_thinking=True)
    full = render(template, [USER, message], enable_thinking=True)
    assert full.startswith(prompt), "the template renders the turn after its own generation prompt"
    return full[len(prompt) :].removesuffix("<turn|>\n").removesuffix("<|tool_response>")


@pytest.mark.parametrize("case", list(CASES))
def test_rendered_turn_parses_back(case: str) -> None:
    calls, content, reasoning = CASES[case]
    text = sampled_turn(calls, content, reasoning)
    result = get_chat_format(NAME).new_parser().parse(text)
    assert [(c.name, c.arguments) for c in result.calls] == calls, text
    assert result.errors == [] and result.calls_in_reasoning == 0
    assert (result.answer, result.reasoning) == (content, reasoning)
    assert get_chat_format(NAME).split_reasoning(text)[0] == reasoning


def test_the_record_matches_the_template() -> None:
    template, fmt = template_text(NAME), get_chat_format(NAME)
    prompt = render(template, [USER], add_generation_prompt=True, enable_thinking=True)
    assert prompt.endswith(fmt.reasoning.open) == fmt.prefills_reasoning
    assert detect_chat_format(TemplateOnly(template)).name == NAME


def test_the_delta_after_a_call_is_the_results_alone() -> None:
    """The turn stops on `<|tool_response>`; the results follow it inside the same model turn."""
    results = [{"role": "tool", "content": "sunny", "name": "get_weather"}, {"role": "tool", "content": "12:00", "name": "get_time"}]
    delta = delta_text(gemma_tokenizer(), results, False, get_chat_format(NAME))
    assert delta == ('response:get_weather{value:<|"|>sunny<|"|>}<tool_response|>'
                     '<|tool_response>response:get_time{value:<|"|>12:00<|"|>}<tool_response|>')


def test_truncated_at_every_token_never_yields_a_partial_call() -> None:
    text = sampled_turn([NESTED, WEATHER], "", "Search it.")
    parser = get_parser(NAME)
    for cut in conformance.truncations(text, gemma_tokenizer()):
        result = parser.parse(cut)
        complete = cut.count("<tool_call|>")
        assert [(c.name, c.arguments) for c in result.calls] == [NESTED, WEATHER][:complete], cut
        assert bool(result.errors) == (cut.count("<|tool_call>") > complete), cut


@pytest.mark.parametrize(
    "text, message",
    [
        ('<|tool_call>call:f{a:<|"|>open', "ended inside a <|\"|> string"),
        ("<|tool_call>call:f{a:[1,2}<tool_call|>", "Expected ',' or ']'"),
        ('<|tool_call>{"name": "f"}<tool_call|>', "must start with call:TOOL_NAME"),
        ("<|tool_call>call:{a:1}<tool_call|>", "must be followed by {arguments}"),
        ("<|tool_call>call:f{a:Paris}<tool_call|>", "'Paris' is not a value"),
        ("<|tool_call>call:f{a:}<tool_call|>", "has no value"),
        ("<|tool_call>call:f{a:1,a:2}<tool_call|>", "given twice"),
        ("<|tool_call>call:f{1}<tool_call|>", "NAME:value"),
        ("<|tool_call>call:f{a:1} and more", "Expected <tool_call|>"),
        ("<|tool_call>call:f{a:" + "[" * 101 + "]" * 101 + "}<tool_call|>", "deeper than 100 levels"),
    ],
)
def test_malformed_block_is_an_error_and_no_call(text: str, message: str) -> None:
    result = get_parser(NAME).parse(text)
    assert result.calls == []
    assert len(result.errors) == 1 and message in result.errors[0].message, result.errors
    assert "<|tool_call>call:TOOL_NAME{" in result.errors[0].message, "every error shows the expected format"


def test_a_broken_block_does_not_swallow_the_next_call() -> None:
    result = get_parser(NAME).parse("<|tool_call>call:g{a:oops <|tool_call>call:f{}<tool_call|>")
    assert [c.name for c in result.calls] == ["f"] and len(result.errors) == 1


def test_calls_inside_reasoning_are_counted_not_run() -> None:
    draft = "<|tool_call>call:f{}<tool_call|>"
    result = get_parser(NAME).parse(f"<|channel>thought\nmaybe {draft}\n<channel|>No call needed.")
    assert result.calls == [] and result.calls_in_reasoning == 1 and result.answer == "No call needed."
    assert result.reasoning == f"maybe {draft}"


HOSTILE = {
    "unclosed string": lambda n: '<|tool_call>call:f{a:<|"|>' + "x" * n,
    "nested brackets": lambda n: "<|tool_call>call:f{a:" + "[" * n + "]" * n + "}<tool_call|>",
    "unclosed nested brackets": lambda n: "<|tool_call>call:f{a:" + "{b:" * (n // 3),
    "lone surrogates": lambda n: '<|tool_call>call:\ud800{\udfff:<|"|>\ud83d<|"|>}<tool_call|>' * (n // 40),
    "openers": lambda n: "<|tool_call>" * (n // 12),
    "names without arguments": lambda n: "<|tool_call>call:f" * (n // 17),
    "a name that is not a string": lambda n: "<|tool_call>call:{name:1}<tool_call|>" * (n // 36),
    "quote marks": lambda n: '<|tool_call>call:f{a:' + '<|"|>' * (n // 5),
    "channel tags": lambda n: "<|channel>thought<channel|>" * (n // 27),
    "closes": lambda n: "}]<tool_call|><channel|>" * (n // 24),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_text_is_bounded_and_linear(case: str) -> None:
    make = HOSTILE[case]
    size = {"openers": 10_000_000, "nested brackets": 100_000}.get(case, 1_000_000)
    result = conformance.assert_bounded(get_parser(NAME), make(size), seconds=30.0)
    assert len(result.calls) <= 8 and len(result.errors) <= 9
    conformance.assert_linear(get_parser(NAME), make)


def test_a_run_of_openers_is_one_broken_block() -> None:
    result = get_parser(NAME).parse("<|tool_call><|tool_call><|tool_call>call:f{}<tool_call|>")
    assert len(result.errors) == 1 and "is empty" in result.errors[0].message
    assert [c.name for c in result.calls] == ["f"], "the last opener starts the call"


def _turns(thinking: bool) -> list[tuple[str, str]]:
    """Call, call, answer, in one model turn; with thinking on the first and last open with thought."""
    think = "<|channel>thought\nI need the weather.\n<channel|>" if thinking else ""
    return [
        (think + '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|>', "<|tool_response>"),
        ('<|tool_call>call:get_time{zone:<|"|>Europe/Paris<|"|>}<tool_call|>', "<|tool_response>"),
        (think + "It is sunny in Paris, and 12:00.", "<turn|>"),
    ]


@pytest.mark.parametrize("thinking", [False, True])
async def test_rollout_equals_the_full_render(thinking: bool) -> None:
    traj = await conformance.rollout_against_render(gemma_tokenizer(), NAME, _turns(thinking), enable_thinking=thinking)
    assert traj.num_turns == 3 and traj.metadata["drift_position"] != -1, "the render drops a thought channel"
    assert [c.name for t in traj.turns for c in t.calls] == ["get_weather", "get_time"]
    assert conformance.final_answer(traj) == "It is sunny in Paris, and 12:00."
    assert traj.turns[0].reasoning == ("I need the weather." if thinking else "")


def test_one_grpo_step(tmp_path) -> None:
    conformance.train_one_step(gemma_tokenizer(), tmp_path)
