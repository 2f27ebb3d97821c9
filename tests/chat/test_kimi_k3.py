"""The kimi_k3 family: its own renderer gives exactly the official encoder's text, turns the encoder
renders parse back to the same calls, answer and reasoning, a 3-turn rollout equals the full render,
`auto` claims K3's vocabulary only, and hostile text never raises and stays linear."""

from __future__ import annotations

from typing import Any

import pytest

from rlfactory_nb.chat import detect_chat_format, get_chat_format, get_parser, kimi_k3
from rlfactory_nb.chat.kimi_k3 import CLOSE, END_OF_MESSAGE, OPEN, SEP
from rlfactory_nb.errors import ChatFormatError
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.rollout.tokens import delta_text
from rlfactory_nb.types import ToolSpec
from tests.chat import conformance
from tests.chat.encoders import encoder

NAME = "kimi_k3"
TOOLS = [spec.to_openai() for spec in (conformance.get_weather.spec, conformance.get_time.spec)]
WEATHER = ("get_weather", {"city": "Paris"})
NESTED = ("search", {"query": "café 東京 🚀 \"quoted\" & more", "filters": {"tags": ["a", "b"], "limit": 3}, "exact": True, "n": None, "x": 2.5})
MARKERS_AS_DATA = ("write_file", {"text": "Calls end with <|close|>call<|sep|><|close|>tools<|sep|>, thoughts with <|close|>think<|sep|>."})
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


def k3_tokenizer() -> Any:
    added = [("[BOS]", True), ("[EOS]", True), (END_OF_MESSAGE, True), (OPEN, True), (CLOSE, True), (SEP, True)]
    return build_tokenizer(added_tokens=added, eos_token="[EOS]", bos_token="[BOS]", template="")


def official(messages: list[dict], tools: list[dict] | None, thinking: bool, generation_prompt: bool) -> str:
    """The official encoder's text, called as K3's tokenizer calls it (thinking_effort max)."""
    extra = {"thinking_effort": "max"} if thinking else {}
    segments = encoder(NAME).build_chat_segments(messages, tools, add_generation_prompt=generation_prompt, thinking=thinking, **extra)
    return "".join(segment.text for segment in segments)


def call(name: str, arguments: dict) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def sampled_turn(calls: list[tuple[str, dict]], content: str, reasoning: str, thinking: bool) -> str:
    message: dict[str, Any] = {"role": "assistant", "content": content, "reasoning_content": reasoning}
    if calls:
        message["tool_calls"] = [call(n, a) for n, a in calls]
    prompt = official([USER], TOOLS, thinking, True)
    full = official([USER, message], TOOLS, thinking, False)
    assert full.startswith(prompt) and full.endswith(END_OF_MESSAGE)
    return full[len(prompt) : -len(END_OF_MESSAGE)]


@pytest.mark.parametrize("thinking", [False, True])
@pytest.mark.parametrize("case", list(CASES))
def test_rendered_turn_parses_back(case: str, thinking: bool) -> None:
    calls, content, reasoning = CASES[case]
    reasoning = reasoning if thinking else ""
    text = sampled_turn(calls, content, reasoning, thinking)
    fmt = get_chat_format(NAME)
    result = fmt.new_parser(starts_in_reasoning=thinking).parse(text)
    assert [(c.name, c.arguments) for c in result.calls] == calls, text
    assert result.errors == [] and result.calls_in_reasoning == 0
    assert (result.answer, result.reasoning) == (content, reasoning)
    assert fmt.split_reasoning(text, thinking) == (reasoning, content)
    message = fmt.assistant_message(text, result.calls, result.reasoning)
    assert (message["content"], message["reasoning_content"]) == (content, reasoning)


CONVERSATIONS = {
    "prompt": [USER],
    "system": [{"role": "system", "content": "Be brief."}, USER],
    "results": [USER, {"role": "assistant", "content": "Let me see.", "reasoning_content": "r",
                       "tool_calls": [call(*WEATHER), call(*NESTED)]},
                {"role": "tool", "content": "sunny"}, {"role": "tool", "content": "found", "name": "search"}],
    "three turns": [
        {"role": "system", "content": "S"}, USER,
        {"role": "assistant", "content": "", "reasoning_content": "r1", "tool_calls": [call(*WEATHER)]},
        {"role": "tool", "content": "sunny", "name": "get_weather"},
        {"role": "assistant", "content": "It is sunny.", "reasoning_content": " "},
        {"role": "user", "content": "And tomorrow?", "name": "ann"},
        {"role": "assistant", "content": "Also sunny.", "reasoning_content": "r3", "tool_calls": [call("f", "{bad json")]},
    ],
}


