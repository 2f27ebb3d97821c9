"""The DSML families, deepseek_v32 (V3.2) and deepseek_v4 (V4 and V4.1): their own renderers give
exactly the official Python encoders' text, turns the encoders render parse back to the same calls,
answer and reasoning, a 3-turn rollout equals the full render, `auto` tells the generations apart by
their vocabulary, and hostile text never raises and stays linear."""

from __future__ import annotations

from typing import Any

import pytest

from rlfactory_nb.chat import deepseek_render, detect_chat_format, get_chat_format, get_parser
from rlfactory_nb.chat.deepseek_v4 import V4, V41
from rlfactory_nb.chat.deepseek_v32 import V32
from rlfactory_nb.errors import ChatFormatError
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.rollout.tokens import delta_text
from rlfactory_nb.types import ToolSpec
from tests.chat import conformance
from tests.chat.encoders import deepseek_official
from tests.chat.templates import TemplateOnly, template_text

BOS, EOS = deepseek_render.BOS, deepseek_render.EOS
ROLES = [deepseek_render.USER, deepseek_render.ASSISTANT]
GENERATIONS = {
    # official encoder: (family, its generation here, extra tokens of the vocabulary)
    "deepseek_v32": ("deepseek_v32", V32, []),
    "deepseek_v4": ("deepseek_v4", V4, [deepseek_render.LATEST_REMINDER]),
    "deepseek_v41": ("deepseek_v4", V41, [deepseek_render.LATEST_REMINDER, deepseek_render.SYSTEM]),
}
TOOLS = [spec.to_openai() for spec in (conformance.get_weather.spec, conformance.get_time.spec)]
WEATHER = ("get_weather", {"city": "Paris"})
NESTED = ("search", {"query": "café 東京 🚀 \"quoted\"", "filters": {"tags": ["a", "b"], "limit": 3}, "exact": True, "n": None})
MARKERS_AS_DATA = ("write_file", {"text": "Sections end with </｜DSML｜function_calls></｜DSML｜tool_calls></｜DSML｜ calls> and <think>."})
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


def tokenizer_of(official: str) -> Any:
    """The tiny BPE with the generation's tokens and no chat template (as the models ship)."""
    extra = GENERATIONS[official][2]
    added = [(BOS, True), (EOS, True)] + [(t, False) for t in ROLES + extra + ["<think>", "</think>"]]
    return build_tokenizer(added_tokens=added, eos_token=EOS, bos_token=BOS, template="")


def call(name: str, arguments: dict) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def sampled_turn(official: str, calls: list[tuple[str, dict]], content: str, reasoning: str, thinking: bool) -> str:
    """What the model samples for this turn: the official full render minus the prompt, less the eos."""
    message: dict[str, Any] = {"role": "assistant", "content": content, "reasoning_content": reasoning}
    if calls:
        message["tool_calls"] = [call(n, a) for n, a in calls]
    prompt = deepseek_official(official, [USER], TOOLS, thinking)
    full = deepseek_official(official, [USER, message], TOOLS, thinking)
    assert full.startswith(prompt) and full.endswith(EOS)
    return full[len(prompt) : -len(EOS)]


@pytest.mark.parametrize("thinking", [False, True])
@pytest.mark.parametrize("official", list(GENERATIONS))
@pytest.mark.parametrize("case", list(CASES))
def test_rendered_turn_parses_back(case: str, official: str, thinking: bool) -> None:
    calls, content, reasoning = CASES[case]
    text = sampled_turn(official, calls, content, reasoning if thinking else "", thinking)
    fmt = get_chat_format(GENERATIONS[official][0])
    result = fmt.new_parser(starts_in_reasoning=thinking).parse(text)
    assert [(c.name, c.arguments) for c in result.calls] == calls, text
    assert result.errors == [] and result.calls_in_reasoning == 0
    assert (result.answer, result.reasoning) == (content, reasoning if thinking else "")
    message = fmt.assistant_message(text, result.calls, result.reasoning)
    assert (message["content"], message["reasoning_content"]) == (content, reasoning if thinking else "")


