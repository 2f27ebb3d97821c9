"""Real agent frameworks against the endpoint: the OpenAI Agents SDK (chat-completions mode, tracing
off) with a function tool, and pydantic-ai (OpenAIChatModel). For each: one episode whose model part
is replayed (the expected calls, masks audited against a full render), and one GRPO step of the tiny
model with the framework's agent as the run's program."""

from __future__ import annotations

import pytest
from agents import Agent as SDKAgent
from agents import OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

import rlfactory_nb as rf
from rlfactory_nb.config import RunConfig
from rlfactory_nb.types import Sample
from tests.programs.conftest import audit_masks, call_text

set_tracing_disabled(True)
QUESTION = "What is 12+30?"
REPLIES = [call_text("calculator", {"expression": "12+30"}), "<answer>42</answer>"]


def add(expression: str) -> str:
    """Evaluate an addition such as 12+30."""
    left, _, right = expression.partition("+")
    try:
        return str(int(left) + int(right))
    except ValueError:
        return "error: write an addition such as 12+30"


async def agents_sdk_program(row, llm):
    """An Agents SDK agent with one function tool; the row's question is its input."""
    model = OpenAIChatCompletionsModel(model=llm.model, openai_client=llm.client())
    agent = SDKAgent(name="calculator", instructions="Use the calculator.", model=model,
                     tools=[function_tool(add, name_override="calculator")])
    result = await Runner.run(agent, row["messages"][-1]["content"], max_turns=3)
    return str(result.final_output)


async def pydantic_ai_program(row, llm):
    """A pydantic-ai agent with one plain tool."""
    model = OpenAIChatModel(llm.model, provider=OpenAIProvider(openai_client=llm.client()))
    agent = PydanticAgent(model, instructions="Use the calculator.", tools=[_named(add, "calculator")])
    result = await agent.run(row["messages"][-1]["content"])
    return result.output


def _named(fn, name):
    from pydantic_ai import Tool

    return Tool(fn, name=name)


PROGRAMS = {"agents_sdk": agents_sdk_program, "pydantic_ai": pydantic_ai_program}


@pytest.mark.parametrize("framework", list(PROGRAMS))
async def test_one_episode_two_calls_one_exact_segment(framework, replay, tiny_policy):
    program, engine = replay(REPLIES, PROGRAMS[framework])
    traj = await program.rollout({"messages": [{"role": "user", "content": QUESTION}], "ground_truth": "42"})
    assert "program_error" not in traj.metadata, traj.metadata.get("program_error")
    counters = traj.metadata["program"]
    assert (counters["calls"], counters["merged"], counters["forks"], counters["drift"]) == (2, 1, 0, 0)
    assert [(c.name, c.arguments) for c in traj.tool_calls()] == [("calculator", {"expression": "12+30"})]
    assert [r.content for r in traj.tool_results()] == ["42"]  # what the framework's tool returned
    assert Sample.from_trajectory(traj).final_answer == "42"
    # the framework's own system prompt and tool schema are in the prompt the model saw
    prompt_text = tiny_policy.tokenizer.decode(engine.prompts[0])
    assert "Use the calculator." in prompt_text and '"name": "calculator"' in prompt_text
    audit_masks(traj, engine, tiny_policy.tokenizer, traj.metadata["tools"])  # the tools as the framework sent them


def used_the_tool(sample: Sample) -> float:
    """1 when a tool call of the episode returned a result (the reward sees every call)."""
    return float(any(not r.content.startswith("error") for r in sample.tool_results))


@pytest.mark.slow
@pytest.mark.parametrize("framework", list(PROGRAMS))
def test_one_grpo_step_trains_the_frameworks_model(framework, tmp_path):
    cfg = RunConfig.from_dict({
        "name": f"program-{framework}", "output_dir": str(tmp_path),
        "model": {"name": "tiny-calculator", "device": "cpu"},
        "rollout": {"max_turns": 3, "max_new_tokens": 48, "max_total_tokens": 768},
        "reward": {"function": "rlfactory_nb.rewards.functions:exact_match"},
        "grpo": {"steps": 1, "prompts_per_step": 2, "group_size": 4, "eval_every": 0, "checkpoint_every": 0,
                 "trajectories_per_step": -1},
        "data": {"train": "synthetic:calculator"},
    })
    program = rf.AgentProgram(PROGRAMS[framework], timeout_s=120)
    result = rf.train_sync(cfg, agent=program, reward=used_the_tool)
    row = result.metrics
    assert result.step == 1 and row["program/calls"] >= 8  # 8 episodes, at least one call each
    assert row["program/calls"] == row["program/merged"] + row["program/forks"] + 8  # one segment start each
    assert row["groups/trained"] >= 1 and row["train/optimizer_steps"] == 1, row
    saved = rf.types.load_jsonl(tmp_path / cfg.name / "trajectories" / "step_000001.jsonl")
    assert len(saved) == 8 and all(t.metadata["program"]["calls"] >= 1 for t in saved)
    assert all(sum(t.loss_mask) == len(t.logprobs) for t in saved)


def smolagents_program(row, llm):
    """A smolagents ToolCallingAgent (synchronous: the program runs in a thread)."""
    from smolagents import OpenAIServerModel, ToolCallingAgent, tool

    @tool
    def calculator(expression: str) -> str:
        """Evaluate an addition such as 12+30.

        Args:
            expression: the addition to evaluate.
        """
        return add(expression)

    model = OpenAIServerModel(model_id=llm.model, api_base=llm.base_url, api_key=llm.api_key)
    agent = ToolCallingAgent(tools=[calculator], model=model, max_steps=3, verbosity_level=0)
    return str(agent.run(row["messages"][-1]["content"]))


async def test_smolagents_rewrites_its_memory_so_every_call_is_its_own_segment(replay, tiny_policy):
    """smolagents sends its past calls back as text ("Calling tools: ...", a user "Observation: ..."),
    not as the replies it got: the history is rewritten, so the merge rule starts a segment per call,
    each exact on its own."""
    replies = [call_text("calculator", {"expression": "12+30"}), call_text("final_answer", {"answer": "42"})]
    program, engine = replay(replies, smolagents_program, max_total_tokens=8192)
    traj = await program.rollout({"messages": [{"role": "user", "content": QUESTION}]})
    assert "program_error" not in traj.metadata, traj.metadata.get("program_error")
    counters = traj.metadata["program"]
    assert (counters["calls"], counters["merged"], counters["forks"]) == (2, 0, 1)
    assert counters["segment_starts"] == ["first call", "history rewritten at call 1"]
    assert [c.name for c in traj.tool_calls()] == ["calculator", "final_answer"] and traj.metadata["final_answer"] == "42"
    assert "Observation:\n42" in tiny_policy.tokenizer.decode(engine.prompts[1])  # the tool ran in smolagents
    audit_masks(traj, engine, tiny_policy.tokenizer, traj.metadata["tools"])
