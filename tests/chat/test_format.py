"""The ChatFormat record and its registry: look-up, `auto` detection, stop ids, decoding, reasoning."""

from __future__ import annotations

import dataclasses

import pytest

from rlfactory_nb.chat import chat_format_names, detect_chat_format, get_chat_format, resolve_chat_format
from rlfactory_nb.chat.reasoning import ReasoningMarkers, split
from rlfactory_nb.errors import ChatFormatError, ConfigError
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from tests.chat.templates import TemplateOnly, template_text

THINK = ReasoningMarkers("<think>", "</think>")


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def test_lookup_by_name_and_closest_name_on_a_typo() -> None:
    assert get_chat_format("qwen3").name == "qwen3"
    with pytest.raises(ChatFormatError, match=r"'qwen33'.*did you mean 'qwen3'.*known formats: auto, .*qwen3") as err:
        get_chat_format("qwen33")
    assert isinstance(err.value, ConfigError) and "rollout.chat_format" in str(err.value)


def test_auto_picks_qwen3_for_qwen3s_template_and_the_tiny_preset(tokenizer) -> None:
    assert detect_chat_format(TemplateOnly(template_text("qwen3"))).name == "qwen3"
    assert detect_chat_format(tokenizer).name == "qwen3"
    assert resolve_chat_format("auto", tokenizer).name == "qwen3"


REFERENCE_FAMILIES = {
    "qwen3": "qwen3", "qwen3_coder": "qwen3_xml", "qwen3_5": "qwen3_xml", "qwen3_6": "qwen3_xml",
    "qwen3_8": "qwen3_xml", "qwen2_5": "qwen2_5", "llama3_1": "llama3", "llama3_2": "llama3",
    "mistral": "mistral", "deepseek_v3": "deepseek_v3", "deepseek_r1": "deepseek_v3",
    "deepseek_v3_1": "deepseek_v3", "glm4_5": "glm4_5", "kimi_k2": "kimi_k2", "gpt_oss": "gpt_oss",
    "gemma4": "gemma4",
}
PLAIN_TEMPLATE = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"


@pytest.mark.parametrize("name", list(REFERENCE_FAMILIES))
def test_auto_picks_the_family_of_every_reference_template(name: str) -> None:
    assert detect_chat_format(TemplateOnly(template_text(name))).name == REFERENCE_FAMILIES[name]


def test_auto_refuses_a_template_of_no_registered_family() -> None:
    with pytest.raises(ChatFormatError, match="matches no known model family") as err:
        detect_chat_format(TemplateOnly(PLAIN_TEMPLATE))
    for known in chat_format_names():
        assert known in str(err.value), "the error lists every known format"
    assert "set rollout.chat_format" in str(err.value)


def test_auto_without_a_template_says_so() -> None:
    with pytest.raises(ChatFormatError, match="has no chat template"):
        detect_chat_format(TemplateOnly(None))


def test_stop_ids_are_eos_and_the_familys_end_of_turn_tokens(tokenizer) -> None:
    vocab = tokenizer.get_vocab()
    ids = get_chat_format("qwen3").end_of_turn_ids(tokenizer)
    assert ids == tuple(dict.fromkeys([tokenizer.eos_token_id, vocab["<|im_end|>"], vocab["<|endoftext|>"]]))


def test_decode_keeps_the_familys_special_marker_tokens(tokenizer) -> None:
    ids = tokenizer.encode("<|im_start|>x<|im_end|>", add_special_tokens=False)
    qwen3 = get_chat_format("qwen3")
    assert qwen3.decode(tokenizer, ids) == tokenizer.decode(ids, skip_special_tokens=True) == "x"
    keeping = dataclasses.replace(qwen3, keep_tokens=("<|im_start|>",))
    assert keeping.decode(tokenizer, ids) == "<|im_start|>x"


@pytest.mark.parametrize(
    "text, starts_inside, reasoning, rest",
    [
        ("<think>a</think>\n\nb", False, "a", "b"),
        ("a</think>\n\nb", False, "a", "b"),
        ("a</think>b", True, "a", "b"),
        ("still thinking", True, "still thinking", ""),
        ("no reasoning", False, "", "no reasoning"),
        ("x<think>a</think>y<think>b", False, "a\nb", "xy"),
        ("<think>a <think> b</think>c", False, "a <think> b", "c"),
        ("</think></think>c", False, "", "</think>c"),
    ],
)
def test_reasoning_split(text: str, starts_inside: bool, reasoning: str, rest: str) -> None:
    assert split(text, THINK, starts_inside) == (reasoning, rest)


def test_the_family_chosen_last_renders_a_tokenizers_prompts() -> None:
    """An encoder family bound to a tokenizer renders its prompts; choosing a template family for the
    same tokenizer later gives rendering back to the template (chat/render.py)."""
    from rlfactory_nb.chat import render, resolve_chat_format
    from rlfactory_nb.models.presets.tokenizer import build_tokenizer

    tokenizer = build_tokenizer()
    assert render.own_renderer(tokenizer) is None, "a tokenizer with a template renders with it"
    resolve_chat_format("deepseek_v32", tokenizer)
    assert render.own_renderer(tokenizer).name == "deepseek_v32"
    resolve_chat_format("qwen3", tokenizer)
    assert render.own_renderer(tokenizer) is None
