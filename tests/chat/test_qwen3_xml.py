"""The qwen3_xml family (Qwen3-Coder, Qwen3.5/3.6/3.8): calls rendered by the reference templates
parse back to the same calls, answer and reasoning; hostile text never raises and stays linear."""

from __future__ import annotations

import gc
import time
from typing import Any

import pytest

from rlfactory_nb.chat import detect_chat_format, get_chat_format, get_parser
from tests.chat.templates import TemplateOnly, render, template_text

TEMPLATES = ["qwen3_coder", "qwen3_5", "qwen3_6", "qwen3_8"]
WEATHER = ("get_weather", {"city": "Paris"})
NESTED = ("search", {"query": "café 東京 🚀 \"quoted\"", "filters": {"tags": ["a", "b"], "limit": 3}, "exact": True})
MARKERS_AS_DATA = ("write_file", {"path": "docs.md", "text": "Calls end with </tool_call>; <function=x> and <think> too."})
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


def sampled_turn(template: str, calls: list[tuple[str, dict]], content: str, reasoning: str) -> tuple[str, bool]:
    """What the model samples for this assistant turn under `template` (the full render minus the
    generation prompt, up to <|im_end|>), and whether the prompt pre-filled <think>."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [{"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls]
    if reasoning:
        message["reasoning_content"] = reasoning
    prompt = render(template, [USER], add_generation_prompt=True)
    full = render(template, [USER, message])
    assert full.startswith(prompt), "the template renders the turn after its own generation prompt"
    return full[len(prompt) :].split("<|im_end|>")[0], prompt.endswith("<think>\n")


@pytest.mark.parametrize("name", TEMPLATES)
@pytest.mark.parametrize("case", list(CASES))
def test_rendered_turn_parses_back(name: str, case: str) -> None:
    template = template_text(name)
    calls, content, reasoning = CASES[case]
    text, prefilled = sampled_turn(template, calls, content, reasoning)
    result = get_chat_format("qwen3_xml").new_parser(starts_in_reasoning=prefilled).parse(text)
    assert [(c.name, c.arguments) for c in result.calls] == calls, text
    assert result.errors == []
    assert result.answer == content
    thinks = name != "qwen3_coder"  # Qwen3-Coder's template has no think block
    assert result.reasoning == (reasoning if thinks else "")
    assert result.calls_in_reasoning == 0
    assert get_chat_format("qwen3_xml").split_reasoning(text, prefilled) == (result.reasoning, _outside(text, prefilled))


def _outside(text: str, prefilled: bool) -> str:
    return text.split("</think>", 1)[1].strip() if prefilled or text.startswith("<think>") else text.strip()


@pytest.mark.parametrize("name, family", [("qwen3", "qwen3"), ("qwen3_5", "qwen3_xml"), ("qwen3_6", "qwen3_xml"), ("qwen3_8", "qwen3_xml")])
def test_the_record_says_whether_the_generation_prompt_prefills_reasoning(name: str, family: str) -> None:
    prompt = render(template_text(name), [USER], add_generation_prompt=True, enable_thinking=True)
    assert prompt.endswith("<think>\n") == get_chat_format(family).prefills_reasoning


@pytest.mark.parametrize("name", TEMPLATES)
def test_auto_picks_qwen3_xml(name: str) -> None:
    assert detect_chat_format(TemplateOnly(template_text(name))).name == "qwen3_xml"


def test_auto_keeps_qwen3_for_hermes_json_templates() -> None:
    assert detect_chat_format(TemplateOnly(template_text("qwen3"))).name == "qwen3"


def test_truncated_at_every_character_never_yields_a_partial_call() -> None:
    text, prefilled = sampled_turn(template_text("qwen3_5"), [NESTED], "Let me search.", "Search it.")
    parser = get_parser("qwen3_xml", starts_in_reasoning=prefilled)
    complete = text.index("</function>") + len("</function>")
    opened = text.index("<tool_call>") + len("<tool_call>")
    for cut in range(len(text) + 1):
        result = parser.parse(text[:cut])
        if cut >= complete:
            assert [(c.name, c.arguments) for c in result.calls] == [NESTED], cut
        else:
            assert result.calls == [], f"a call from a block cut at {cut}: {text[:cut]!r}"
            assert bool(result.errors) == (cut >= opened), f"cut at {cut}: {result.errors}"


@pytest.mark.parametrize(
    "text, message",
    [
        ("<tool_call>\n<function=f>\n<parameter=a>\nvalue", "ended inside <parameter=a>"),
        ("<tool_call>\n<function=f>\n</tool_call> after", "Unexpected text inside <function=f>"),
        ("<tool_call>\n{\"name\": \"f\"}\n</tool_call>", "must start with <function=TOOL_NAME>"),
        ("<tool_call>\n<function=>\n</function>\n</tool_call>", "has no tool name"),
        ("<tool_call>\n<function=f\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>", "not closed with '>'"),
        ("<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n<parameter=a>\n2\n</parameter>\n</function>\n</tool_call>", "given twice"),
        ("<tool_call>\n<function=f>\n</function>\nnot a close", "Expected </tool_call>"),
    ],
)
def test_malformed_block_is_an_error_and_no_call(text: str, message: str) -> None:
    result = get_parser("qwen3_xml").parse(text)
    assert result.calls == []
    assert len(result.errors) == 1 and message in result.errors[0].message
    assert "<function=TOOL_NAME>" in result.errors[0].message, "every error shows the expected format"


def test_a_broken_block_does_not_swallow_the_next_call() -> None:
    good = "<tool_call>\n<function=f>\n</function>\n</tool_call>"
    result = get_parser("qwen3_xml").parse("<tool_call>\n<function=g\n" + good)
    assert [c.name for c in result.calls] == ["f"] and len(result.errors) == 1


def test_calls_inside_reasoning_are_counted_not_run() -> None:
    draft = "<tool_call>\n<function=f>\n</function>\n</tool_call>"
    parser = get_parser("qwen3_xml")
    opened = parser.parse(f"<think>\nmaybe {draft}\n</think>\n\nNo call needed.")
    assert opened.calls == [] and opened.calls_in_reasoning == 1 and opened.answer == "No call needed."
    prefilled = get_parser("qwen3_xml", starts_in_reasoning=True).parse(f"maybe {draft}</think>\n\n{draft}")
    assert [c.name for c in prefilled.calls] == ["f"] and prefilled.calls_in_reasoning == 1
    assert prefilled.reasoning == f"maybe {draft}"
    cut_off = get_parser("qwen3_xml", starts_in_reasoning=True).parse(f"still thinking {draft}")
    assert cut_off.calls == [] and cut_off.answer == "" and cut_off.calls_in_reasoning == 1


def test_a_later_think_tag_is_text() -> None:
    result = get_parser("qwen3_xml").parse("Sure.\n<think>not reasoning</think>")
    assert result.reasoning == "" and result.answer == "Sure.\n<think>not reasoning</think>"


def test_values_read_as_json_where_they_can() -> None:
    block = "<tool_call>\n<function=f>\n" + "".join(
        f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in
        [("s", "Paris"), ("i", "42"), ("b", "True"), ("j", "true"), ("o", '{"a": [1]}'), ("bad", "{not json"),
         ("multi", "line one\nline two")]
    ) + "</function>\n</tool_call>"
    (call,) = get_parser("qwen3_xml").parse(block).calls
    assert call.arguments == {
        "s": "Paris", "i": 42, "b": True, "j": True, "o": {"a": [1]}, "bad": "{not json", "multi": "line one\nline two",
    }


HOSTILE = {
    "100k nested brackets in a value": "<tool_call>\n<function=f>\n<parameter=a>\n" + "[" * 100_000 + "\n</parameter>\n</function>\n</tool_call>",
    "100k nested brackets as text": "{" * 100_000,
    "lone surrogates": "<tool_call>\n<function=\ud800>\n<parameter=\udfff>\n\ud83d\n</parameter>\n</function>\n</tool_call>\ud800" * 1000,
    "10 MB of <tool_call>": "<tool_call>" * 1_000_000,
    "10 MB of <function=": "<tool_call>" + "<function=" * 1_000_000,
    "10 MB of parameters": "<tool_call>\n<function=f>\n" + "<parameter=a>\n" * 700_000,
    "10 MB of closes": "</parameter></function></tool_call>" * 300_000,
    "10 MB of think tags": "<think></think>" * 700_000,
    "10 MB of whitespace in a block": "<tool_call>" + " \n" * 5_000_000 + "<function=f>",
    "unclosed names, many blocks": "<tool_call><function=a\n" * 400_000,
}


def _parse_seconds(text: str) -> float:
    """The best of three parses, the collector paused: a collection of the suite's heap, or another
    test's burst on the shared cores, inside one timing is noise, not the parser's cost."""
    best = float("inf")
    gc.collect()
    gc.disable()
    try:
        for _ in range(3):
            started = time.perf_counter()
            result = get_parser("qwen3_xml").parse(text)
            best = min(best, time.perf_counter() - started)
            assert len(result.calls) <= 8 and len(result.errors) <= 10
    finally:
        gc.enable()
    return best


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_text_never_raises_and_stays_linear(case: str) -> None:
    """Bounded time, judged by growth: four times the text may take at most about four times as
    long (quadratic work would take sixteen), with slack for a machine busy with other tests."""
    text = HOSTILE[case]
    small, full = _parse_seconds(text[: len(text) // 4]), _parse_seconds(text)
    assert full < 30.0, f"{case}: {full:.1f} s"
    assert full < 8 * small + 0.5, f"{case}: {small:.2f} s for a quarter, {full:.2f} s for all: not linear"


def test_a_bare_function_block_is_a_call_and_a_broken_one_is_text() -> None:
    """Qwen3-Coder also writes `<function=...>` without its `<tool_call>` wrapper (vLLM reads it);
    one that does not read as a whole call is text: never run (docs/decisions.md)."""
    parser = get_parser("qwen3_xml")
    result = parser.parse("Looking.\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\nDone.")
    assert [(c.name, c.arguments) for c in result.calls] == [("get_weather", {"city": "Paris"})]
    assert result.errors == [] and result.answer == "Looking.\nDone."
    cut = parser.parse("Looking.\n<function=get_weather>\n<parameter=city>\nPar")
    assert cut.calls == [] and cut.errors == [] and cut.answer.startswith("Looking.")
    prose = parser.parse("Write <function=NAME> blocks.")
    assert prose.calls == [] and prose.errors == [] and prose.answer == "Write <function=NAME> blocks."


def test_an_unclosed_parameter_ends_where_the_next_one_starts() -> None:
    text = "<tool_call>\n<function=f>\n<parameter=a>\n1\n<parameter=b>\nx y\n</function>\n</tool_call>"
    result = get_parser("qwen3_xml").parse(text)
    assert [(c.name, c.arguments) for c in result.calls] == [("f", {"a": 1, "b": "x y"})] and result.errors == []
    closed = "<tool_call>\n<function=f>\n<parameter=a>\nsee </function> and <parameter=b> here\n</parameter>\n</function>\n</tool_call>"
    assert get_parser("qwen3_xml").parse(closed).calls[0].arguments == {"a": "see </function> and <parameter=b> here"}


def test_values_are_typed_by_the_schema_when_given() -> None:
    from rlfactory_nb.types import ToolSpec

    text = ("<tool_call>\n<function=label>\n<parameter=text>\n3\n</parameter>\n<parameter=n>\n7\n</parameter>\n"
            '<parameter=opts>\n{"a": 1}\n</parameter>\n<parameter=flag>\nTrue\n</parameter>\n</function>\n</tool_call>')
    schema = {"type": "object", "properties": {"text": {"type": "string"}, "n": {"type": "integer"},
                                                "opts": {"type": "string"}, "flag": {"type": "boolean"}}}
    untyped = get_parser("qwen3_xml").parse(text).calls[0].arguments
    assert untyped == {"text": 3, "n": 7, "opts": {"a": 1}, "flag": True}, "without schemas: what the text reads as"
    typed = get_parser("qwen3_xml").parse(text, tools=[ToolSpec("label", "", schema)]).calls[0].arguments
    assert typed == {"text": "3", "n": 7, "opts": '{"a": 1}', "flag": True}
    assert all(type(v) in (str, int, bool, dict) for v in typed.values()), "no Untyped leaks out"