CONVERSATIONS = {
    "prompt": [USER],
    "system": [{"role": "system", "content": "Be brief."}, USER],
    "results": [USER, {"role": "assistant", "content": "Let me see.", "reasoning_content": "r",
                       "tool_calls": [call(*WEATHER), call(*NESTED)]},
                {"role": "tool", "content": "sunny"}, {"role": "tool", "content": "found"}],
    "three turns and a second question": [
        {"role": "system", "content": "S"}, USER,
        {"role": "assistant", "content": "", "reasoning_content": "r1", "tool_calls": [call(*WEATHER)]},
        {"role": "tool", "content": "sunny"},
        {"role": "assistant", "content": "It is sunny.", "reasoning_content": "r2"},
        {"role": "user", "content": "And tomorrow?"},
        {"role": "assistant", "content": "Also sunny.", "reasoning_content": "r3"},
    ],
}


@pytest.mark.parametrize("tools", [False, True])
@pytest.mark.parametrize("thinking", [False, True])
@pytest.mark.parametrize("official", list(GENERATIONS))
@pytest.mark.parametrize("conversation", list(CONVERSATIONS))
def test_the_renderer_equals_the_official_encoder(conversation: str, official: str, thinking: bool, tools: bool) -> None:
    messages = CONVERSATIONS[conversation]
    expected = deepseek_official(official, messages, TOOLS if tools else None, thinking)
    generation = GENERATIONS[official][1]
    assert deepseek_render.render(generation, messages, TOOLS if tools else None, thinking) == expected
    fmt = get_chat_format(GENERATIONS[official][0])
    rendered = fmt.render(tokenizer_of(official), messages, TOOLS if tools else None, enable_thinking=thinking)
    assert rendered == expected, "the record picks the generation from the vocabulary"


@pytest.mark.parametrize(
    "message, field",
    [
        ({"role": "function", "content": "x"}, "messages[1]['role']"),
        ({"role": "user", "content": [{"type": "text", "text": "x"}]}, "messages[1]['content']"),
        ({"role": "user", "content": "x", "task": "query"}, "messages[1]['task']"),
        ({"role": "assistant", "content": "", "tool_calls": [call("f", "not json")]}, "messages[1]['tool_calls'][0]"),
    ],
)
@pytest.mark.parametrize("official", list(GENERATIONS))
def test_a_shape_the_encoder_refuses_is_an_error_naming_the_field(official: str, message: dict, field: str) -> None:
    with pytest.raises(ChatFormatError, match=field.replace("[", r"\[").replace("]", r"\]")):
        deepseek_render.render(GENERATIONS[official][1], [USER, message])


def test_a_tool_result_with_no_turn_before_it_is_an_error() -> None:
    with pytest.raises(ChatFormatError, match=r"messages\[0\]: a tool result must follow"):
        deepseek_render.render(V32, [{"role": "tool", "content": "x"}])


def test_auto_tells_the_generations_apart_and_claims_no_other_tokenizer() -> None:
    assert detect_chat_format(tokenizer_of("deepseek_v32")).name == "deepseek_v32"
    assert detect_chat_format(tokenizer_of("deepseek_v4")).name == "deepseek_v4"
    assert detect_chat_format(tokenizer_of("deepseek_v41")).name == "deepseek_v4"
    vocab = {t: i for i, t in enumerate([BOS, EOS, *ROLES, "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>"])}
    assert detect_chat_format(TemplateOnly(template_text("deepseek_v3"), vocab)).name == "deepseek_v3"
    with pytest.raises(ChatFormatError, match="no chat template"):
        detect_chat_format(TemplateOnly("", {"<|im_start|>": 0}))


@pytest.mark.parametrize("official", list(GENERATIONS))
def test_the_record_matches_the_encoder(official: str) -> None:
    """Thinking mode pre-fills `<think>`, and the delta after a result is the encoder's text."""
    fmt = get_chat_format(GENERATIONS[official][0])
    assert deepseek_official(official, [USER], None, True).endswith(fmt.reasoning.open) == fmt.prefills_reasoning
    tokenizer = tokenizer_of(official)
    base = [USER, {"role": "assistant", "content": "", "tool_calls": [call(*WEATHER)]}]
    full = deepseek_official(official, [*base, {"role": "tool", "content": "sunny"}], TOOLS, False)
    expected = full[len(deepseek_official(official, base, TOOLS, False)) :]
    assert delta_text(tokenizer, [{"role": "tool", "content": "sunny"}], False, fmt) == expected


