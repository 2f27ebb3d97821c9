"""rf.UserSimulator: scripted, played by a real engine (the frozen tiny model), and over a real HTTP
endpoint; instructions from the row, the stop marker and the turn limit, seeds, masks and metrics."""

import json

import httpx
import pytest

import rlfactory_nb as rf
from rlfactory_nb.engines.testing import ScriptedEngine
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.rollout.agent import Agent
from rlfactory_nb.seeds import SampleId


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def row(content, **columns):
    return {"messages": [{"role": "user", "content": content}], **columns}


def masked_text(tokenizer, traj, sampled):
    return tokenizer.decode([i for i, m in zip(traj.response_ids, traj.loss_mask) if m == sampled])


async def test_a_scripted_user_replies_masked_and_ends_the_dialogue_at_its_stop_marker(tokenizer):
    def user():
        return rf.UserSimulator(replies=["My order is #12.", "Yes please. ###STOP###"])

    agent = Agent(None, engine=ScriptedEngine(tokenizer, ["Which order?", "Cancel #12?", "Done."]), tokenizer=tokenizer, env=user, max_turns=6)
    traj = await agent.rollout(row("Cancel my order."))
    assert traj.finish_reason == "stop" and traj.num_turns == 2
    assert [t.speaker for t in traj.turns] == ["user", "user"]
    assert traj.turns[1].replies == [{"role": "user", "content": "Yes please."}]  # the marker is not shown to the model
    assert "My order is #12." in masked_text(tokenizer, traj, 0) and "My order" not in masked_text(tokenizer, traj, 1)
    assert traj.messages[-2:] == [{"role": "user", "content": "My order is #12."}, {"role": "assistant", "content": "Cancel #12?"}]
    assert traj.turns[-1].state == {"user_turns": 2}
    assert agent.episode_metrics()["env/user_tokens"] == traj.metadata["user_tokens"] == 6


async def test_a_user_that_never_stops_is_ended_by_its_turn_limit_or_the_agents(tokenizer):
    chatty = ["Tell me more."] * 50
    agent = Agent(None, engine=ScriptedEngine(tokenizer, ["Sure."]), tokenizer=tokenizer,
                  env=lambda: rf.UserSimulator(replies=chatty, max_turns=3), max_turns=10)
    traj = await agent.rollout(row("Hello"))
    assert traj.finish_reason == "stop" and traj.num_turns == 3
    agent = Agent(None, engine=ScriptedEngine(tokenizer, ["Sure."]), tokenizer=tokenizer,
                  env=lambda: rf.UserSimulator(replies=chatty, max_turns=100), max_turns=4)
    traj = await agent.rollout(row("Hello"))
    assert traj.finish_reason == "max_turns" and traj.num_turns == 4 and traj.truncated


async def test_a_user_played_by_a_frozen_model_follows_the_row_and_samples_with_per_request_seeds(tiny_policy):
    tokenizer = tiny_policy.tokenizer
    frozen = tiny_policy.engine("hf")  # the user's own engine: nothing trains it

    def user():
        return rf.UserSimulator(frozen, instructions="goal", max_turns=2, max_tokens=12)

    policy_engine = ScriptedEngine(tokenizer, ["How can I help?"])
    agent = Agent(None, engine=policy_engine, tokenizer=tokenizer, env=user, max_turns=4, max_total_tokens=2048)
    goal = row("Hi", goal="you want a refund for order 7")
    first = await agent.rollout(goal, sample_id=SampleId(1, 1, 0, 0))
    again = await agent.rollout(goal, sample_id=SampleId(1, 1, 0, 0))
    sibling = await agent.rollout(goal, sample_id=SampleId(1, 1, 0, 1))
    other = await agent.rollout(goal, sample_id=SampleId(1, 1, 1, 0))
    replies = [[t.replies for t in traj.turns] for traj in (first, again, sibling, other)]
    # the same sample, and a sibling in its group (the group shares its reset seed): the same user
    assert replies[0] == replies[1] == replies[2]
    assert first.num_turns == 2 and first.turns[0].replies and not first.truncated
    assert replies[0] != replies[3]  # another prompt's group draws other seeds (12 tokens from 1M params: they differ)
    assert first.metadata["user_tokens"] > 0 and first.metadata["user_s"] > 0
    assert sum(first.loss_mask) == len(first.logprobs) == sum(t.num_tokens for t in first.turns)


async def test_a_user_over_an_http_endpoint_sends_its_seed_and_stops_at_the_marker(tokenizer, judge_server):
    def user():
        return rf.UserSimulator(base_url=f"{judge_server}/v1", model="text=Refund order 7 please. ###STOP###", instructions=lambda r: r["goal"])

    async with httpx.AsyncClient() as http:
        await http.post(f"{judge_server}/reset")
    agent = Agent(None, engine=ScriptedEngine(tokenizer, ["What do you need?"]), tokenizer=tokenizer, env=user)
    traj = await agent.rollout(row("Hello", goal="a refund"), sample_id=SampleId(3, 1, 0, 0))
    async with httpx.AsyncClient() as http:
        stats = json.loads((await http.get(f"{judge_server}/stats")).text)
    body = stats["last_body"]
    assert traj.finish_reason == "stop" and traj.turns[0].replies == [{"role": "user", "content": "Refund order 7 please."}]
    assert isinstance(body["seed"], int) and "a refund" in body["messages"][0]["content"]
    assert [m["role"] for m in body["messages"]] == ["system", "assistant", "user"]  # the user's side of the dialogue
    assert traj.metadata["user_tokens"] == 6  # the endpoint's reported completion tokens


def test_a_user_simulator_needs_exactly_one_source():
    with pytest.raises(ValueError, match="exactly one of engine="):
        rf.UserSimulator()
    with pytest.raises(ValueError, match="exactly one of engine="):
        rf.UserSimulator(replies=["a"], base_url="http://x")
