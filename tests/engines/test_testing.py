"""`rf.engines.testing.ScriptedEngine`: scripted replies through a real tokenizer, on the engine contract,
for any family; the agent loop runs on it as on a real engine."""

import asyncio

import pytest

import rlfactory_nb as rf
from rlfactory_nb.engines.base import Engine, SamplingParams
from rlfactory_nb.engines.testing import ScriptedEngine
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.rollout.agent import Agent
from tests.chat import conformance


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def prompt_ids(tokenizer, text):
    messages = [{"role": "user", "content": text}]
    return tokenizer.encode(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))


async def test_a_list_is_consumed_in_order_with_logprobs_and_the_end_of_turn_id(tokenizer):
    engine = rf.engines.testing.ScriptedEngine(tokenizer, ["first", "second"], logprob=-0.25)
    assert isinstance(engine, Engine)
    replies = [await engine.generate(prompt_ids(tokenizer, "hi"), SamplingParams()) for _ in range(3)]
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert [tokenizer.decode(g.token_ids) for g in replies] == ["first<|im_end|>", "second<|im_end|>", "second<|im_end|>"]
    assert all(g.token_ids[-1] == im_end and g.finish_reason == "stop" for g in replies)
    assert all(g.logprobs == [-0.25] * len(g.token_ids) for g in replies)
    assert len(engine.prompts) == 3 and engine.prompts[0].endswith("<|im_start|>assistant\n")
    assert await engine.score([1, 2, 3]) == [-0.25, -0.25]
    await engine.update_weights({}, version=4)
    assert engine.weight_versions == [4]


async def test_max_new_tokens_cuts_a_reply_and_bad_requests_fail_as_on_a_real_engine(tokenizer):
    engine = ScriptedEngine(tokenizer, ["a long reply that will not fit"])
    cut = await engine.generate(prompt_ids(tokenizer, "hi"), SamplingParams(max_new_tokens=3))
    assert len(cut.token_ids) == 3 and cut.finish_reason == "length"
    with pytest.raises(ValueError, match="not a token id"):
        await engine.generate([len(tokenizer) + 5], SamplingParams())
    with pytest.raises(TypeError, match="replies must be"):
        ScriptedEngine(tokenizer, "one text")


async def test_a_mapping_scripts_each_conversation_by_turn_and_a_callable_reads_the_prompt(tokenizer):
    call = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
    replies = {"2+3": [call, "<answer>5</answer>"], "4+4": ["<answer>8</answer>"]}

    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    async with rf.ToolSet.from_functions(add) as tools:
        agent = Agent(None, tools, engine=ScriptedEngine(tokenizer, replies), tokenizer=tokenizer)
        group = await asyncio.gather(*(agent.rollout([{"role": "user", "content": q}]) for q in ["2+3?", "4+4?", "2+3?"]))
    assert [t.num_turns for t in group] == [2, 1, 2]
    assert [t.messages[-1]["content"] for t in group] == ["<answer>5</answer>", "<answer>8</answer>", "<answer>5</answer>"]
    assert group[0].messages[2]["role"] == "tool" and "5" in group[0].messages[2]["content"]
    assert all(set(t.logprobs) == {-0.5} and sum(t.loss_mask) == len(t.logprobs) for t in group)

    echo = ScriptedEngine(tokenizer, lambda prompt: prompt.rsplit("user\n", 1)[1].split("<|im_end|>")[0][::-1])
    reply = await echo.generate(prompt_ids(tokenizer, "abc"), SamplingParams())
    assert tokenizer.decode(reply.token_ids) == "cba<|im_end|>"


def test_any_family_gets_its_own_end_of_turn_token():
    tokenizer = conformance.family_tokenizer(
        "llama3_1", [(t, True) for t in ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>",
                                         "<|eot_id|>", "<|python_tag|>"]],
        eos_token="<|end_of_text|>", bos_token="<|begin_of_text|>",
    )
    engine = ScriptedEngine(tokenizer, ["It is sunny.", '{"name": "f", "parameters": {}}<|eom_id|>'])
    ids = tokenizer.encode("<|begin_of_text|>x", add_special_tokens=False)
    answer = asyncio.run(engine.generate(ids, SamplingParams()))
    call = asyncio.run(engine.generate(ids, SamplingParams()))
    assert tokenizer.convert_ids_to_tokens(answer.token_ids[-1:]) == ["<|eot_id|>"]  # not the eos <|end_of_text|>
    assert tokenizer.convert_ids_to_tokens(call.token_ids[-1:]) == ["<|eom_id|>"] and call.finish_reason == "stop"
