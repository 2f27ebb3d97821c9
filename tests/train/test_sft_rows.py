"""Supervised fine-tuning trains the rows RL trains: for a three-turn tool trajectory (call, call,
answer) of every registered model family, rolled out through the real agent loop and token assembly
(tests/chat/conformance.py), the SFT rows built from its conversation (`traj.messages`, OpenAI chat
format) equal its RL rows, ids and mask, and so do the rows built from the Trajectory itself.

Each family's rollout reuses that family's conformance data (tests/chat/test_<family>.py), and reads
its reference template from ../shared/reference/templates (skipped when absent)."""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from typing import Any

import pytest
import torch

from rlfactory_nb.chat import chat_format_names
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.rollout.conversation import conversation_trajectory
from rlfactory_nb.train.batch import build_batch
from rlfactory_nb.train.sft_data import sft_batch
from tests.chat import conformance
from tests.chat.templates import template_text

Case = tuple[Any, str, list[tuple[str, str]], bool]
"""(tokenizer, chat_format, turns (sampled text, end token), enable_thinking)"""
ANSWER = "It is sunny in Paris, and 12:00."


def chat_test(name: str) -> Any:
    return importlib.import_module(f"tests.chat.test_{name}")


def qwen3(thinking: bool) -> Case:
    call = lambda name, args: (
        f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(args)}}}\n</tool_call>'
    )
    think = (lambda text: f"<think>\n{text}\n</think>\n\n") if thinking else (lambda text: "")
    turns = [
        (think("I need the weather.") + call("get_weather", {"city": "Paris"}), "<|im_end|>"),
        (think("Now the time.") + call("get_time", {"zone": "Europe/Paris"}), "<|im_end|>"),
        (think("Both known.") + ANSWER, "<|im_end|>"),
    ]
    return build_tokenizer(), "qwen3", turns, thinking


def qwen3_xml(thinking: bool) -> Case:
    tokenizer = build_tokenizer()
    tokenizer.chat_template = template_text("qwen3_5")
    call = lambda name, key, value: (
        f"<tool_call>\n<function={name}>\n<parameter={key}>\n{value}\n</parameter>\n</function>\n</tool_call>"
    )
    think = (lambda text: f"{text}\n</think>\n\n") if thinking else (lambda text: "")
    turns = [
        (think("I need the weather.") + call("get_weather", "city", "Paris"), "<|im_end|>"),
        (think("Now the time.") + call("get_time", "zone", "Europe/Paris"), "<|im_end|>"),
        (think("Both known.") + ANSWER, "<|im_end|>"),
    ]
    return tokenizer, "qwen3_xml", turns, thinking