def test_truncated_at_every_token_never_yields_a_partial_call() -> None:
    text = sampled_turn("deepseek_v4", [NESTED, WEATHER], "Let me search.", "Search it.", True)
    parser = get_chat_format("deepseek_v4").new_parser(starts_in_reasoning=True)
    for cut in conformance.truncations(text, tokenizer_of("deepseek_v4")):
        result = parser.parse(cut)
        complete = cut.count("</｜DSML｜invoke>")
        assert [(c.name, c.arguments) for c in result.calls] == [NESTED, WEATHER][:complete], cut
        if "</think>" not in cut:
            assert result.answer == "" and result.calls == [], "a turn cut inside reasoning is all reasoning"


def _block(body: str, section: str = "function_calls") -> str:
    return f"<｜DSML｜{section}>\n{body}\n</｜DSML｜{section}>"


@pytest.mark.parametrize(
    "text, message",
    [
        (_block('<｜DSML｜invoke name="f">\n<｜DSML｜parameter name="a" string="true">x'), "ended inside the value of 'a'"),
        (_block('<｜DSML｜invoke nam="f">\n</｜DSML｜invoke>'), 'followed by name="TOOL_NAME"'),
        (_block('<｜DSML｜invoke name="">\n</｜DSML｜invoke>'), "no tool name"),
        (_block('<｜DSML｜invoke name="f">\nstray\n</｜DSML｜invoke>'), "Unexpected text inside the call of 'f'"),
        (_block('<｜DSML｜invoke name="f">\n<｜DSML｜parameter name="a" string="true">1</｜DSML｜parameter>\n'
                '<｜DSML｜parameter name="a" string="true">2</｜DSML｜parameter>\n</｜DSML｜invoke>'), "given twice"),
        (_block("stray"), "Unexpected text inside"),
        ("<｜DSML｜function_calls>\n", "ended inside"),
    ],
)
def test_malformed_block_is_an_error_and_no_call(text: str, message: str) -> None:
    result = get_parser("deepseek_v32").parse(text)
    assert result.calls == [] and len(result.errors) == 1 and message in result.errors[0].message, result.errors
    assert "<｜DSML｜function_calls>" in result.errors[0].message, "every error shows the expected format"


def test_every_spelling_is_read_and_a_broken_call_does_not_swallow_the_next() -> None:
    v41 = '<｜DSML｜ calls>\n<｜DSML｜ invoke name="f">\n<｜DSML｜ parameter name="n" string="false">3</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>'
    bad = _block('<｜DSML｜invoke name="g">\nstray\n</｜DSML｜invoke>\n<｜DSML｜invoke name="h">\n</｜DSML｜invoke>', "tool_calls")
    result = get_parser("deepseek_v4").parse(v41 + bad)
    assert [(c.name, c.arguments) for c in result.calls] == [("f", {"n": 3}), ("h", {})] and len(result.errors) == 1


def test_values_are_typed_by_the_schema_when_given() -> None:
    text = _block('<｜DSML｜invoke name="label">\n<｜DSML｜parameter name="text" string="false">3</｜DSML｜parameter>\n'
                  '<｜DSML｜parameter name="n" string="true">7</｜DSML｜parameter>\n'
                  '<｜DSML｜parameter name="opts" string="false">{"a": 1}</｜DSML｜parameter>\n</｜DSML｜invoke>')
    schema = {"type": "object", "properties": {"text": {"type": "string"}, "n": {"type": "integer"}, "opts": {"type": "object"}}}
    typed = get_parser("deepseek_v32").parse(text, tools=[ToolSpec("label", "", schema)])
    assert typed.calls[0].arguments == {"text": "3", "n": 7, "opts": {"a": 1}}
    untyped = get_parser("deepseek_v32").parse(text)
    assert untyped.calls[0].arguments == {"text": 3, "n": "7", "opts": {"a": 1}}, "without schemas: string= decides"


