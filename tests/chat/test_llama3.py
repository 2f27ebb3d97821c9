"""The llama3 family (Llama 3.1 / 3.2): a call is the whole message as JSON, optionally after
<|python_tag|>; calls rendered by the reference templates parse back, anything else stays an answer
or is a reported broken call, and a 3-turn rollout's ids equal the full render up to the record's
<|eom_id|> -> <|eot_id|>. Both templates take one call per turn (3.1's raises on more), so only
single calls are rendered here."""

from __future__ import annotations

from typing import Any

import pytest

from rlfactory_nb.chat import detect_chat_format, get_chat_format, get_parser
from tests.chat import conformance
from tests.chat.templates import TemplateOnly, render, template_text

TEMPLATES = ["llama3_1", "llama3_2"]
SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>",
           "<|eot_id|>", "<|python_tag|>", "<|finetune_right_pad_id|>"]  # all special in Llama 3's tokenizer
BOS = "<|begin_of_text|>"
WEATHER = ("get_weather", {"city": "Paris"})
NESTED = ("search", {"query": "café 東京 🚀 \"quoted\" \\ back", "filters": {"tags": ["a"], "limit": 3}, "exact": True})
MARKERS_AS_DATA = ("write_file", {"text": '<|python_tag|>{"name": "x", "parameters": {}} ends a call'})
CASES = {
    "single": ([WEATHER], ""),
    "no arguments": ([("now", {})], ""),
    "nested and unicode": ([NESTED], ""),
    "markers inside a value": ([MARKERS_AS_DATA], ""),
    "answer only": ([], "It is sunny."),
    "an answer that is JSON": ([], '{"city": "Paris", "name": "Paris"}'),
}
USER = {"role": "user", "content": "What is the weather in Paris?"}


def tokenizer_for(name: str) -> Any:
    return conformance.family_tokenizer(
        name, [(token, True) for token in SPECIAL], eos_token="<|eot_id|>", bos_token=BOS,
        pad_token="<|finetune_right_pad_id|>",
    )


def sampled_turn(name: str, calls: list[tuple[str, dict]], content: str) -> str:
    """What the model samples for this assistant turn: the full render minus the generation prompt,
    up to <|eot_id|>."""
    template = template_text(name)
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [{"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls]
    prompt = render(template, [USER], add_generation_prompt=True, bos_token=BOS)
    full = render(template, [USER, message], bos_token=BOS)
    assert full.startswith(prompt), "the template renders the turn after its own generation prompt"
    return full[len(prompt) :].split("<|eot_id|>")[0]


@pytest.mark.parametrize("name", TEMPLATES)
@pytest.mark.parametrize(
    "case, tag", [(case, "") for case in CASES] + [(case, "<|python_tag|>") for case in CASES if CASES[case][0]]
)
def test_rendered_turn_parses_back(name: str, case: str, tag: str) -> None:
    calls, content = CASES[case]
    text = tag + sampled_turn(name, calls, content)
    result = get_chat_format("llama3").new_parser().parse(text)
    assert [(c.name, c.arguments) for c in result.calls] == calls, text
    assert result.errors == [] and result.answer == content and result.reasoning == ""


def test_the_templates_take_one_call_per_turn_and_a_list_is_not_run() -> None:
    two = [WEATHER, ("get_time", {"zone": "UTC"})]
    with pytest.raises(Exception, match="only supports single tool-calls"):
        sampled_turn("llama3_1", two, "")
    listed = '[{"name": "get_weather", "parameters": {}}, {"name": "get_time", "parameters": {}}]'
    result = get_parser("llama3").parse(listed)
    assert result.calls == [] and "list of 2 calls" in result.errors[0].message


@pytest.mark.parametrize(
    "text",
    ['Here: {"name": "f", "parameters": {}}', '{"name": "Paris", "country": "France"}', "{ not json", "[1, 2]", "{}"],
)
def test_text_that_is_not_a_whole_message_call_stays_an_answer(text: str) -> None:
    result = get_parser("llama3").parse(text)
    assert result.calls == [] and result.errors == [] and result.answer == text


@pytest.mark.parametrize("name", TEMPLATES)
@pytest.mark.parametrize("tag", ["", "<|python_tag|>"])
def test_truncated_at_every_token_never_yields_a_partial_call(name: str, tag: str) -> None:
    tokenizer = tokenizer_for(name)
    text = tag + sampled_turn(name, [NESTED], "")
    parser = get_parser("llama3")
    for cut in conformance.truncations(text, tokenizer):
        result = parser.parse(cut)
        assert result.calls == [], cut
        if (tag and cut) or cut.startswith('{"name":'):
            assert result.errors, f"a cut call is reported: {cut!r}"
    assert [(c.name, c.arguments) for c in parser.parse(text).calls] == [NESTED]


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"name": "f", "parameters": {"a": 1}', "ended inside the JSON call"),
        ('{"name": "f", "parameters": {"a": "unterminated', "ended inside the JSON call"),
        ('{"name": 7, "parameters": {}}', '"name" must be a non-empty string'),
        ('{"name": "f", "parameters": [1]}', '"parameters" must be a JSON object'),
        ('{"name": "f", "arguments": "nope"}', '"arguments" is a string that is not valid JSON'),
        ('{"name": "f", "parameters": {}}; {"name": "g", "parameters": {}}', "extra text after the JSON value"),
        ('<|python_tag|>brave_search.call(query="x")', "not valid JSON"),
        ('<|python_tag|>{"answer": 1}', "must be followed by a JSON call"),
        ('Sure. <|python_tag|>{"name": "f", "parameters": {}}', "Text comes before <|python_tag|>"),
    ],
)
def test_malformed_call_is_an_error_and_no_call(text: str, message: str) -> None:
    result = get_parser("llama3").parse(text)
    assert result.calls == [] and len(result.errors) == 1 and message in result.errors[0].message
    assert '"parameters": {<arguments' in result.errors[0].message, "every error shows the expected format"