def qwen2_5(thinking: bool) -> Case:
    t = chat_test("qwen2_5")
    tokenizer = conformance.family_tokenizer(
        "qwen2_5", t.ADDED, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    turns = [
        (t.sampled_turn([t.WEATHER], ""), "<|im_end|>"),
        (t.sampled_turn([("get_time", {"zone": "Europe/Paris"})], "Now the time."), "<|im_end|>"),
        (ANSWER, "<|im_end|>"),
    ]
    return tokenizer, "qwen2_5", turns, False


def llama3(thinking: bool) -> Case:
    """Every turn ends with <|eot_id|>, the token the template writes (the module docstring of
    rlfactory_nb/rollout/conversation.py: a conversation row gets the template's form)."""
    t = chat_test("llama3")
    turns = [
        (t.sampled_turn("llama3_1", [t.WEATHER], ""), "<|eot_id|>"),
        (t.sampled_turn("llama3_1", [("get_time", {"zone": "Europe/Paris"})], ""), "<|eot_id|>"),
        (ANSWER, "<|eot_id|>"),
    ]
    return t.tokenizer_for("llama3_1"), "llama3", turns, False


def llama4(thinking: bool) -> Case:
    t = chat_test("llama4")
    return t.llama4_tokenizer("hf"), "llama4", t._turns("hf"), False


def mistral(thinking: bool) -> Case:
    t = chat_test("mistral")
    tokenizer = conformance.family_tokenizer(
        t.TEMPLATE, [(c, True) for c in t.CONTROL_TOKENS], "</s>", bos_token="<s>"
    )
    turns = [
        ('[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', "</s>"),
        ('I will check the time too.[TOOL_CALLS]get_time[ARGS]{"zone": "Europe/Paris"}', "</s>"),
        ("[THINK]Both tools answered.[/THINK]It is sunny in Paris and 12:00 there.", "</s>"),
    ]
    return tokenizer, "mistral", turns, False


def kimi_k2(thinking: bool) -> Case:
    t = chat_test("kimi_k2")
    tokenizer = conformance.family_tokenizer("kimi_k2", t.ADDED, "[EOS]", bos_token="[BOS]")
    turns = [
        t.turn(0, t.WEATHER, "Checking."),
        t.turn(1, ("get_time", {"zone": "CET"})),
        t.turn(2, None, "Sunny, 12:00."),
    ]
    return tokenizer, "kimi_k2", turns, False


def kimi_k3(thinking: bool) -> Case:
    t = chat_test("kimi_k3")
    return t.k3_tokenizer(), "kimi_k3", t._turns(thinking), thinking


def gpt_oss(thinking: bool) -> Case:
    turns = [
        (
            (
                "<|channel|>analysis<|message|>I need the weather.<|end|><|start|>assistant to=functions.get_weather"
                '<|channel|>commentary json<|message|>{"city": "Paris"}'
            ),
            "<|call|>",
        ),
        (' to=functions.get_time<|channel|>commentary json<|message|>{"zone": "Europe/Paris"}', "<|call|>"),
        (
            f"<|channel|>analysis<|message|>Both known.<|end|><|start|>assistant<|channel|>final<|message|>{ANSWER}",
            "<|return|>",
        ),
    ]
    return chat_test("gpt_oss").harmony_tokenizer(), "gpt_oss", turns, False


def glm4_5(thinking: bool) -> Case:
    t = chat_test("glm4_5")
    return t.glm_tokenizer(), "glm4_5", t._turns(thinking), thinking


def glm4_7(thinking: bool) -> Case:
    t = chat_test("glm4_7")
    return t.glm_tokenizer(), "glm4_7", t._turns(thinking), thinking


def gemma4(thinking: bool) -> Case:
    t = chat_test("gemma4")
    return t.gemma_tokenizer(), "gemma4", t._turns(thinking), thinking


def deepseek_v3(thinking: bool) -> Case:
    t = chat_test("deepseek_v3")
    tokenizer = conformance.family_tokenizer(
        "deepseek_v3_1", t.ADDED, t.EOS, bos_token="<｜begin▁of▁sentence｜>"
    )
    turns = [
        t.turn(t.WEATHER, answer="Checking."),
        t.turn(("get_time", {"zone": "CET"})),
        t.turn(None, answer="Sunny, 12:00."),
    ]
    return tokenizer, "deepseek_v3", turns, False


def deepseek_dsml(official: str) -> Callable[[bool], Case]:
    def case(thinking: bool) -> Case:
        t = chat_test("deepseek_dsml")
        return t.tokenizer_of(official), t.GENERATIONS[official][0], t._turns(official, thinking), thinking

    return case


CASES: dict[str, Callable[[bool], Case]] = {
    "qwen3": qwen3, "qwen3_xml": qwen3_xml, "qwen2_5": qwen2_5, "llama3": llama3, "llama4": llama4,
    "mistral": mistral, "kimi_k2": kimi_k2, "kimi_k3": kimi_k3, "gpt_oss": gpt_oss, "glm4_5": glm4_5,
    "glm4_7": glm4_7, "gemma4": gemma4, "deepseek_v3": deepseek_v3, "deepseek_v32": deepseek_dsml("deepseek_v32"),
    "deepseek_v4": deepseek_dsml("deepseek_v4"),
}  # fmt: skip
THINKING = {"qwen3", "qwen3_xml", "kimi_k3", "glm4_5", "glm4_7", "gemma4", "deepseek_v32", "deepseek_v4"}
"""families whose conformance turns come with reasoning too"""


def test_every_registered_family_has_a_case() -> None:
    assert sorted(CASES) == chat_format_names(), "a new family needs an SFT rows case here"


TEMPLATE_DROPS = {
    ("gemma4", True): "Gemma 4's template writes a thought only for turns with calls: a conversation's final "
    "answer trains without the thought the rollout sampled (its Trajectory keeps it)",
}
"""(family, thinking) cases whose template cannot say what was sampled: the test fails, as it must"""


@pytest.mark.parametrize(
    ("family", "thinking"),
    [
        pytest.param(
            name, thinking, marks=[pytest.mark.xfail(strict=True, reason=TEMPLATE_DROPS[(name, thinking)])]
        )
        if (name, thinking) in TEMPLATE_DROPS
        else (name, thinking)
        for name, thinking in [(name, False) for name in sorted(CASES)]
        + [(name, True) for name in sorted(THINKING)]
    ],
)
async def test_sft_rows_of_a_tool_trajectory_equal_its_rl_rows(family: str, thinking: bool) -> None:
    tokenizer, chat_format, turns, thinking = CASES[family](thinking)
    traj = await conformance.rollout_against_render(tokenizer, chat_format, turns, enable_thinking=thinking)
    assert traj.num_turns == 3 and len(traj.tool_results()) == 2, "call, call, answer"
    tools = [tool.spec.to_openai() for tool in conformance.WEATHER_TOOLS]

    rows = conversation_trajectory(tokenizer, traj.messages, tools, chat_format, enable_thinking=thinking)
    assert rows.prompt_ids == traj.prompt_ids
    assert rows.response_ids == traj.response_ids, _first_difference(
        tokenizer, rows.response_ids, traj.response_ids
    )
    assert rows.loss_mask == traj.loss_mask

    # as an OpenAI row writes calls: arguments as JSON text, whatever form the family's history used
    openai = conversation_trajectory(
        tokenizer, openai_form(traj.messages), tools, chat_format, enable_thinking=thinking
    )
    assert (openai.response_ids, openai.loss_mask) == (traj.response_ids, traj.loss_mask)

    rl = build_batch([traj], [1.0], tokenizer.pad_token_id)
    for sft in (sft_batch([rows], tokenizer.pad_token_id), sft_batch([traj], tokenizer.pad_token_id)):
        assert torch.equal(sft.input_ids, rl.input_ids) and torch.equal(sft.loss_mask, rl.loss_mask)
        assert torch.equal(sft.attention_mask, rl.attention_mask)


def openai_form(messages: list[dict]) -> list[dict]:
    def call(entry: dict) -> dict:
        arguments = entry["function"]["arguments"]
        text = arguments if isinstance(arguments, str) else json.dumps(dict(arguments))
        return {**entry, "function": {**entry["function"], "arguments": text}}

    return [
        {**m, "tool_calls": [call(c) for c in m["tool_calls"]]} if m.get("tool_calls") else m
        for m in messages
    ]


def _first_difference(tokenizer: Any, ours: list[int], theirs: list[int]) -> str:
    at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    shown = lambda ids: repr(tokenizer.decode(ids[max(0, at - 8) : at + 8], skip_special_tokens=False))
    return f"first difference at {at}: sft {shown(ours)} vs rl {shown(theirs)}"