def test_calls_inside_reasoning_are_counted_not_run() -> None:
    draft = _block('<｜DSML｜invoke name="f">\n</｜DSML｜invoke>')
    result = get_chat_format("deepseek_v32").new_parser(starts_in_reasoning=True).parse(f"maybe {draft}</think>No call.")
    assert result.calls == [] and result.calls_in_reasoning == 1 and result.answer == "No call."


INVOKE = '<｜DSML｜invoke name="f">\n<｜DSML｜parameter name="a" string="true">'
HOSTILE = {
    "unclosed value": lambda n: "<｜DSML｜tool_calls>\n" + INVOKE + "x" * n,
    "100k section openers": lambda n: "<｜DSML｜function_calls>" * (n // 10),
    "invoke openers": lambda n: "<｜DSML｜tool_calls>" + '<｜DSML｜invoke name="f">' * (n // 20),
    "parameters without values": lambda n: "<｜DSML｜ calls>" + '<｜DSML｜ invoke name="f">' + '<｜DSML｜ parameter name="a" string="true">' * (n // 40),
    "lone surrogates": lambda n: _block('<｜DSML｜invoke name="\ud800">\n<｜DSML｜parameter name="\udfff" string="true">\ud83d</｜DSML｜parameter>\n</｜DSML｜invoke>') * (n // 200),
    "markers inside an argument": lambda n: _block(INVOKE + "</｜DSML｜function_calls><｜DSML｜invoke" * (n // 40) + "</｜DSML｜parameter>\n</｜DSML｜invoke>"),
    "think tags": lambda n: "<think></think>" * (n // 15),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_text_is_bounded_and_linear(case: str) -> None:
    make = HOSTILE[case]
    size = 10_000_000 if case == "100k section openers" else 1_000_000  # 10 MB of openers; the rest kept fast
    parser = get_parser("deepseek_v4")
    result = conformance.assert_bounded(parser, make(size), seconds=30.0)
    assert len(result.calls) <= 8 and len(result.errors) <= 10
    conformance.assert_linear(parser, make, n=100_000)  # large enough to time above a loaded machine's noise


def _turns(official: str, thinking: bool) -> list[tuple[str, str]]:
    """Call, call, answer, as the official encoder renders the turns."""
    d = GENERATIONS[official][1].dialect
    think = lambda text: f"{text}</think>" if thinking else ""
    section = lambda name, key, value: (
        f'\n\n{d.open}\n{d.tag(d.invoke)} name="{name}">\n{d.tag(d.parameter)} name="{key}" string="true">{value}'
        f"{d.end(d.parameter)}\n{d.end(d.invoke)}\n{d.close}"
    )
    return [
        (think("I need the weather.") + section("get_weather", "city", "Paris"), EOS),
        (think("Now the time.") + "Now the time." + section("get_time", "zone", "Europe/Paris"), EOS),
        (think("Both known.") + "It is sunny in Paris, and 12:00.", EOS),
    ]


@pytest.mark.parametrize("thinking", [False, True])
@pytest.mark.parametrize("official", list(GENERATIONS))
async def test_rollout_equals_the_full_render(official: str, thinking: bool) -> None:
    tokenizer = tokenizer_of(official)
    family = GENERATIONS[official][0]
    traj = await conformance.rollout_against_render(tokenizer, "auto", _turns(official, thinking), enable_thinking=thinking)
    assert traj.num_turns == 3 and traj.metadata["drift_position"] == -1
    assert [c.name for t in traj.turns for c in t.calls] == ["get_weather", "get_time"]
    assert conformance.final_answer(traj) == "It is sunny in Paris, and 12:00."
    assert traj.turns[0].reasoning == ("I need the weather." if thinking else "")
    messages = [m for m in traj.messages if m.get("role") != "system"]
    expected = deepseek_official(official, messages, TOOLS, thinking)
    assert tokenizer.decode(traj.prompt_ids + traj.response_ids, skip_special_tokens=False) == expected
    assert get_chat_format(family).name == family


@pytest.mark.slow
@pytest.mark.parametrize("official", ["deepseek_v32", "deepseek_v41"])
def test_one_grpo_step(tmp_path, official: str) -> None:
    conformance.train_one_step(tokenizer_of(official), tmp_path)