def test_decoding_keeps_python_tag_and_drops_the_turn_end() -> None:
    tokenizer = tokenizer_for("llama3_1")
    call = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
    ids = tokenizer.encode(f"<|python_tag|>{call}<|eom_id|>", add_special_tokens=False)
    text = get_chat_format("llama3").decode(tokenizer, ids)
    assert text == f"<|python_tag|>{call}"
    assert [c.name for c in get_parser("llama3").parse(text).calls] == ["get_weather"]
    eom, eot = tokenizer.convert_tokens_to_ids(["<|eom_id|>", "<|eot_id|>"])
    assert {eom, eot} <= set(get_chat_format("llama3").end_of_turn_ids(tokenizer))


HOSTILE = {
    "an unclosed call": lambda n: '{"name": "f", "parameters": {"a": "' + "x" * n,
    "nested brackets in a call": lambda n: '{"name": "f", "parameters": ' + "[" * n,
    "lone surrogates": lambda n: '{"name": "\ud800", "parameters": {"\udfff": "' + "\ud83d" * n + '"}}',
    "python tags": lambda n: "<|python_tag|>" * (n // 14),
    "call openings": lambda n: '{"name": ' * (n // 9),
    "whitespace then a call": lambda n: " \n" * (n // 2) + '{"name": "f", "parameters": {}}',
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_text_is_bounded_and_linear(case: str) -> None:
    parser = get_parser("llama3")
    result = conformance.assert_bounded(parser, HOSTILE[case](10_000_000))
    assert len(result.calls) <= 1 and len(result.errors) <= 1
    conformance.assert_linear(parser, HOSTILE[case], n=100_000)


def test_100k_nested_brackets_and_a_non_string_name_are_errors() -> None:
    deep = get_parser("llama3").parse('{"name": "f", "parameters": {"a": ' + "[" * 100_000 + "]" * 100_000 + "}}")
    assert deep.calls == [] and "nested too deeply" in deep.errors[0].message
    named = get_parser("llama3").parse('<|python_tag|>{"name": ["f"], "parameters": {}}')
    assert named.calls == [] and '"name" must be a non-empty string' in named.errors[0].message


@pytest.mark.parametrize("name", TEMPLATES)
async def test_three_turn_rollout_equals_the_full_render(name: str) -> None:
    """The first call ends with <|eom_id|> (ipython mode), which the template renders as <|eot_id|>:
    the one difference the record expects. The date in the system prompt is rendered the same way
    for the prompt, the deltas and the full render (3.2 reads today's date)."""
    tokenizer = tokenizer_for(name)
    turns = [
        (sampled_turn(name, [WEATHER], ""), "<|eom_id|>"),
        (sampled_turn(name, [("get_time", {"zone": "Europe/Paris"})], ""), "<|eot_id|>"),
        ("It is sunny in Paris, and 12:00.", "<|eot_id|>"),
    ]
    traj = await conformance.rollout_against_render(tokenizer, "llama3", turns)
    assert traj.num_turns == 3
    assert traj.metadata["drift_position"] >= 0, "the <|eom_id|> differs, and counts as expected drift (checked above)"
    assert [r.content for r in traj.tool_results()] == ["sunny in Paris", "12:00 in Europe/Paris"]
    masked = tokenizer.decode([i for i, m in zip(traj.response_ids, traj.loss_mask) if not m])
    # role "tool" renders as ipython, a string result JSON-quoted (the template's `is iterable` test)
    assert '<|start_header_id|>ipython<|end_header_id|>\n\n"sunny in Paris"<|eot_id|>' in masked
    assert conformance.final_answer(traj) == "It is sunny in Paris, and 12:00."


def test_one_grpo_step_with_auto_detection(tmp_path) -> None:
    conformance.train_one_step(tokenizer_for("llama3_2"), tmp_path)


@pytest.mark.parametrize("name", TEMPLATES)
def test_auto_picks_llama3(name: str) -> None:
    assert detect_chat_format(TemplateOnly(template_text(name))).name == "llama3"