@pytest.mark.parametrize("generation_prompt", [False, True])
@pytest.mark.parametrize("tools", [False, True])
@pytest.mark.parametrize("thinking", [False, True])
@pytest.mark.parametrize("conversation", list(CONVERSATIONS))
def test_the_renderer_equals_the_official_encoder(conversation: str, thinking: bool, tools: bool, generation_prompt: bool) -> None:
    messages, schemas = CONVERSATIONS[conversation], TOOLS if tools else None
    expected = official(messages, schemas, thinking, generation_prompt)
    rendered = kimi_k3.render(None, messages, schemas, add_generation_prompt=generation_prompt, enable_thinking=thinking)
    assert rendered == expected


@pytest.mark.parametrize(
    "messages, field",
    [
        ([USER, {"role": "function", "content": "x"}], r"messages\[1\]\['role'\]"),
        ([{"role": "user", "content": [{"type": "image"}]}], r"messages\[0\]\['content'\]"),
        ([{"role": "tool", "content": "x"}], r"messages\[0\]: a tool result needs a 'name'"),
        ([{"role": "assistant", "content": "", "tool_calls": [call("f", "[1]")]}], r"messages\[0\]\['tool_calls'\]\[0\]"),
    ],
)
def test_a_shape_the_encoder_refuses_is_an_error_naming_the_field(messages: list[dict], field: str) -> None:
    with pytest.raises(ChatFormatError, match=field):
        kimi_k3.render(None, messages)


def test_auto_claims_k3_only() -> None:
    assert detect_chat_format(k3_tokenizer()).name == NAME
    assert not get_chat_format(NAME).matches("{{ messages }} <|open|>", frozenset([OPEN, CLOSE, SEP, END_OF_MESSAGE])), (
        "a tokenizer with a template of its own is that template's family"
    )


def test_the_record_matches_the_encoder() -> None:
    fmt = get_chat_format(NAME)
    assert official([USER], None, True, True).endswith(fmt.reasoning.open) == fmt.prefills_reasoning
    base = [USER, {"role": "assistant", "content": "", "tool_calls": [call(*WEATHER)]}]
    result = {"role": "tool", "content": "sunny", "name": "get_weather"}
    expected = official([*base, result], TOOLS, True, True)[len(official(base, TOOLS, True, False)) :]
    assert delta_text(k3_tokenizer(), [fmt.tool_message("sunny", conformance_call(), 0)], True, fmt) == expected


def conformance_call():
    from rlfactory_nb.types import ToolCall

    return ToolCall("get_weather", {"city": "Paris"})


def test_truncated_at_every_token_never_yields_a_partial_call() -> None:
    text = sampled_turn([NESTED, WEATHER], "Let me search.", "Search it.", True)
    parser = get_chat_format(NAME).new_parser(starts_in_reasoning=True)
    for cut in conformance.truncations(text, k3_tokenizer()):
        result = parser.parse(cut)
        complete = cut.count(f"{CLOSE}call{SEP}")
        assert [(c.name, c.arguments) for c in result.calls] == [NESTED, WEATHER][:complete], cut
        if f"{CLOSE}think{SEP}" not in cut:
            assert result.answer == "" and result.reasoning == cut.strip(), "a turn cut inside reasoning"


TOOLS_OPEN = f"{OPEN}tools{SEP}"
CALL = f'{OPEN}call tool="f" index="1"{SEP}'


@pytest.mark.parametrize(
    "text, message",
    [
        (TOOLS_OPEN + CALL + f'{OPEN}argument key="a" type="string"{SEP}x', "ended inside an argument"),
        (TOOLS_OPEN + f"{OPEN}call{SEP}{CLOSE}call{SEP}{CLOSE}tools{SEP}", "no tool name"),
        (TOOLS_OPEN + CALL + f"stray{CLOSE}call{SEP}", "Unexpected text in the call of 'f'"),
        (TOOLS_OPEN + CALL + f'{OPEN}json type="object"{SEP}[1]{CLOSE}json{SEP}{CLOSE}call{SEP}', "not a JSON object"),
        (TOOLS_OPEN + "stray" + CLOSE + "tools" + SEP, "Unexpected text in the tools channel"),
    ],
)
def test_malformed_block_is_an_error_and_no_call(text: str, message: str) -> None:
    result = get_parser(NAME).parse(text)
    assert result.calls == [] and len(result.errors) == 1 and message in result.errors[0].message, result.errors
    assert "<|open|>tools<|sep|>" in result.errors[0].message, "every error shows the expected format"


