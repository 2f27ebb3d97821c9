"""The agent loop: turn logic with a scripted engine and real MCP tools; masks on the real tiny model.
Bad model output (parse errors, unknown tools, floods, fuzzing) is in tests/faults/test_model_output.py."""

import asyncio
import time
from pathlib import Path

import pytest
import torch

from rlfactory_nb.models.presets import calculator
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.rollout.agent import Agent, DriftError
from rlfactory_nb.rollout.groups import rollout_groups
from rlfactory_nb.seeds import SampleId
from rlfactory_nb.tools import ToolSet

from .scripted import ScriptedEngine

ROOT = Path(__file__).resolve().parents[2]
CALCULATOR = {"servers": [{"name": "calculator", "command": "python", "args": ["-m", "rlfactory_nb.tools.servers.calculator"]}]}
SLOW_SERVER = {"servers": [{"name": "testing", "command": "python", "args": [str(ROOT / "tests/tools/servers/test_server.py")]}]}
CALL = '<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def agent_for(tokenizer, tools, replies, **options):
    engine = ScriptedEngine(tokenizer, replies)
    return Agent(None, tools, engine=engine, tokenizer=tokenizer, **options)


def response_text(tokenizer, traj, trained):
    return tokenizer.decode([i for i, m in zip(traj.response_ids, traj.loss_mask) if m == trained])


async def test_tool_round_then_answer_with_exact_masks(tokenizer):
    replies = {"12*7": [CALL.format(name="calculator", args='{"expression": "12*7"}'), "<answer>84</answer>"]}
    async with ToolSet.from_config(CALCULATOR) as tools:
        traj = await agent_for(tokenizer, tools, replies).rollout([{"role": "user", "content": "What is 12*7?"}])
    assert traj.finish_reason == "stop" and traj.num_turns == 2
    assert [r.content for r in traj.tool_results()] == ["84"]
    assert response_text(tokenizer, traj, 1) == replies["12*7"][0] + "<|im_end|>" + replies["12*7"][1] + "<|im_end|>"
    masked = response_text(tokenizer, traj, 0)
    assert masked == "\n<|im_start|>user\n<tool_response>\n84\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert sum(traj.loss_mask) == len(traj.logprobs)
    assert [m["role"] for m in traj.messages] == ["user", "assistant", "tool", "assistant"]
    assert traj.messages[1]["tool_calls"][0]["function"] == {"name": "calculator", "arguments": {"expression": "12*7"}}


async def test_turn_limit_and_token_budget_end_trajectories(tokenizer):
    loop_forever = {"again": [CALL.format(name="calculator", args='{"expression": "1+1"}')]}
    async with ToolSet.from_config(CALCULATOR) as tools:
        capped = await agent_for(tokenizer, tools, loop_forever, max_turns=3).rollout([{"role": "user", "content": "again"}])
        assert capped.finish_reason == "max_turns" and capped.num_turns == 3
        # the last turn's call is not run: its result would be tokens the model never answers
        assert len(capped.tool_results()) == 2
        assert capped.response_ids[-1] == tokenizer.eos_token_id and capped.loss_mask[-1] == 1
        assert [m["role"] for m in capped.messages][-2:] == ["tool", "assistant"]
        agent = agent_for(tokenizer, tools, loop_forever, max_turns=10, max_total_tokens=400)
        short = await agent.rollout([{"role": "user", "content": "again"}])
    assert short.finish_reason == "length"
    assert len(short.prompt_ids) + len(short.response_ids) <= 400
    # the system prompt with the tools is never truncated
    assert "<tools>" in tokenizer.decode(short.prompt_ids)


async def test_a_prompt_longer_than_the_budget_ends_at_once_without_truncation(tokenizer):
    agent = agent_for(tokenizer, None, {"x": ["<answer>1</answer>"]}, max_total_tokens=10)
    traj = await agent.rollout([{"role": "user", "content": "x " * 50}])
    assert traj.finish_reason == "length" and traj.response_ids == [] and traj.num_turns == 0


async def test_a_sample_id_seeds_each_turn_and_without_one_requests_stay_unseeded(tokenizer):
    replies = {"12*7": [CALL.format(name="calculator", args='{"expression": "12*7"}'), "<answer>84</answer>"]}
    agent, seeds = agent_for(tokenizer, None, replies, drift="off"), []
    generate = agent.engine.generate

    async def recording(prompt_ids, sampling):
        seeds.append(sampling.seed)
        return await generate(prompt_ids, sampling)

    agent.engine.generate = recording
    sample = SampleId(seed=3, step=2, prompt=1, sample=5)
    await agent.rollout([{"role": "user", "content": "What is 12*7?"}], sample_id=sample)
    await agent.rollout([{"role": "user", "content": "What is 12*7?"}])
    assert seeds == [sample.turn_seed(0), sample.turn_seed(1), None, None]
    assert len(set(seeds[:2])) == 2


async def test_strict_drift_check_raises_on_multi_turn_qwen3_rollouts(tokenizer):
    replies = {"12*7": [CALL.format(name="calculator", args='{"expression": "12*7"}'), "<answer>84</answer>"]}
    async with ToolSet.from_config(CALCULATOR) as tools:
        with pytest.raises(DriftError, match="differ from a full chat-template render"):
            await agent_for(tokenizer, tools, replies, drift="strict").rollout([{"role": "user", "content": "What is 12*7?"}])


