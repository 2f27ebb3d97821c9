"""The qwen2_5 family (Qwen2.5 Instruct): calls rendered by the reference template parse back to
the same calls and answer, truncated or hostile text never yields a wrong call, and a 3-turn
rollout's ids equal the template's full render."""

from __future__ import annotations

from typing import Any

import pytest

from rlfactory_nb.chat import detect_chat_format, get_chat_format, get_parser
from rlfactory_nb.models.presets.tokenizer import ADDED_TOKENS
from tests.chat import conformance
from tests.chat.templates import TemplateOnly, render, template_text

ADDED = ADDED_TOKENS[:22]  # Qwen2.5's added tokens end at <|file_sep|>: no <tool_response>, no <think>
WEATHER = ("get_weather", {"city": "Paris"})
NESTED = ("search", {"query": "café 東京 🚀 \"quoted\" \\ back", "filters": {"tags": ["a"], "limit": 3}, "exact": True})
MARKERS_AS_DATA = ("write_file", {"text": 'Calls end with </tool_call>\n and start with <tool_call>, "ok"?'})
CASES = {
    "single": ([WEATHER], ""),
    "parallel": ([WEATHER, ("get_time", {"zone": "Europe/Paris"})], ""),
    "no arguments": ([("now", {})], ""),
    "nested and unicode": ([NESTED], ""),
    "markers inside a value": ([MARKERS_AS_DATA], ""),
    "text before the call": ([WEATHER], "Let me look that up."),
    "answer only": ([], "It is sunny."),
}
USER = {"role": "user", "content": "What is the weather in Paris?"}


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return conformance.family_tokenizer("qwen2_5", ADDED, eos_token="<|im_end|>", pad_token="<|endoftext|>")


