"""The llama4 family: turns the HF template (JSON after `<|python_start|>`) and vLLM's pythonic
template render parse back to the same calls and answer, a rollout equals the full render under
each, `auto` tells Llama 4 from Llama 3, and hostile text never raises and stays linear."""

from __future__ import annotations

from typing import Any

import pytest

from rlfactory_nb.chat import detect_chat_format, get_chat_format, get_parser
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from tests.chat import conformance
from tests.chat.encoders import template_file
from tests.chat.templates import TemplateOnly, render, template_text

NAME = "llama4"
TEMPLATES = {"hf": "llama4.jinja", "pythonic": "llama4_pythonic_vllm.jinja"}
SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|header_start|>", "<|header_end|>", "<|eot|>", "<|eom|>",
           "<|python_start|>", "<|python_end|>"]
WEATHER = ("get_weather", {"city": "Paris"})
NESTED = ("search", {"query": "café 東京 🚀 \"quoted\"", "filters": {"tags": ["a", "b"], "limit": 3}, "exact": True})
MARKERS_AS_DATA = ("write_file", {"text": "Calls end with <|python_end|> and ]) or }}; <|eot|> too."})
CASES = {
    "single": [WEATHER],
    "parallel": [WEATHER, ("get_time", {"zone": "Europe/Paris"})],
    "no arguments": [("now", {})],
    "nested and unicode": [NESTED],
    "markers inside a value": [MARKERS_AS_DATA],
}
USER = {"role": "user", "content": "What is the weather in Paris?"}


def llama4_tokenizer(style: str) -> Any:
    added = [(token, True) for token in SPECIAL]
    return build_tokenizer(added_tokens=added, eos_token="<|eot|>", bos_token="<|begin_of_text|>",
                           template=template_file(TEMPLATES[style]))


def sampled_turn(style: str, calls: list[tuple[str, dict]], content: str) -> str:
    """The template's render of the turn after its generation prompt, less the final `<|eot|>`."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [{"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls]
    template = template_file(TEMPLATES[style])
    prompt, full = render(template, [USER], add_generation_prompt=True), render(template, [USER, message])
    assert full.startswith(prompt) and full.endswith("<|eot|>")
    return full[len(prompt) : -len("<|eot|>")]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("content", ["", "Let me look that up."])
def test_the_hf_templates_turn_parses_back(case: str, content: str) -> None:
    text = sampled_turn("hf", CASES[case], content)
    result = get_chat_format(NAME).new_parser().parse(text)
    assert [(c.name, c.arguments) for c in result.calls] == CASES[case], text
    assert result.errors == [] and result.answer == content


@pytest.mark.parametrize("content", ["", "Let me look that up."])
def test_the_pythonic_templates_turn_parses_back(content: str) -> None:
    """vLLM's template writes every argument as a quoted string, so only string arguments round-trip."""
    calls = [WEATHER, ("get_time", {"zone": "Europe/Paris", "note": "a \\\"b\\\""})]
    text = sampled_turn("pythonic", calls, content)
    result = get_parser(NAME).parse(text)
    assert [c.name for c in result.calls] == ["get_weather", "get_time"] and result.errors == []
    assert result.calls[0].arguments == {"city": "Paris"} and result.answer == content


@pytest.mark.parametrize(
    "text, expected",
    [
        ('[get_weather(city="Paris"), get_time(zone="UTC", n=3, exact=true, x=None)]',
         [("get_weather", {"city": "Paris"}), ("get_time", {"zone": "UTC", "n": 3, "exact": True, "x": None})]),
        ('<|python_start|>{"name": "f", "parameters": {"a": [1, {"b": "}"}]}}<|python_end|>', [("f", {"a": [1, {"b": "}"}]})]),
        ('<|python_start|>[{"name": "f", "arguments": {}}, {"name": "g", "parameters": {}}]<|python_end|>', [("f", {}), ("g", {})]),
        ('{"name": "f", "parameters": {}}; {"name": "g", "parameters": {"x": 1}}', [("f", {}), ("g", {"x": 1})]),
        ('<|python_start|>[get_weather(city="Paris")]<|python_end|>', [WEATHER]),
        ('get_weather(city="Paris")<|eom|>', [WEATHER]),
        ('I will check.\n[get_weather(city="Paris")]', [WEATHER]),
    ],
)
def test_shapes_llama4_writes(text: str, expected: list) -> None:
    result = get_parser(NAME).parse(text)
    assert [(c.name, c.arguments) for c in result.calls] == expected and result.errors == []