async def test_expected_qwen3_drift_is_counted_not_warned_and_other_drift_warns_once(tokenizer, caplog):
    replies = {"12*7": [CALL.format(name="calculator", args='{"expression": "12*7"}'), "<answer>84</answer>"]}
    async with ToolSet.from_config(CALCULATOR) as tools:
        agent = agent_for(tokenizer, tools, replies)
        trajectories = [await agent.rollout([{"role": "user", "content": "What is 12*7?"}]) for _ in range(3)]
        assert agent.expected_drift_count == 3 and agent.drift_count == 0
        assert all(t.metadata["dropped_think_blocks"] == 1 and t.metadata["drift_position"] > 0 for t in trajectories)
        assert "differ from a full chat-template render" not in caplog.text
        # an engine that spells its output in single characters: a re-encode merges them, which no
        # template explains
        agent._engine.tokenizer = _CharacterTokenizer(tokenizer)
        for _ in range(2):
            await agent.rollout([{"role": "user", "content": "What is 12*7?"}])
    assert agent.drift_count == 2 and caplog.text.count("differ from a full chat-template render") == 1


class _CharacterTokenizer:
    """Encodes every character as its own token (a tokenization no full render produces)."""

    def __init__(self, tokenizer):
        self.tokenizer, self.eos_token_id = tokenizer, tokenizer.eos_token_id

    def encode(self, text, add_special_tokens=False):
        return [i for character in text for i in self.tokenizer.encode(character, add_special_tokens=False)]

    def decode(self, ids):
        return self.tokenizer.decode(ids)


@pytest.mark.slow
async def test_no_barrier_64_trajectories_with_slow_tools_take_about_one_trajectory(tokenizer):
    """64 trajectories x 2 tool turns of 0.2 s: sequential would be 25.6 s; one trajectory is ~0.4 s."""
    replies = {f"q{i} ": [CALL.format(name="sleep", args='{"seconds": 0.2}')] * 2 + ["<answer>done</answer>"] for i in range(64)}
    rows = [{"messages": [{"role": "user", "content": f"q{i} "}]} for i in range(64)]
    async with ToolSet.from_config(SLOW_SERVER, cache=False) as tools:
        agent = agent_for(tokenizer, tools, replies, drift="off")
        started = time.perf_counter()
        groups = await rollout_groups(agent, rows, group_size=1)
        elapsed = time.perf_counter() - started
    assert all(g[0].num_turns == 3 and g[0].finish_reason == "stop" for g in groups)
    assert elapsed < 0.4 * 64 / 4, f"{elapsed:.1f} s: tool waits did not overlap"


@pytest.mark.slow
async def test_tiny_model_rollouts_have_exact_masks_and_forward_pass_logprobs(tiny_policy):
    tokenizer = tiny_policy.tokenizer
    response_open, response_close = tokenizer.convert_tokens_to_ids(["<tool_response>", "</tool_response>"])
    async with ToolSet.from_config(CALCULATOR) as tools:
        agent = Agent(tiny_policy, tools, max_turns=3, max_new_tokens=48)
        rows = calculator.dataset("heldout", 8)
        groups = await rollout_groups(agent, rows, group_size=2)
        await agent.engine.close()
    trajectories = [t for g in groups for t in g]
    assert any(t.tool_calls() for t in trajectories), "the warm-started model never called the tool"
    for traj in trajectories:
        assert sum(traj.loss_mask) == len(traj.logprobs)
        inside_response = False
        for token, mask in zip(traj.response_ids, traj.loss_mask):
            inside_response |= token == response_open
            assert not (inside_response and mask), "a tool-response token is trained"
            inside_response &= token != response_close
        ids = torch.tensor([traj.prompt_ids + traj.response_ids])
        with torch.no_grad():
            logits = tiny_policy.model(ids).logits[0, :-1]
        logprobs = torch.log_softmax(logits.float(), -1).gather(1, ids[0, 1:, None])[:, 0]
        sampled = torch.tensor([0] * (len(traj.prompt_ids) - 1) + traj.loss_mask, dtype=torch.bool)
        assert torch.allclose(logprobs[sampled], torch.tensor(traj.logprobs), atol=1e-3)


async def test_overlapping_steps_wait_for_each_other_so_tool_responses_are_never_skipped(tokenizer):
    """Two clicks in a row (Next turn, then Run to end while the tool call is in flight)."""
    replies = {"12*7": [CALL.format(name="calculator", args='{"expression": "12*7"}'), "<answer>84</answer>"]}
    async with ToolSet.from_config(CALCULATOR) as tools:
        session = agent_for(tokenizer, tools, replies).start([{"role": "user", "content": "What is 12*7?"}])
        first = asyncio.ensure_future(session.step())
        await asyncio.sleep(0)  # the first step is generating or calling the tool
        traj = await session.run()
        await first
    masked = response_text(tokenizer, traj, 0)
    assert "<tool_response>\n84\n</tool_response>" in masked
    assert [t.text for t in traj.turns] == replies["12*7"]
    assert await session.step() is None  # ended: nothing more to do


def test_an_agent_without_a_policy_takes_the_tokenizer_its_engine_carries(tokenizer):
    engine = ScriptedEngine(tokenizer, {})  # carries its tokenizer, as a cluster engine does the kernel's
    assert Agent(None, None, engine=engine).tokenizer is tokenizer
    with pytest.raises(ValueError, match="needs a tokenizer"):
        Agent(None, None, engine=object())
