"""The endpoint serves every family of docs/families.md: each family's tool-call reply, as its
reference template renders it, goes through the endpoint (the family's ChatFormat parses it, no
server-side tool parser) and comes back as OpenAI `tool_calls`. Skips where the reference templates
are absent, as the chat tests do."""

from __future__ import annotations

import json

import pytest

from rlfactory_nb.chat import chat_format_names
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.programs import AgentProgram
from tests.chat import conformance
from tests.chat.templates import template_text
from tests.programs.conftest import ReplayEngine, call_text

WEATHER = ("get_weather", {"city": "Paris"})
SCHEMA = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def qwen3():
    from rlfactory_nb.models.policy import Policy

    return Policy.load("tiny-calculator").tokenizer, call_text(*WEATHER)


def qwen3_xml():
    from tests.chat import test_qwen3_xml as family

    tokenizer = build_tokenizer()
    tokenizer.chat_template = template_text("qwen3_5")
    return tokenizer, family.sampled_turn(template_text("qwen3_5"), [WEATHER], "", "")[0]  # after <think>\n


def qwen2_5():
    from tests.chat import test_qwen2_5 as family

    tokenizer = conformance.family_tokenizer("qwen2_5", family.ADDED, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    return tokenizer, family.sampled_turn([WEATHER], "")


def llama3():
    from tests.chat import test_llama3 as family

    return family.tokenizer_for("llama3_1"), family.sampled_turn("llama3_1", [WEATHER], "")


def mistral():
    from tests.chat import test_mistral as family

    tokenizer = conformance.family_tokenizer(family.TEMPLATE, [(t, True) for t in family.CONTROL_TOKENS], "</s>", bos_token="<s>")
    return tokenizer, family.sampled_turn([WEATHER], "", "")


def deepseek_v3():
    from tests.chat import test_deepseek_v3 as family

    tokenizer = conformance.family_tokenizer("deepseek_v3", family.ADDED, family.EOS, bos_token="<｜begin▁of▁sentence｜>")
    return tokenizer, family.sampled_turn("deepseek_v3", [WEATHER], "", "")[0]


def glm4_5():
    from tests.chat import test_glm4_5 as family

    return family.glm_tokenizer(), family.sampled_turn([WEATHER], "", "")


def kimi_k2():
    from tests.chat import test_kimi_k2 as family

    tokenizer = conformance.family_tokenizer("kimi_k2", family.ADDED, "[EOS]", bos_token="[BOS]")
    return tokenizer, family.sampled_turn([WEATHER], "", "")


def gpt_oss():
    from tests.chat import test_gpt_oss as family

    return family.harmony_tokenizer(), family.sampled_turn([WEATHER], "", "")


def gemma4():
    from tests.chat import test_gemma4 as family

    return family.gemma_tokenizer(), family.sampled_turn([WEATHER], "", "")


def deepseek_v32():
    from tests.chat import test_deepseek_dsml as family

    return family.tokenizer_of("deepseek_v32"), family.sampled_turn("deepseek_v32", [WEATHER], "", "", False)


def deepseek_v4():
    from tests.chat import test_deepseek_dsml as family

    return family.tokenizer_of("deepseek_v41"), family.sampled_turn("deepseek_v41", [WEATHER], "", "", False)


def kimi_k3():
    from tests.chat import test_kimi_k3 as family

    return family.k3_tokenizer(), family.sampled_turn([WEATHER], "", "", False)


def llama4():
    from tests.chat import test_llama4 as family

    return family.llama4_tokenizer("hf"), family.sampled_turn("hf", [WEATHER], "")


def glm4_7():
    from tests.chat import test_glm4_7 as family

    return family.glm_tokenizer(), family.sampled_turn([WEATHER], "", "")


FAMILIES = {
    f.__name__: f
    for f in (qwen3, qwen3_xml, qwen2_5, llama3, mistral, deepseek_v3, glm4_5, kimi_k2, gpt_oss, gemma4,
              deepseek_v32, deepseek_v4, kimi_k3, llama4, glm4_7)
}


def test_every_registered_family_is_covered():
    assert set(FAMILIES) == set(chat_format_names())


async def ask_weather(row, llm):
    reply = await llm.client().chat.completions.create(model=llm.model, messages=row["messages"], tools=[SCHEMA])
    message = reply.choices[0].message
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]
    return json.dumps({"calls": calls, "finish": reply.choices[0].finish_reason})


@pytest.mark.parametrize("family", list(FAMILIES))
async def test_a_familys_tool_call_comes_back_as_tool_calls(family):
    tokenizer, text = FAMILIES[family]()
    engine = ReplayEngine(tokenizer, [text], chat_format=family)
    thinking = family == "qwen3_xml"  # its reference render pre-fills <think>: the model starts inside it
    program = AgentProgram(
        ask_weather, engine=engine, tokenizer=tokenizer, chat_format=family, max_total_tokens=4096, enable_thinking=thinking
    )
    traj = await program.rollout({"messages": [{"role": "user", "content": "What is the weather in Paris?"}]})
    assert "program_error" not in traj.metadata, traj.metadata.get("program_error")
    answer = json.loads(traj.metadata["final_answer"])
    assert answer == {"calls": [["get_weather", {"city": "Paris"}]], "finish": "tool_calls"}, text
    assert "get_weather" in tokenizer.decode(engine.prompts[0])  # the tools reached the family's template
    await program.close()
