"""An agent program plays inside an episode: `rollout.program` with `rollout.env` gets the episode
environment's tools (`llm.tools`), its answers (`llm.respond()`), its reward and its close, as an
rf.Agent does; and every `rollout.*` setting reaches the program through `bind`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import rlfactory_nb as rf
from rlfactory_nb.chat import get_parser
from rlfactory_nb.config import RunConfig
from rlfactory_nb.envs.base import Environment
from rlfactory_nb.programs import AgentProgram
from rlfactory_nb.rollout.player import EpisodePlayer
from rlfactory_nb.runtime import Runtime, check_names
from rlfactory_nb.types import Sample
from tests.programs.conftest import ReplayEngine, audit_masks, call_text

ROOT = Path(__file__).resolve().parents[2]
SHOP_PROGRAM = f"{ROOT}/examples/agents_sdk/shop.py:solve"
SHOP_TOOLS = {"find_orders", "get_order", "cancel_order", "change_address"}


def shop_row(index: int) -> dict:
    return json.loads((ROOT / "examples/shop/data/train.jsonl").read_text().splitlines()[index])


def shop_runtime(engine, tiny_policy, **overrides) -> Runtime:
    cfg = rf.example("shop").config({"rollout.program": SHOP_PROGRAM, **overrides})
    check_names(cfg)  # a program with an environment is a run's setting like any other
    return Runtime.from_config(cfg, None, tiny_policy, engine=engine)


async def test_an_agents_sdk_program_serves_the_shops_customer_and_is_scored_by_the_final_database(tiny_policy):
    row = shop_row(6)  # bruno.silva wants the kettle order #1048 (pending) cancelled
    assert row["gold_actions"] == [{"name": "cancel_order", "arguments": {"order_id": 1048}}]
    engine = ReplayEngine(tiny_policy.tokenizer, [
        call_text("find_orders", {"email": "bruno.silva@example.com"}),
        call_text("cancel_order", {"order_id": 1048}),
        "Shall I cancel order 1048?",  # the customer answers "Yes, please go ahead."
        "Done: order 1048 is cancelled.",  # the customer answers "Thanks, that is all. ###STOP###"
    ])
    runtime = shop_runtime(engine, tiny_policy)
    player = runtime.agent()
    assert isinstance(player, AgentProgram) and isinstance(player, EpisodePlayer)
    traj = await player.rollout(row, keep_open=True)
    assert "program_error" not in traj.metadata and traj.finish_reason == "stop", traj.metadata
    assert {tool["function"]["name"] for tool in traj.metadata["tools"]} == SHOP_TOOLS  # the episode's own tools
    assert traj.metadata["final_answer"] == "Done: order 1048 is cancelled."
    shop = player.env_of(traj)  # still open for the reward functions, as an Agent's
    assert shop is not None and shop.actions == ["cancel #1048"] and shop.told == [
        "Shall I cancel order 1048?", "Done: order 1048 is cancelled."
    ]
    # the customer's turn entered the conversation masked, and every sampled token is trained
    text = tiny_policy.tokenizer.decode(traj.prompt_ids + traj.response_ids)
    assert "Yes, please go ahead." in text and [t.speaker for t in traj.turns if t.replies] == ["user", "user"]
    audit_masks(traj, engine, tiny_policy.tokenizer, traj.metadata["tools"])
    assert traj.metadata["env_reward"] == 1.0  # reward(): the final database, what the customer heard
    [[outcome]] = await runtime.reward.score_groups([[Sample.from_trajectory(traj, env=shop)]])
    assert list(runtime.reward.functions) == ["env", "exact_match"] and outcome.score == 1.0
    await player.close_episodes([traj])
    assert shop.db is None and player.env_of(traj) is None
    metrics = player.episode_metrics(reset=True)
    assert metrics["env/episodes_opened"] == metrics["env/episodes_closed"] == 1 and metrics["env/errors"] == 0


async def test_a_program_that_changes_nothing_scores_zero_and_its_episode_closes(tiny_policy):
    engine = ReplayEngine(tiny_policy.tokenizer, ["Sorry, I cannot help."])
    player = shop_runtime(engine, tiny_policy).agent()
    traj = await player.rollout(shop_row(6))  # not kept open: the reward taken, then closed
    assert traj.metadata["env_reward"] == 0.0 and player.episode_metrics()["env/open_now"] == 0


class BrokenReset(Environment):
    def reset(self, row, *, seed):
        raise OSError("the database is gone")


async def test_an_environment_that_fails_at_reset_ends_the_programs_episode_as_data(replay):
    called = []

    async def program(row, llm):
        called.append(row)
        return "x"

    player, engine = replay(["x"], program, env=BrokenReset)
    traj = await player.rollout({"messages": [{"role": "user", "content": "hi"}]})
    assert traj.finish_reason == "error" and traj.metadata["env_error"]["kind"] == "reset" and not called
    assert player.episode_metrics()["env/errors/reset"] == 1.0 and not engine.prompts


@pytest.mark.parametrize("thinking", [True, False])
async def test_every_rollout_setting_reaches_a_program_through_the_runtime(tiny_policy, thinking):
    async def asks(row, llm):
        return (await llm.client().chat.completions.create(model=llm.model, messages=row["messages"])).choices[0].message.content

    rf_cfg = {"name": "t", "rollout": {"program": "tests.programs.test_openai_client:tool_loop", "enable_thinking": thinking,
                                       "parser": "hermes", "env_seed": "sample", "max_turns": 3, "drift_check": "off"},
              "tools": {"max_result_chars": 77}}
    engine = ReplayEngine(tiny_policy.tokenizer, ["hello"])
    bound = Runtime.from_config(RunConfig.from_dict(rf_cfg), None, tiny_policy, engine=engine).agent()
    agent = Runtime.from_config(RunConfig.from_dict({**rf_cfg, "rollout": {k: v for k, v in rf_cfg["rollout"].items() if k != "program"}}),
                                None, tiny_policy, engine=engine).agent()
    assert bound.settings.rollout == agent.settings  # one translation of cfg.rollout, for both
    assert type(bound.serving().parser) is type(get_parser("hermes")) is type(agent.parser)
    assert bound.enable_thinking is agent.enable_thinking is thinking
    assert bound.settings.rollout.limits.max_text_chars == 77 and bound.settings.rollout.env_seed == "sample"
    bound = AgentProgram(asks).bind(tiny_policy, engine=engine, settings=bound.settings.rollout)
    await bound.rollout({"messages": [{"role": "user", "content": "What is 12+30?"}]})
    question = [{"role": "user", "content": "What is 12+30?"}]
    rendered = tiny_policy.tokenizer.apply_chat_template(question, tokenize=False, add_generation_prompt=True, enable_thinking=thinking)
    assert tiny_policy.tokenizer.decode(engine.prompts[0]) == rendered


class RewardingUser(Environment):
    """Answers the model's first reply with a reward for it: 0.5 when it was "good"."""

    def respond(self, turn):
        from rlfactory_nb.envs.base import Response

        return Response([{"role": "user", "content": "Now summarize."}], reward=0.5 if "good" in turn.text else 0.0)


