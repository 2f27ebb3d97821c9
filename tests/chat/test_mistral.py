"""The mistral family (tokenizer v15 reference template, and the older v3-v11 call shapes): calls
rendered by the template parse back to the same calls, answer and reasoning; truncated and broken
blocks never yield a call; hostile text never raises and stays linear; a 3-turn rollout equals the
full render; one GRPO step runs on the family's tokenizer."""

from __future__ import annotations

from typing import Any

import pytest

from rlfactory_nb.chat import detect_chat_format, get_chat_format, get_parser
from tests.chat import conformance
from tests.chat.templates import TemplateOnly, render, template_text

TEMPLATE = "mistral"
CONTROL_TOKENS = (
    "[INST]", "[/INST]", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]", "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]",
    "[MODEL_SETTINGS]", "[/MODEL_SETTINGS]",
)
WEATHER = ("get_weather", {"city": "Paris"})
NESTED = ("search", {"query": "café 東京 🚀 \"quoted\"", "filters": {"tags": ["a", "b"], "limit": 3}, "exact": True})
MARKERS_AS_DATA = ("write_file", {"path": "docs.md", "text": "Calls look like [TOOL_CALLS]f[ARGS]{} and } ] [THINK]."})
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
V7_LIST = (
    '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abc123xyz"}, '
    '{"name": "now", "arguments": "{}", "id": "abc123xy0"}]'
)
USER = {"role": "user", "content": "What is the weather in Paris?"}


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    """The tiny BPE with Mistral's control tokens, all special as in Mistral's tokenizers."""
    return conformance.family_tokenizer(TEMPLATE, [(t, True) for t in CONTROL_TOKENS], "</s>", bos_token="<s>")