def test_values_follow_type_then_the_schema() -> None:
    argument = lambda key, kind, value: f'{OPEN}argument key="{key}" type="{kind}"{SEP}{value}{CLOSE}argument{SEP}'
    text = TOOLS_OPEN + CALL + argument("label", "number", "3") + argument("n", "string", "7") + f"{CLOSE}call{SEP}"
    schema = {"type": "object", "properties": {"label": {"type": "string"}, "n": {"type": "integer"}}}
    assert get_parser(NAME).parse(text).calls[0].arguments == {"label": 3, "n": "7"}
    assert get_parser(NAME).parse(text, tools=[ToolSpec("f", "", schema)]).calls[0].arguments == {"label": "3", "n": 7}


def test_calls_inside_reasoning_are_counted_not_run() -> None:
    draft = TOOLS_OPEN + CALL + f"{CLOSE}call{SEP}{CLOSE}tools{SEP}"
    text = f"maybe {draft}{CLOSE}think{SEP}{OPEN}response{SEP}No call.{CLOSE}response{SEP}"
    result = get_chat_format(NAME).new_parser(starts_in_reasoning=True).parse(text)
    assert result.calls == [] and result.calls_in_reasoning == 1 and result.answer == "No call."


ARGUMENT = f'{OPEN}argument key="a" type="string"{SEP}'
HOSTILE = {
    "unclosed value": lambda n: TOOLS_OPEN + CALL + ARGUMENT + "x" * n,
    "100k tools openers": lambda n: TOOLS_OPEN * (n // 20),
    "call openers": lambda n: TOOLS_OPEN + CALL * (n // 30),
    "arguments without values": lambda n: TOOLS_OPEN + CALL + ARGUMENT * (n // 40),
    "lone surrogates": lambda n: (TOOLS_OPEN + f'{OPEN}call tool="\ud800"{SEP}' + ARGUMENT + f"\udfff{CLOSE}argument{SEP}{CLOSE}call{SEP}") * (n // 120),
    "markers inside an argument": lambda n: TOOLS_OPEN + CALL + ARGUMENT + f"{CLOSE}tools{SEP}{OPEN}call" * (n // 30) + f"{CLOSE}argument{SEP}{CLOSE}call{SEP}",
    "separators": lambda n: SEP * (n // 7),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_text_is_bounded_and_linear(case: str) -> None:
    make = HOSTILE[case]
    size = 10_000_000 if case == "100k tools openers" else 1_000_000
    result = conformance.assert_bounded(get_parser(NAME), make(size), seconds=30.0)
    assert len(result.calls) <= 8 and len(result.errors) <= 10
    conformance.assert_linear(get_parser(NAME), make, n=100_000)  # large enough to time above a loaded machine's noise


def _turns(thinking: bool) -> list[tuple[str, str]]:
    """Call, call, answer, as the official encoder renders them."""
    think = lambda text: f"{text}{CLOSE}think{SEP}" if thinking else ""
    response = lambda text: f"{OPEN}response{SEP}{text}{CLOSE}response{SEP}" if thinking else f"{text}{CLOSE}response{SEP}"
    tools = lambda name, key, value: (
        f'{TOOLS_OPEN}{OPEN}call tool="{name}" index="1"{SEP}{OPEN}argument key="{key}" type="string"{SEP}{value}'
        f"{CLOSE}argument{SEP}{CLOSE}call{SEP}{CLOSE}tools{SEP}"
    )
    end = f"{CLOSE}message{SEP}"
    return [
        (think("I need the weather.") + response("") + tools("get_weather", "city", "Paris") + end, END_OF_MESSAGE),
        (think("Now the time.") + response("Now the time.") + tools("get_time", "zone", "Europe/Paris") + end, END_OF_MESSAGE),
        (think("Both known.") + response("It is sunny in Paris, and 12:00.") + end, END_OF_MESSAGE),
    ]


@pytest.mark.parametrize("thinking", [False, True])
async def test_rollout_equals_the_full_render(thinking: bool) -> None:
    tokenizer = k3_tokenizer()
    traj = await conformance.rollout_against_render(tokenizer, "auto", _turns(thinking), enable_thinking=thinking)
    assert traj.num_turns == 3 and traj.metadata["drift_position"] == -1
    assert [c.name for t in traj.turns for c in t.calls] == ["get_weather", "get_time"]
    assert conformance.final_answer(traj) == "It is sunny in Paris, and 12:00."
    assert traj.turns[0].reasoning == ("I need the weather." if thinking else "")
    expected = official(traj.messages, TOOLS, thinking, False)
    assert tokenizer.decode(traj.prompt_ids + traj.response_ids, skip_special_tokens=False) == expected


@pytest.mark.slow
def test_one_grpo_step(tmp_path) -> None:
    conformance.train_one_step(k3_tokenizer(), tmp_path)
