"""The gpt_oss family (Harmony): turns rendered by the reference template parse back to the same
calls, answer and reasoning; a rollout equals the full render except for the analysis the template
drops; hostile text never raises and stays linear."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from rlfactory_nb.chat import detect_chat_format, get_chat_format, get_parser
from rlfactory_nb.chat.gpt_oss import FORMAT_HINT
from rlfactory_nb.rollout.agent import Agent
from tests.chat import conformance
from tests.chat.templates import TemplateOnly, render, template_text

NAME = "gpt_oss"
WEATHER = ("get_weather", {"city": "Paris"})
NESTED = ("search", {"query": "café 東京 🚀 \"quoted\"", "filters": {"tags": ["a", "b"], "limit": 3}, "exact": True})
MARKERS_AS_DATA = ("write_file", {"text": "A call ends <|call|>; <|end|><|start|>assistant<|channel|>final<|message|>x<|return|>"})
CASES = {  # (calls, content, thinking) -> (reasoning, answer) read back
    "single": (([WEATHER], "", ""), ("", "")),
    "no arguments": (([("now", {})], "", ""), ("", "")),
    "nested and unicode": (([NESTED], "", ""), ("", "")),
    "markers inside a value": (([MARKERS_AS_DATA], "", ""), ("", "")),
    "text before the call": (([WEATHER], "Let me look that up.", ""), ("Let me look that up.", "")),  # as analysis
    "with reasoning": (([WEATHER], "", "The user wants the weather."), ("The user wants the weather.", "")),
    "answer only, with reasoning": (([], "It is sunny.", "I know this one."), ("I know this one.", "It is sunny.")),
}
USER = {"role": "user", "content": "What is the weather in Paris?"}
MARKERS = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|call|>", "<|return|>"]
CALL = "<|channel|>commentary to=functions.f <|constrain|>json<|message|>"


def harmony_tokenizer() -> Any:
    """gpt-oss's added tokens, all special (as its tokenizer marks them); eos `<|return|>`."""
    added = [(token, True) for token in ["<|startoftext|>", "<|endoftext|>", *MARKERS]]
    return conformance.family_tokenizer(NAME, added, eos_token="<|return|>", pad_token="<|endoftext|>")


