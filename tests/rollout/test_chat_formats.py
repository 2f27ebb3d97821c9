"""The agent loop per model family: the family comes from the tokenizer's template (`auto`), its
parser reads the turns, its reasoning split feeds `Sample.final_answer` / `Sample.reasoning`, and
its turn-end token cuts the deltas. The qwen3_xml case runs Qwen3.5's reference template on the tiny
preset's tokenizer (which has every Qwen marker token), with thinking on (`<think>\\n` pre-filled)."""

from __future__ import annotations

import pytest

from rlfactory_nb.chat import get_chat_format
from rlfactory_nb.errors import ChatFormatError
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.rollout.agent import Agent
from rlfactory_nb.rollout.tokens import delta_text
from rlfactory_nb.train.metrics import rollout_metrics
from rlfactory_nb.types import Sample, ToolResult
from tests.chat.templates import template_text

from .scripted import ScriptedEngine

XML_CALL = "<tool_call>\n<function=calculator>\n<parameter=expression>\n12*7\n</parameter>\n</function>\n</tool_call>"
REPLIES = {"12*7": [f"I should compute it.\n</think>\n\n{XML_CALL}", "The tool said 84.\n</think>\n\nThe answer is 84."]}
QUESTION = [{"role": "user", "content": "What is 12*7?"}]


class Calculator:
    """The one tool these rollouts call, in process: the tool side is tested elsewhere."""

    specs: tuple = ()

    async def call_many(self, calls):
        return [ToolResult(name, "ok", str(eval(arguments["expression"]))) for name, arguments in calls]


@pytest.fixture
def qwen3_5_tokenizer():
    tokenizer = build_tokenizer()
    tokenizer.chat_template = template_text("qwen3_5")
    return tokenizer


async def test_qwen3_xml_rollout_with_prefilled_thinking(qwen3_5_tokenizer) -> None:
    tokenizer = qwen3_5_tokenizer
    agent = Agent(None, Calculator(), engine=ScriptedEngine(tokenizer, REPLIES), tokenizer=tokenizer, enable_thinking=True)
    assert agent.chat_format.name == "qwen3_xml" and agent.starts_in_reasoning
    traj = await agent.rollout(QUESTION)
    assert traj.finish_reason == "stop" and traj.num_turns == 2
    assert [(c.name, c.arguments) for c in traj.tool_calls()] == [("calculator", {"expression": "12*7"})]
    assert [r.content for r in traj.tool_results()] == ["84"]
    sampled = tokenizer.decode([i for i, m in zip(traj.response_ids, traj.loss_mask) if m])
    assert sampled == REPLIES["12*7"][0] + "<|im_end|>" + REPLIES["12*7"][1] + "<|im_end|>"
    masked = tokenizer.decode([i for i, m in zip(traj.response_ids, traj.loss_mask) if not m])
    assert masked == "\n<|im_start|>user\n<tool_response>\n84\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n"
    sample = Sample.from_trajectory(traj)
    assert sample.final_answer == "The answer is 84.", "the reasoning is not scored as the answer"
    assert sample.reasoning == "I should compute it.\nThe tool said 84."
    assert traj.metadata["drift_position"] == -1, "the ids equal the template's full render"


async def test_qwen3_xml_rollout_without_thinking_matches_the_full_render(qwen3_5_tokenizer) -> None:
    replies = {"12*7": [XML_CALL, "The answer is 84."]}
    engine = ScriptedEngine(qwen3_5_tokenizer, replies)
    agent = Agent(None, Calculator(), engine=engine, tokenizer=qwen3_5_tokenizer, drift="strict")
    assert not agent.starts_in_reasoning
    traj = await agent.rollout(QUESTION)
    assert traj.num_turns == 2 and traj.metadata["drift_position"] == -1
    assert Sample.from_trajectory(traj).final_answer == "The answer is 84."


async def test_a_call_drafted_in_reasoning_is_not_run(qwen3_5_tokenizer) -> None:
    replies = {"12*7": [f"Maybe {XML_CALL}? No, I know it.</think>\n\n84"]}
    engine = ScriptedEngine(qwen3_5_tokenizer, replies)
    agent = Agent(None, Calculator(), engine=engine, tokenizer=qwen3_5_tokenizer, enable_thinking=True)
    traj = await agent.rollout(QUESTION)
    assert traj.tool_calls() == [] and traj.turns[0].calls_in_reasoning == 1
    assert rollout_metrics([traj])["rollout/calls_in_reasoning"] == 1
    assert Sample.from_trajectory(traj).final_answer == "84"


def test_delta_is_cut_at_the_familys_turn_end_not_the_eos(qwen3_5_tokenizer) -> None:
    """A base model's eos is `<|endoftext|>`, which never appears in a chat render: the family's
    `<|im_end|>` still cuts the delta."""
    qwen3_5_tokenizer.eos_token = "<|endoftext|>"
    text = delta_text(qwen3_5_tokenizer, [{"role": "tool", "content": "84"}], chat_format=get_chat_format("qwen3_xml"))
    assert text == "\n<|im_start|>user\n<tool_response>\n84\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


def test_a_template_of_no_known_family_is_refused_with_the_choices() -> None:
    tokenizer = build_tokenizer()
    tokenizer.chat_template = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    with pytest.raises(ChatFormatError, match=r"matches no known model family.*qwen3, qwen3_xml"):
        Agent(None, None, engine=ScriptedEngine(tokenizer, {}), tokenizer=tokenizer)
    with pytest.raises(ChatFormatError, match="did you mean 'qwen3_xml'"):
        Agent(None, None, engine=ScriptedEngine(tokenizer, {}), tokenizer=tokenizer, chat_format="qwen3xml")


def test_rollout_parser_still_overrides_the_familys(qwen3_5_tokenizer) -> None:
    agent = Agent(None, None, engine=ScriptedEngine(qwen3_5_tokenizer, {}), tokenizer=qwen3_5_tokenizer, parser="hermes")
    assert agent.chat_format.name == "qwen3_xml" and type(agent.parser).__name__ == "Qwen3Parser"