async def answer_then_summarize(row, llm):
    """Call 0 on the row, the user's answer, then call 1 on a rewritten history: two segments."""
    client = llm.client()
    first = (await client.chat.completions.create(model=llm.model, messages=row["messages"])).choices[0].message.content
    await llm.respond()
    rewritten = [{"role": "user", "content": f"You said {first!r}; summarize."}]
    return (await client.chat.completions.create(model=llm.model, messages=rewritten)).choices[0].message.content


def test_per_turn_advantages_train_every_segment_of_a_program_by_hand(replay):
    """grpo.advantage: turn with a program: call k's tokens get turn k's advantage in whichever
    segment they landed. Episode a: turn rewards [0.5 (the user's), 1.0 - 0.5] -> to-go [1.0, 0.5];
    episode b: [0.0, 0.0] -> [0.0, 0.0]; the group's mean return 0.5, unscaled: a [0.5, 0.0], b [-0.5, -0.5]."""
    import asyncio

    import torch

    from rlfactory_nb.programs import expand_segments
    from rlfactory_nb.rewards.runner import RewardOutcome
    from rlfactory_nb.train.credit import assign_credit

    player, _ = replay(["good", "one", "bad", "two"], answer_then_summarize, env=RewardingUser)

    async def both():
        return [await player.rollout({"messages": [{"role": "user", "content": "hi"}]}) for _ in range(2)]

    a, b = asyncio.run(both())
    assert [len(t.metadata["segments"]) for t in (a, b)] == [1, 1] and [t.num_turns for t in (a, b)] == [2, 2]
    assert (a.turns[0].env_reward, b.turns[0].env_reward) == (0.5, 0.0)
    outcomes = [[RewardOutcome("a", 1.0), RewardOutcome("b", 0.0)]]
    advantages = assign_credit("turn", [[a, b]], torch.tensor([[1.0, 0.0]]), outcomes, scale=False)
    rows, per_row = expand_segments([a, b], advantages)
    assert [r.id for r in rows] == [f"{a.id}/segment0", a.id, f"{b.id}/segment0", b.id]
    expected = [0.5, 0.0, -0.5, -0.5]  # call 0 (the earlier segment), then call 1 (the last), per episode
    for row, values, value in zip(rows, per_row, expected):
        assert len(values) == len(row.response_ids) and sum(row.loss_mask) > 0
        assert values == [value if mask else 0.0 for mask in row.loss_mask]