def sampled_turn(calls: list[tuple[str, dict]], content: str) -> str:
    """What the model samples for this assistant turn: the full render minus the generation prompt,
    up to <|im_end|>."""
    template = template_text("qwen2_5")
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [{"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls]
    prompt = render(template, [USER], add_generation_prompt=True)
    full = render(template, [USER, message])
    assert full.startswith(prompt), "the template renders the turn after its own generation prompt"
    return full[len(prompt) :].split("<|im_end|>")[0]


@pytest.mark.parametrize("case", list(CASES))
def test_rendered_turn_parses_back(case: str) -> None:
    calls, content = CASES[case]
    text = sampled_turn(calls, content)
    result = get_chat_format("qwen2_5").new_parser().parse(text)
    assert [(c.name, c.arguments) for c in result.calls] == calls, text
    assert result.errors == [] and result.answer == content and result.reasoning == ""


def test_think_tags_are_text_not_reasoning() -> None:
    """Qwen2.5 has no reasoning: a <think> it writes is answer text, and a call after it runs."""
    text = "<think>plan</think>\n" + sampled_turn([WEATHER], "")
    result = get_parser("qwen2_5").parse(text)
    assert [c.name for c in result.calls] == ["get_weather"] and result.calls_in_reasoning == 0
    assert result.reasoning == "" and result.answer == "<think>plan</think>"
    assert get_chat_format("qwen2_5").split_reasoning(text) == ("", text.strip())


def test_truncated_at_every_token_never_yields_a_partial_call(tokenizer) -> None:
    text = "Let me search.\n" + sampled_turn([NESTED], "")
    parser = get_parser("qwen2_5")
    opened = text.index("<tool_call>") + len("<tool_call>")
    for cut in conformance.truncations(text, tokenizer):
        result = parser.parse(cut)
        assert [(c.name, c.arguments) for c in result.calls] in ([], [NESTED]), cut
        if not result.calls:
            assert bool(result.errors) == (len(cut) >= opened), f"{cut!r}: {result.errors}"


@pytest.mark.parametrize(
    "text, message",
    [
        ('<tool_call>\n{"name": "f", "arguments": {"a": "x\n</tool_call>', "not valid JSON"),
        ('<tool_call>\n{"name": ["f"], "arguments": {}}\n</tool_call>', '"name" must be a non-empty string'),
        ('<tool_call>\n{"name": "f", "arguments": {"a": "</tool_call>"', "ended inside a <tool_call> block"),
        ('<tool_call>\n{"name": "f"\n<tool_call>\n', "missing its </tool_call>"),
    ],
)
def test_malformed_block_is_an_error_and_no_call(text: str, message: str) -> None:
    result = get_parser("qwen2_5").parse(text)
    assert result.calls == [] and result.errors and message in result.errors[0].message
    assert '"name": "<tool name>"' in result.errors[0].message, "every error shows the expected format"


HOSTILE = {  # (text of about n characters, the size checked for bounded time: 10 MB for marker floods)
    "an unclosed block": (lambda n: '<tool_call>\n{"name": "f", "arguments": {"a": "' + "x" * n, 2_000_000),
    "nested brackets in a call": (lambda n: '<tool_call>\n{"name": "f", "arguments": ' + "[" * n + "\n</tool_call>", 2_000_000),
    "lone surrogates": (lambda n: '<tool_call>\n{"name": "\ud800", "arguments": {"\udfff": 1}}\n</tool_call>\ud83d' * (n // 50), 2_000_000),
    "closing tags inside an unterminated string": (lambda n: '<tool_call>{"a": "' + "</tool_call>" * (n // 12), 10_000_000),
    "openers": (lambda n: "<tool_call>" * (n // 11), 10_000_000),
    "escaped quotes": (lambda n: '<tool_call>{"a": "' + '\\"' * (n // 2) + "</tool_call>", 10_000_000),
    "quotes and closes": (lambda n: '<tool_call>"</tool_call>' * (n // 24), 2_000_000),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_text_is_bounded_and_linear(case: str) -> None:
    parser, (make, size) = get_parser("qwen2_5"), HOSTILE[case]
    result = conformance.assert_bounded(parser, make(size))
    assert len(result.calls) <= 8 and len(result.errors) <= 10
    conformance.assert_linear(parser, make, n=100_000)


def test_a_non_string_name_and_100k_nested_brackets_are_errors() -> None:
    parser = get_parser("qwen2_5")
    deep = parser.parse('<tool_call>\n{"name": "f", "arguments": {"a": ' + "[" * 100_000 + "]" * 100_000 + "}}\n</tool_call>")
    assert deep.calls == [] and "nested too deeply" in deep.errors[0].message
    named = parser.parse('<tool_call>\n{"name": 7, "arguments": {}}\n</tool_call>')
    assert named.calls == [] and '"name" must be a non-empty string' in named.errors[0].message


async def test_three_turn_rollout_equals_the_full_render(tokenizer) -> None:
    turns = [
        (sampled_turn([WEATHER], ""), "<|im_end|>"),
        (sampled_turn([("get_time", {"zone": "Europe/Paris"})], "Now the time."), "<|im_end|>"),
        ("It is sunny in Paris, and 12:00.", "<|im_end|>"),
    ]
    traj = await conformance.rollout_against_render(tokenizer, "qwen2_5", turns)
    assert traj.num_turns == 3 and traj.metadata["drift_position"] == -1
    assert [r.content for r in traj.tool_results()] == ["sunny in Paris", "12:00 in Europe/Paris"]
    assert conformance.final_answer(traj) == "It is sunny in Paris, and 12:00."


def test_one_grpo_step_with_auto_detection(tokenizer, tmp_path) -> None:
    conformance.train_one_step(tokenizer, tmp_path)


def test_auto_picks_qwen2_5_and_keeps_qwen3_apart() -> None:
    assert detect_chat_format(TemplateOnly(template_text("qwen2_5"))).name == "qwen2_5"
    assert detect_chat_format(TemplateOnly(template_text("qwen3"))).name == "qwen3"
