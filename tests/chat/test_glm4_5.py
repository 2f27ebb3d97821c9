"""The glm4_5 family (GLM-4.5/4.6): calls rendered by the reference template parse back to the same
calls, answer and reasoning; a rollout equals the full render although a turn has no end token of
its own; hostile text never raises and stays linear."""

from __future__ import annotations

from typing import Any

import pytest

from rlfactory_nb.chat import detect_chat_format, get_chat_format, get_parser
from rlfactory_nb.rollout.tokens import delta_text
from tests.chat import conformance
from tests.chat.templates import TemplateOnly, render, template_text

NAME = "glm4_5"
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
           "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "/nothink"]


def glm_tokenizer(markers_special: bool = False) -> Any:
    """GLM-4.5's added tokens: role tokens special, the markers not (as its tokenizer marks them);
    `markers_special` marks them special too, which the record's keep_tokens must survive."""
    added = [(t, True) for t in ROLES] + [(t, markers_special) for t in MARKERS]
    return conformance.family_tokenizer(NAME, added, eos_token="<|endoftext|>")


def sampled_turn(calls: list[tuple[str, dict]], content: str, reasoning: str) -> str:
    """What the model samples for this assistant turn: the full render minus the generation prompt
    (nothing ends the turn: the template writes no end token)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [{"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls]
    if reasoning:
        message["reasoning_content"] = reasoning
    template = template_text(NAME)
    prompt, full = render(template, [USER], add_generation_prompt=True), render(template, [USER, message])
    assert full.startswith(prompt), "the template renders the turn after its own generation prompt"
    return full[len(prompt) :]


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


def test_the_delta_after_a_call_starts_after_the_sampled_observation_token() -> None:
    """The turn stops on `<|observation|>`, the first token of the results block: the delta is the
    rest of that block and the next assistant header, never the token again."""
    tokenizer = glm_tokenizer()
    delta = delta_text(tokenizer, [{"role": "tool", "content": "sunny"}], False, get_chat_format(NAME))
    assert delta == "\n<tool_response>\nsunny\n</tool_response><|assistant|>\n<think></think>"


def test_truncated_at_every_token_never_yields_a_partial_call() -> None:
    text = sampled_turn([NESTED, WEATHER], "Let me search.", "Search it.")
    parser = get_parser(NAME)
    for cut in conformance.truncations(text, glm_tokenizer()):
        result = parser.parse(cut)
        complete = cut.count("</tool_call>")
        assert [(c.name, c.arguments) for c in result.calls] == [NESTED, WEATHER][:complete], cut
        assert bool(result.errors) == (cut.count("<tool_call>") > complete), cut


@pytest.mark.parametrize(
    "text, message",
    [
        ("<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>value", "ended inside the <arg_value> of 'a'"),
        ("<tool_call>f\n<arg_key>a</arg_key>\nvalue</tool_call>", "must be followed by <arg_value>"),
        ('<tool_call>{"name": "f", "arguments": {}}\n</tool_call>', "tool name on its line"),
        ("<tool_call>\n</tool_call>", "tool name on its line"),
        ("<tool_call>f\n<arg_key>a\n<arg_value>1</arg_value>\n</tool_call>", "not closed by </arg_key>"),
        ("<tool_call>f\n<arg_key>a</arg_key><arg_value>1</arg_value><arg_key>a</arg_key><arg_value>2</arg_value></tool_call>",
         "given twice"),
        ("<tool_call>f\nstray text</tool_call>", "Unexpected text inside <tool_call>f"),
        ("<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>1</arg_value>\n", "before </tool_call>"),
    ],
)
def test_malformed_block_is_an_error_and_no_call(text: str, message: str) -> None:
    result = get_parser(NAME).parse(text)
    assert result.calls == []
    assert len(result.errors) == 1 and message in result.errors[0].message, result.errors
    assert "<tool_call>TOOL_NAME" in result.errors[0].message, "every error shows the expected format"


def test_a_broken_block_does_not_swallow_the_next_call() -> None:
    result = get_parser(NAME).parse("<tool_call>{bad\n<tool_call>f\n</tool_call>")
    assert [c.name for c in result.calls] == ["f"] and len(result.errors) == 1


def test_calls_inside_reasoning_are_counted_not_run() -> None:
    draft = "<tool_call>f\n</tool_call>"
    result = get_parser(NAME).parse(f"\n<think>maybe {draft}</think>\nNo call needed.")
    assert result.calls == [] and result.calls_in_reasoning == 1 and result.answer == "No call needed."
    later = get_parser(NAME).parse(f"Sure.\n<think>{draft}</think>")
    assert [c.name for c in later.calls] == ["f"] and later.reasoning == "", "a later <think> is text"


HOSTILE = {
    "unclosed value": lambda n: "<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>" + "x" * n,
    "nested brackets in a value": lambda n: "<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>" + "[" * n + "</arg_value>\n</tool_call>",
    "lone surrogates": lambda n: "<tool_call>\ud800\n<arg_key>\udfff</arg_key>\n<arg_value>\ud83d</arg_value>\n</tool_call>" * (n // 50),
    "openers": lambda n: "<tool_call>" * (n // 10),
    "openers with a newline at the end": lambda n: "<tool_call>" * (n // 10) + "\n",
    "unclosed keys": lambda n: "<tool_call>f<arg_key>" * (n // 20) + "</arg_key>",
    "keys without values": lambda n: "<tool_call>f\n" + "<arg_key>a</arg_key>\n" * (n // 20),
    "names that are not names": lambda n: '<tool_call>{"name": 1}\n' * (n // 20),
    "think tags": lambda n: "<think></think>" * (n // 15),
    "closes": lambda n: "</arg_value></arg_key></tool_call>" * (n // 30),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_text_is_bounded_and_linear(case: str) -> None:
    make = HOSTILE[case]
    size = 10_000_000 if case == "openers" else 1_000_000  # 10 MB of markers; the rest kept fast
    result = conformance.assert_bounded(get_parser(NAME), make(size), seconds=30.0)
    assert len(result.calls) <= 8 and len(result.errors) <= 9
    conformance.assert_linear(get_parser(NAME), make)


def _turns(thinking: bool) -> list[tuple[str, str]]:
    """Turns that call, call, answer; with thinking on each opens with a think block (the second an
    empty one), as the template renders them."""
    think, empty = ("\n<think>I need the weather.</think>", "\n<think></think>") if thinking else ("", "")
    weather = "\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>"
    time = "\nNow the time.\n<tool_call>get_time\n<arg_key>zone</arg_key>\n<arg_value>Europe/Paris</arg_value>\n</tool_call>"
    return [
        (think + weather, "<|observation|>"),
        (empty + time, "<|observation|>"),
        (think + "\nIt is sunny in Paris, and 12:00.", "<|user|>"),
    ]


@pytest.mark.parametrize("thinking", [False, True])
@pytest.mark.parametrize("markers_special", [False, True])
async def test_rollout_equals_the_full_render(thinking: bool, markers_special: bool) -> None:
    tokenizer = glm_tokenizer(markers_special)
    traj = await conformance.rollout_against_render(tokenizer, NAME, _turns(thinking), enable_thinking=thinking)
    assert traj.num_turns == 3 and traj.metadata["drift_position"] == -1
    assert [c.name for t in traj.turns for c in t.calls] == ["get_weather", "get_time"]
    assert conformance.final_answer(traj) == "It is sunny in Paris, and 12:00."
    assert traj.turns[0].reasoning == ("I need the weather." if thinking else "")


def test_one_grpo_step(tmp_path) -> None:
    conformance.train_one_step(glm_tokenizer(), tmp_path)