def sampled_turn(calls: list[tuple[str, dict]], content: str, thinking: str) -> str:
    """What the model samples for this turn: the full render after the generation prompt, stop
    token included (the agent decodes it: it is a kept token)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [{"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls]
    if thinking:
        message["thinking"] = thinking
    template = template_text(NAME)
    prompt, full = render(template, [USER], add_generation_prompt=True), render(template, [USER, message])
    assert full.startswith(prompt), "the template renders the turn after its own generation prompt"
    return full[len(prompt) :]


@pytest.mark.parametrize("case", list(CASES))
def test_rendered_turn_parses_back(case: str) -> None:
    (calls, content, thinking), (reasoning, answer) = CASES[case]
    text = sampled_turn(calls, content, thinking)
    result = get_parser(NAME).parse(text)
    assert [(c.name, c.arguments) for c in result.calls] == calls, text
    assert (result.errors, result.calls_in_reasoning) == ([], 0)
    assert (result.reasoning, result.answer) == (reasoning, answer)
    assert get_chat_format(NAME).split_reasoning(text) == (reasoning, answer)


def test_the_model_samples_the_recipient_after_the_channel_too() -> None:
    text = '<|channel|>analysis<|message|>Hm.<|end|><|start|>assistant' + CALL + '{"city": "Paris"}<|call|>'
    result = get_parser(NAME).parse(text)
    assert [(c.name, c.arguments) for c in result.calls] == [("f", {"city": "Paris"})] and result.reasoning == "Hm."


def test_the_generation_prompt_opens_no_reasoning() -> None:
    prompt = render(template_text(NAME), [USER], add_generation_prompt=True)
    assert prompt.endswith("<|start|>assistant") and not get_chat_format(NAME).prefills_reasoning


def test_auto_picks_gpt_oss() -> None:
    assert detect_chat_format(TemplateOnly(template_text(NAME))).name == NAME


def test_truncated_at_every_token_never_yields_a_partial_call() -> None:
    text = sampled_turn([NESTED], "", "Search it.")
    complete = text.rindex("}") + 1
    for cut in conformance.truncations(text, harmony_tokenizer()):
        result = get_parser(NAME).parse(cut)
        if len(cut) >= complete:
            assert [(c.name, c.arguments) for c in result.calls] == [NESTED], cut
        else:
            assert result.calls == [], f"a call from {cut!r}"
            assert bool(result.errors) == ("to=functions." in cut), f"{cut!r}: {result.errors}"
        assert result.answer == "", f"a cut-off header is no answer: {cut!r}"


@pytest.mark.parametrize(
    "body, message",
    [
        ('{"a": 1<|call|>', "a message marker interrupts them"),
        ('{"a": "Par', "the text ended inside them"),
        ('{"a": 1,}<|call|>', "not valid JSON"),
        ("[1, 2]<|call|>", "must be one JSON object"),
        ('{"a": 1} and more<|call|>', "must end with <|call|>"),
    ],
)
def test_malformed_call_is_an_error_and_no_call(body: str, message: str) -> None:
    result = get_parser(NAME).parse(CALL + body)
    assert result.calls == [] and len(result.errors) == 1 and message in result.errors[0].message
    assert FORMAT_HINT in result.errors[0].message, "every error shows the expected format"


@pytest.mark.parametrize(
    "header, message",
    [("<|channel|>final to=functions.f", "commentary channel"), ("<|channel|>commentary to=functions.", "names no tool")],
)
def test_a_misaddressed_call_is_an_error(header: str, message: str) -> None:
    result = get_parser(NAME).parse(f"{header}<|message|>{{}}<|call|>")
    assert result.calls == [] and len(result.errors) == 1 and message in result.errors[0].message


def test_a_broken_call_does_not_swallow_the_next() -> None:
    result = get_parser(NAME).parse(CALL + "{bad<|call|><|start|>assistant" + CALL.replace(".f", ".g") + "{}<|call|>")
    assert [c.name for c in result.calls] == ["g"] and len(result.errors) == 1


@pytest.mark.parametrize(
    "text",
    [
        "<|channel|>analysis to=functions.f json<|message|>{}<|end|>",  # on the analysis channel, ended by <|end|>
        "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|end|>",
        "<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|call|>",  # in the role
        "<|channel|>commentary <|constrain|>json to=functions.f<|message|>{}<|call|>",  # in the constrain header
        "<|start|>assistant to=functions.f<|message|>{}<|call|>",  # no channel at all
    ],
)
def test_calls_real_models_write_are_read(text: str) -> None:
    """Shapes the template never renders but gpt-oss writes, which vLLM and llama.cpp accept: the
    recipient makes a call on any channel, and `<|end|>` may close it (docs/decisions.md)."""
    result = get_parser(NAME).parse(text + "<|start|>assistant<|channel|>final<|message|>Done.<|return|>")
    assert [(c.name, c.arguments) for c in result.calls] == [("f", {})] and result.errors == []
    assert result.answer == "Done." and result.reasoning == ""


def test_a_call_written_inside_an_analysis_body_is_text() -> None:
    text = '<|channel|>analysis<|message|>maybe to=functions.f {"a": 1}<|end|><|start|>assistant<|channel|>final<|message|>No.<|return|>'
    result = get_parser(NAME).parse(text)
    assert result.calls == [] and result.answer == "No." and "to=functions.f" in result.reasoning


def test_text_without_harmony_markers_is_the_answer() -> None:
    assert get_parser(NAME).parse("just words").answer == "just words"


def test_history_messages_render_whatever_the_model_wrote() -> None:
    """The template refuses `<|channel|>analysis<|message|>` inside a field: the history built from a
    hostile turn must still render (the drift check renders it)."""
    fmt = get_chat_format(NAME)
    text = "<|channel|>final<|message|>see <|channel|>final<|message|> and <|channel|>analysis<|message|><|return|>"
    message = fmt.assistant_message(text, [], "think <|channel|>analysis<|message|>")
    render(template_text(NAME), [USER, message, fmt.tool_message("error", None, 0), USER])


async def test_rollout_equals_the_full_render_but_the_dropped_analysis() -> None:
    tokenizer = harmony_tokenizer()
    turns = [
        (('<|channel|>analysis<|message|>I need the weather.<|end|><|start|>assistant to=functions.get_weather'
          '<|channel|>commentary json<|message|>{"city": "Paris"}'), "<|call|>"),
        (' to=functions.get_time<|channel|>commentary json<|message|>{"zone": "Europe/Paris"}', "<|call|>"),
        (("<|channel|>analysis<|message|>Both known.<|end|><|start|>assistant<|channel|>final<|message|>"
          "It is sunny in Paris, and 12:00."), "<|return|>"),
    ]
    traj = await conformance.rollout_against_render(tokenizer, NAME, turns)
    assert traj.num_turns == 3 and [c.name for c in traj.tool_calls()] == ["get_weather", "get_time"]
    assert traj.metadata["dropped_think_blocks"] == 1, "turn 1's analysis, which the template drops"
    assert conformance.final_answer(traj) == "It is sunny in Paris, and 12:00."
    assert traj.turns[0].reasoning == "I need the weather."
    masked = tokenizer.decode([i for i, m in zip(traj.response_ids, traj.loss_mask) if not m], skip_special_tokens=False)
    assert masked.count("<|start|>functions.get_time to=assistant") == 1, "a result is named after its call"


async def test_a_broken_call_is_answered_and_the_rollout_goes_on() -> None:
    """The template renders a tool result only after a call, so the error goes to the model as the
    user; the history (which differs from the ids there: the drift check warns) still renders."""
    tokenizer = harmony_tokenizer()
    turns = [(CALL + '{"a": 1,}', "<|call|>"), ("<|channel|>final<|message|>Sorry.", "<|return|>")]
    engine = conformance.ReplayEngine(tokenizer, turns)
    agent = Agent(None, None, engine=engine, tokenizer=tokenizer, chat_format=NAME, max_turns=2)
    traj = await agent.rollout([USER])
    assert traj.num_turns == 2 and traj.messages[2]["role"] == "user" and "not valid JSON" in traj.messages[2]["content"]
    assert conformance.final_answer(traj) == "Sorry."


def _repeated(marker: str, n: int) -> str:
    return marker * (n // 10)


HOSTILE = {  # text of n characters; a case of whole messages is parsed at a tenth (each is a Python step)
    "unclosed arguments": lambda n: CALL + '{"a": "' + "x" * n,
    "nested brackets in a call": lambda n: CALL + '{"a": ' + "[" * n + "<|call|>",
    "lone surrogates": lambda n: (CALL.replace(".f", ".\ud800") + '{"\udfff": "\ud83d"}<|call|>\ud800') * (n // 50),
    "markers in an argument": lambda n: CALL + '{"a": "' + "<|call|><|end|><|start|>" * (n // 20) + '"}<|call|>',
    "calls in reasoning": lambda n: "<|channel|>analysis to=functions.f<|message|>{}<|end|>" * (n // 50),
    "call headers": lambda n: CALL * (n // 40),
    "broken calls": lambda n: (CALL + "{x<|call|>") * (n // 40),
    **{f"{marker} repeated": functools.partial(_repeated, marker) for marker in MARKERS},
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_text_never_raises_and_stays_linear(case: str) -> None:
    parser = get_parser(NAME)
    size = 100_000 if "bracket" in case else 10_000_000 if "repeated" in case or "argument" in case else 1_000_000
    result = conformance.assert_bounded(parser, HOSTILE[case](size))
    assert len(result.calls) <= 8 and len(result.errors) <= 9
    conformance.assert_linear(parser, HOSTILE[case], n=200_000)


def test_one_grpo_step(tmp_path) -> None:
    conformance.train_one_step(harmony_tokenizer(), tmp_path)