@pytest.mark.parametrize(
    "text, message",
    [
        ('[get_weather(city="Par', "not closed by ]"),
        ('<|python_start|>{"name": "f", "parameters": {"a": 1', "not valid JSON"),
        ("[get_weather(__import__('os').system('ls'))]", "Pass arguments by name"),
        ("[get_weather(city=open('x').read())]", "must be a literal"),
        ('<|python_start|>{"city": "Paris"}', '"name"'),
    ],
)
def test_a_broken_call_is_an_error_and_never_runs(text: str, message: str) -> None:
    result = get_parser(NAME).parse(text)
    assert result.calls == [] and len(result.errors) == 1 and message in result.errors[0].message, result.errors


def test_text_is_the_answer() -> None:
    for text in ["It is sunny.", "Use [brackets] like this.", '{"city": "Paris"}', "see [f(x=1)] above.", "print(x)"]:
        result = get_parser(NAME).parse(text)
        assert result.calls == [] and result.errors == [] and result.answer == text


def test_truncated_at_every_token_never_yields_a_partial_call() -> None:
    text = sampled_turn("hf", [NESTED, WEATHER], "")
    parser = get_parser(NAME)
    for cut in conformance.truncations(text, llama4_tokenizer("hf")):
        result = parser.parse(cut)
        names = [c.name for c in result.calls]
        assert names in ([], ["search"], ["search", "get_weather"]), cut
        assert all(c.arguments == dict([NESTED, WEATHER])[c.name] for c in result.calls), cut
    pythonic = '[get_weather(city="Paris"), get_time(zone="Europe/Paris")]'
    for cut in conformance.truncations(pythonic, llama4_tokenizer("pythonic"))[:-1]:
        assert parser.parse(cut).calls == [], cut


def test_auto_tells_llama4_from_llama3() -> None:
    for file in TEMPLATES.values():
        assert detect_chat_format(TemplateOnly(template_file(file))).name == NAME
    assert detect_chat_format(TemplateOnly(template_text("llama3_1"))).name == "llama3"


HOSTILE = {
    "openers": lambda n: "<|python_start|>" * (n // 16),
    "brackets": lambda n: "[" * n,
    "pythonic openers": lambda n: "[f(" * (n // 3) + "]",
    "unclosed json": lambda n: '<|python_start|>{"name": "f", "parameters": {"a": "' + "x" * n,
    "lone surrogates": lambda n: ('{"name": "\ud800", "parameters": {"\udfff": "\ud83d"}}; ' * (n // 50)),
    "markers inside an argument": lambda n: '{"name": "f", "parameters": {"a": "' + "<|python_end|>]}" * (n // 17) + '"}}',
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_text_is_bounded_and_linear(case: str) -> None:
    make = HOSTILE[case]
    size = 10_000_000 if case in ("openers", "brackets") else 1_000_000
    result = conformance.assert_bounded(get_parser(NAME), make(size), seconds=30.0)
    assert len(result.calls) <= 8 and len(result.errors) <= 10
    conformance.assert_linear(get_parser(NAME), make, n=100_000)  # large enough to time above a loaded machine's noise


def _turns(style: str) -> list[tuple[str, str]]:
    if style == "hf":
        first = '<|python_start|><|python_end|>{"name": "get_weather", "parameters": {"city": "Paris"}}'
        second = '<|python_start|>Now the time.<|python_end|>{"name": "get_time", "parameters": {"zone": "Europe/Paris"}}'
    else:
        first, second = '[get_weather(city="Paris")]', 'Now the time.[get_time(zone="Europe/Paris")]'
    return [(first, "<|eot|>"), (second, "<|eot|>"), ("It is sunny in Paris, and 12:00.", "<|eot|>")]


@pytest.mark.parametrize("style", list(TEMPLATES))
async def test_rollout_equals_the_full_render(style: str) -> None:
    tokenizer = llama4_tokenizer(style)
    traj = await conformance.rollout_against_render(tokenizer, "auto", _turns(style))
    assert traj.num_turns == 3 and traj.metadata["drift_position"] == -1
    assert [c.name for t in traj.turns for c in t.calls] == ["get_weather", "get_time"]
    assert conformance.final_answer(traj) == "It is sunny in Paris, and 12:00."


async def test_a_sampled_eom_is_rendered_as_eot() -> None:
    turns = [(t, "<|eom|>" if i < 2 else "<|eot|>") for i, (t, _) in enumerate(_turns("hf"))]
    traj = await conformance.rollout_against_render(llama4_tokenizer("hf"), "auto", turns)
    assert traj.metadata["rewritten_tokens"] == 2


@pytest.mark.slow
def test_one_grpo_step(tmp_path) -> None:
    conformance.train_one_step(llama4_tokenizer("hf"), tmp_path)