def sampled_turn(calls: list[tuple[str, dict]], content: str, reasoning: str) -> str:
    """What the model samples for this assistant turn: the full render minus the prompt, up to </s>.
    Magistral writes its reasoning inline, first, and the template renders content as given."""
    template = template_text(TEMPLATE)
    message: dict[str, Any] = {"role": "assistant", "content": f"[THINK]{reasoning}[/THINK]{content}" if reasoning else content}
    if calls:
        message["tool_calls"] = [{"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls]
    prompt = render(template, [USER], add_generation_prompt=True, bos_token="<s>", eos_token="</s>")
    full = render(template, [USER, message], bos_token="<s>", eos_token="</s>")
    assert full.startswith(prompt), "the template renders the turn after its own prompt"
    return full[len(prompt) :].split("</s>")[0]


@pytest.mark.parametrize("case", list(CASES))
def test_rendered_turn_parses_back(case: str) -> None:
    calls, content, reasoning = CASES[case]
    text = sampled_turn(calls, content, reasoning)
    result = get_parser("mistral").parse(text)
    assert [(c.name, c.arguments) for c in result.calls] == calls, text
    assert result.errors == [] and result.calls_in_reasoning == 0
    assert (result.answer, result.reasoning) == (content, reasoning)
    assert get_chat_format("mistral").split_reasoning(text)[0] == reasoning


@pytest.mark.parametrize(
    "text, calls",
    [
        (V7_LIST, [WEATHER, ("now", {})]),
        ('[TOOL_CALLS]get_weather[CALL_ID]abc123xyz[ARGS]{"city": "Paris"}', [WEATHER]),
    ],
    ids=["v3-v7 JSON list", "v11 call id"],
)
def test_older_call_shapes_parse(text: str, calls: list) -> None:
    result = get_parser("mistral").parse(f"Sure.{text}")
    assert [(c.name, c.arguments) for c in result.calls] == calls
    assert result.errors == [] and result.answer == "Sure."


def test_the_template_has_no_generation_prompt_to_prefill_reasoning() -> None:
    prompt = render(template_text(TEMPLATE), [USER], add_generation_prompt=True, bos_token="<s>")
    assert prompt.endswith("[/INST]") and not get_chat_format("mistral").prefills_reasoning


def test_auto_picks_mistral() -> None:
    assert detect_chat_format(TemplateOnly(template_text(TEMPLATE))).name == "mistral"


def test_truncated_at_every_token_never_yields_a_partial_call(tokenizer: Any) -> None:
    text = sampled_turn([NESTED, WEATHER], "Let me search.", "Search it.")
    parser = get_parser("mistral")
    complete = [text.index("[TOOL_CALLS]get_weather"), len(text)]  # the ends of the two calls
    for cut in conformance.truncations(text, tokenizer):
        result = parser.parse(cut)
        expected = [call for call, end in zip([NESTED, WEATHER], complete) if len(cut) >= end]
        assert [(c.name, c.arguments) for c in result.calls] == expected, cut
        assert bool(result.errors) == (cut.count("[TOOL_CALLS]") > len(expected)), cut


@pytest.mark.parametrize(
    "text, message",
    [
        ('[TOOL_CALLS]f[ARGS]{"a": "value', "ended inside the [ARGS] of 'f'"),
        ("[TOOL_CALLS]get_weather", "ended after [TOOL_CALLS] before [ARGS]"),
        ('[TOOL_CALLS]get weather[ARGS]{"a": 1}', "Expected [ARGS] after the tool name 'get'"),
        ('[TOOL_CALLS][ARGS]{"a": 1}', "must be followed by the tool name"),
        ('[TOOL_CALLS]f[ARGS]{"a": 1,,}', "Could not read the [ARGS] of 'f'"),
        ('[TOOL_CALLS]f[ARGS]["a"]', "must be a JSON object, got a JSON array"),
        ('[TOOL_CALLS][{"name": 5, "arguments": {}}]', '"name" must be a non-empty string, got a JSON number'),
        ('[TOOL_CALLS][{"name": "f", "arguments": [1]}]', "must be a JSON object, got a JSON array"),
        ("[TOOL_CALLS][]", "is empty"),
        ('[TOOL_CALLS]f[ARGS]"text"', "Expected a JSON object as the [ARGS] of 'f'"),
        ("[TOOL_CALLS]f[ARGS]" + "[" * 5000 + "]" * 5000, "nested too deeply"),
    ],
)
def test_malformed_block_is_an_error_and_no_call(text: str, message: str) -> None:
    result = get_parser("mistral").parse(text)
    assert result.calls == []
    assert len(result.errors) == 1 and message in result.errors[0].message
    assert "[TOOL_CALLS]TOOL_NAME[ARGS]" in result.errors[0].message, "every error shows the format"


def test_a_broken_block_does_not_swallow_the_next_call() -> None:
    result = get_parser("mistral").parse('[TOOL_CALLS]f[ARGS]{oops}[TOOL_CALLS]g[ARGS]{"a": 1} after')
    assert [(c.name, c.arguments) for c in result.calls] == [("g", {"a": 1})] and len(result.errors) == 1
    assert result.answer == "after"


def test_calls_inside_reasoning_are_counted_not_run() -> None:
    draft = '[TOOL_CALLS]f[ARGS]{"a": 1}'
    result = get_parser("mistral").parse(f"[THINK]maybe {draft}[/THINK]{draft}")
    assert [c.name for c in result.calls] == ["f"] and result.calls_in_reasoning == 1
    cut_off = get_parser("mistral").parse(f"[THINK]still thinking {draft}")
    assert cut_off.calls == [] and cut_off.answer == "" and cut_off.calls_in_reasoning == 1
    later = get_parser("mistral").parse("Sure.[THINK]not reasoning[/THINK]")
    assert later.reasoning == "" and later.answer == "Sure.[THINK]not reasoning[/THINK]"


def test_at_most_max_calls_run() -> None:
    result = get_parser("mistral", max_calls=2).parse("[TOOL_CALLS]f[ARGS]{}" * 3)
    assert len(result.calls) == 2 and "only the first 2 were run" in result.errors[0].message


HOSTILE = {
    "unclosed marker": lambda n: "[TOOL_CALLS]f[ARGS]{\"a\": \"" + "x" * n,
    "nested brackets in a call": lambda n: "[TOOL_CALLS]f[ARGS]" + "[" * n,
    "closed nested brackets in a call": lambda n: "[TOOL_CALLS]f[ARGS]" + "[" * n + "]" * n,
    "nested objects in a call": lambda n: "[TOOL_CALLS]f[ARGS]" + '{"a":' * n,
    "lone surrogates": lambda n: "[TOOL_CALLS]\ud800[ARGS]{\"\udfff\": \"\ud83d\"}[TOOL_CALLS]f[ARGS]{\"a\": \"\ud800\"}" * (n // 40),
    "a marker inside an argument": lambda n: '[TOOL_CALLS]f[ARGS]{"a": "[TOOL_CALLS]' * (n // 30),
    "a call inside reasoning": lambda n: "[THINK]" + "[TOOL_CALLS]f[ARGS]{}" * (n // 20),
    "a name that is not a string": lambda n: '[TOOL_CALLS][{"name": 5}, {"name": null}]' * (n // 40),
    "names without [ARGS]": lambda n: "[TOOL_CALLS]f x" * (n // 15),
    "markers": lambda n: "[TOOL_CALLS]" * (n // 12),
    "[ARGS] markers": lambda n: "[TOOL_CALLS]f" + "[ARGS]" * (n // 6),
    "unterminated strings over later calls": lambda n: '[TOOL_CALLS]f[ARGS]{"a": "' + "[TOOL_CALLS]f[ARGS]{}" * (n // 20),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_text_is_bounded_and_linear(case: str) -> None:
    parser = get_parser("mistral")
    result = conformance.assert_bounded(parser, HOSTILE[case](100_000))
    assert len(result.calls) <= 8 and len(result.errors) <= 10
    conformance.assert_linear(parser, HOSTILE[case])


def test_ten_megabytes_of_markers_is_bounded() -> None:
    result = conformance.assert_bounded(get_parser("mistral"), "[TOOL_CALLS]" * 850_000, seconds=10.0)
    assert result.calls == [] and len(result.errors) == 2  # the run of bare markers, and the last one
    assert result.errors[0].message.startswith("849999 [TOOL_CALLS] with no call after it")


async def test_three_turn_rollout_equals_the_full_render(tokenizer: Any) -> None:
    turns = [
        ('[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', "</s>"),
        ('I will check the time too.[TOOL_CALLS]get_time[ARGS]{"zone": "Europe/Paris"}', "</s>"),
        ("[THINK]Both tools answered.[/THINK]It is sunny in Paris and 12:00 there.", "</s>"),
    ]
    traj = await conformance.rollout_against_render(tokenizer, "mistral", turns)
    assert traj.metadata["drift_position"] == -1, "the ids equal the template's full render"
    assert [c.name for c in traj.tool_calls()] == ["get_weather", "get_time"]
    assert conformance.final_answer(traj) == "It is sunny in Paris and 12:00 there."
    ids = [call["id"] for m in traj.messages if m["role"] == "assistant" for call in m.get("tool_calls", [])]
    answered = [m["tool_call_id"] for m in traj.messages if m["role"] == "tool"]
    assert ids == answered and all(len(i) == 9 and i.isalnum() for i in ids), "the ids v3-v11 templates need"
    masked = tokenizer.decode([i for i, m in zip(traj.response_ids, traj.loss_mask) if not m])
    assert masked == "[TOOL_RESULTS]sunny in Paris[/TOOL_RESULTS][TOOL_RESULTS]12:00 in Europe/Paris[/TOOL_RESULTS]"


def test_one_grpo_step(tokenizer: Any, tmp_path) -> None:
    conformance.train_one_step(tokenizer, tmp_path)
