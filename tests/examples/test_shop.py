"""examples/shop: a tau2-bench-style retail task. Its data (built offline from a seed), one SQLite copy
per episode, shop policy in the tools, a customer who answers from the row, a reward that checks the
final database against the goal state, what the customer was told and the writes attempted, and
whole episodes through the real rollout loop with a ScriptedEngine playing the agent over the tiny
preset's real tokenizer."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import rlfactory_nb as rf
from rlfactory_nb.engines.testing import ScriptedEngine
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.recipes.shop.build_data import SYSTEM, tasks
from rlfactory_nb.recipes.shop.env import ScriptedCustomer, Shop, goal_state, shop_env
from rlfactory_nb.recipes.shop.world import SEED, episode_database, orders_digest
from rlfactory_nb.types import ToolCall, Turn

DATA = Path(__file__).resolve().parents[2] / "examples" / "shop" / "data"
CALL = '<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


def call(name: str, **arguments) -> str:
    return CALL.format(name=name, args=json.dumps(arguments))


def rows(split: str = "train") -> list[dict]:
    return [json.loads(line) for line in (DATA / f"{split}.jsonl").read_text().splitlines()]


def a_row(kind: str, feasible: bool = True) -> dict:
    return next(r for r in rows() if r["task"] == kind and bool(r["gold_actions"]) == feasible)


def email_of(row: dict) -> str:
    return row["messages"][-1]["content"].split()[3].rstrip(";")


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def test_the_shipped_data_is_what_the_seed_builds_and_splits_customers():
    train, heldout = tasks(SEED)
    assert train == rows("train") and heldout == rows("heldout")  # data/*.jsonl are up to date
    emails = {split: {email_of(r) for r in rs} for split, rs in (("train", train), ("heldout", heldout))}
    assert not emails["train"] & emails["heldout"]
    kinds = {(r["task"], bool(r["gold_actions"])) for r in train}
    assert kinds == {("cancel", True), ("cancel", False), ("re-address", True)}


def test_goal_state_replays_the_gold_actions_and_infeasible_tasks_change_nothing(tmp_path):
    seed_state = orders_digest(episode_database(tmp_path))
    feasible, infeasible = a_row("cancel"), a_row("cancel", feasible=False)
    assert goal_state(SEED, infeasible["gold_actions"]) == seed_state
    goal = goal_state(SEED, feasible["gold_actions"])
    changed = [new for old, new in zip(seed_state, goal, strict=True) if old != new]
    assert changed == [next(o for o in goal if o[0] == feasible["gold_actions"][0]["arguments"]["order_id"])]
    assert changed[0][3] == "cancelled"


def test_each_episode_has_its_own_database_and_close_removes_it():
    row = a_row("cancel")
    order_id = row["gold_actions"][0]["arguments"]["order_id"]
    first, second = Shop(), Shop()
    for env in (first, second):
        asyncio.run(env.reset(row, seed=0))
    [done] = asyncio.run(first.call_tools([ToolCall("cancel_order", {"order_id": order_id})]))
    assert done.ok and "cancelled" in done.content
    assert first.reward() == 1.0 and second.reward() == 0.0  # the second shop never saw the change
    [again] = asyncio.run(first.call_tools([ToolCall("cancel_order", {"order_id": order_id})]))
    assert again.ok and again.content.startswith("Error") and "only pending" in again.content
    folders = [first.folder, second.folder]
    assert all(f.exists() for f in folders)
    for env in (first, second):
        asyncio.run(env.close())
        asyncio.run(env.close())  # twice is harmless
    assert not any(f.exists() for f in folders)


def test_tools_follow_the_shop_policy():
    shop = Shop()
    asyncio.run(shop.reset(a_row("cancel", feasible=False), seed=0))
    listing = asyncio.run(shop.call_tools([ToolCall("find_orders", {"email": "nobody@example.com"})]))[0]
    assert listing.content.startswith("Error: no customer")
    shipped = next(o for o in orders_digest(shop.db) if o[3] != "pending")
    results = asyncio.run(shop.call_tools([
        ToolCall("change_address", {"order_id": shipped[0], "address": "1 New St"}),
        ToolCall("get_order", {"order_id": 1}),
    ]))
    assert "only pending" in results[0].content and results[1].content == "Error: no order #1"
    assert shop.goal_reached()  # the shop refused the write: the database is untouched...
    assert shop.forbidden() == [f"re-address #{shipped[0]}"] and shop.reward() == 0.0  # ...but it was attempted
    asyncio.run(shop.close())


def test_the_scripted_customer_replies_in_order_then_stops():
    customer = ScriptedCustomer()
    customer.reset(a_row("cancel"), seed=0)
    first = customer.respond(Turn(text="Shall I?"))
    assert first.messages[0]["content"] == "Yes, please go ahead." and not first.done and first.speaker == "user"
    last = customer.respond(Turn(text="Done."))
    assert last.done and last.messages[0]["content"] == "Thanks, that is all."  # the marker is not said
    with pytest.raises(TypeError, match="class or factory"):
        Shop(customer)


async def rollout(tokenizer, row, replies, user=None, keep_state=False):
    engine = ScriptedEngine(tokenizer, replies)
    agent = rf.Agent(None, tokenizer=tokenizer, engine=engine, env=shop_env(user), max_turns=8, max_total_tokens=2048)
    traj = await agent.rollout(row, keep_open=True)
    env = agent.env_of(traj)
    reward, folder, state = env.reward(), env.folder, env.state()
    await agent.close_episodes()
    assert not folder.exists() and agent.episodes.stats.open_now == 0
    return (traj, reward, state) if keep_state else (traj, reward)


async def test_an_agent_that_serves_the_customer_reaches_the_goal_state(tokenizer):
    row = a_row("re-address")
    gold = row["gold_actions"][0]["arguments"]
    traj, reward = await rollout(tokenizer, row, [
        call("find_orders", email=email_of(row)),
        "I can change that. Shall I?",
        call("change_address", order_id=gold["order_id"], address=gold["address"]),
        "Your order ships to the new address.",
    ])
    assert reward == 1.0
    assert traj.metadata.get("env_reward") == 1.0
    roles = [m["role"] for m in traj.messages]
    assert roles.count("tool") == 2 and roles.count("user") >= 2  # the customer's reply entered the context
    # only what the agent wrote is trained on: the customer's and the tools' words are masked
    trained = tokenizer.decode([i for i, m in zip(traj.response_ids, traj.loss_mask, strict=True) if m])
    masked = tokenizer.decode([i for i, m in zip(traj.response_ids, traj.loss_mask, strict=True) if not m])
    assert "Yes, please go ahead." in masked and "Yes, please go ahead." not in trained
    assert "ships to" in trained and gold["address"] in trained


async def test_a_wrong_or_forbidden_action_scores_zero_and_a_refusal_scores_one(tokenizer):
    row = a_row("cancel")
    wrong_order = row["gold_actions"][0]["arguments"]["order_id"] + 1
    _, wrong = await rollout(tokenizer, row, [call("cancel_order", order_id=wrong_order), "Done."])
    _, idle = await rollout(tokenizer, row, ["I cannot help with that."])
    infeasible = a_row("cancel", feasible=False)
    order, status = infeasible["communicate_info"]
    lookup = call("find_orders", email=email_of(infeasible))
    _, refused = await rollout(tokenizer, infeasible, [lookup, f"Order #{order} is {status}, so I cannot cancel it."])
    _, vague = await rollout(tokenizer, infeasible, [lookup, "Sorry, I cannot cancel it."])  # which order, and why?
    _, untold = await rollout(tokenizer, infeasible, [lookup, f"Order #{order} is {status}."])  # and cancelled or not?
    _, tried = await rollout(tokenizer, infeasible, [lookup, call("cancel_order", order_id=int(order)),
                                                     f"Order #{order} is {status}, so I cannot cancel it."])
    assert (wrong, idle, refused, vague, untold, tried) == (0.0, 0.0, 1.0, 0.0, 0.0, 0.0)


async def test_a_user_simulator_plays_the_customer(tokenizer):
    traj, reward = await rollout(tokenizer, a_row("cancel"), ["Which order?", "Goodbye."],
                                 user=lambda: rf.UserSimulator(replies=["Never mind. ###STOP###"]))
    assert reward == 0.0 and traj.num_turns == 1
    assert traj.metadata["user_tokens"] > 0
    assert traj.metadata["env_state"] == {"actions": [], "goal_reached": False, "untold": [], "forbidden": []}


SILENT = ""
BROKEN = '<tool_call>\n{"name"name"name"name"name"name"name"name'
"""the tiny model's broken call in notebook 01: parsed as an error, it changes nothing and says nothing"""


def clerk(prompt: str) -> str:
    """A correct agent, scripted: looks the customer up, then does the request (and confirms it) or
    refuses it, naming the order and its status."""
    request = re.search(r"I am (\S+); please (cancel|send) my (.+?) order(?: to (.+?))?\.", prompt)
    assert request is not None, prompt
    email, verb, item, address = request.groups()
    listed = re.search(rf"#(\d+) {re.escape(item)} \((\w+)\)", prompt)
    if listed is None:
        return call("find_orders", email=email)
    order, status = int(listed[1]), listed[2]
    if status != "pending":
        return f"Order #{order} ({item}) is {status}, so I cannot cancel it."
    if f"Done: order #{order}" in prompt:
        return f"Your {item} order #{order} is " + ("cancelled." if verb == "cancel" else f"now going to {address}.")
    if verb == "cancel":
        return call("cancel_order", order_id=order)
    return call("change_address", order_id=order, address=address)


async def policy_scores(tokenizer, rows_of, replies) -> list[tuple[float, bool]]:
    """(reward, database goal reached) of each row, played by `replies`."""
    scored = []
    for row in rows_of:
        _, reward, state = await rollout(tokenizer, row, replies, keep_state=True)
        scored.append((reward, state["goal_reached"]))
    return scored


@pytest.mark.parametrize("split", ["heldout", "train"])
async def test_silence_and_broken_calls_score_zero_on_every_row_and_a_correct_clerk_one(tokenizer, split):
    """The reward cannot be earned by doing nothing: a refused request's database is untouched, but
    its customer must be told which order, its status and that it cannot be done."""
    tasks_of = rows(split)
    silent = await policy_scores(tokenizer, tasks_of, [SILENT])
    broken = await policy_scores(tokenizer, tasks_of, [BROKEN])
    correct = await policy_scores(tokenizer, tasks_of, clerk)
    refused = sum(not row["gold_actions"] for row in tasks_of)
    # the database check alone still passes the untouched rows: what the old reward paid for
    assert sum(reached for _, reached in silent) == sum(reached for _, reached in broken) == refused > 0
    assert [reward for reward, _ in silent] == [reward for reward, _ in broken] == [0.0] * len(tasks_of)
    assert [reward for reward, _ in correct] == [1.0] * len(tasks_of)


@pytest.mark.slow
def test_the_example_trains_two_steps_on_the_tiny_model(tmp_path):
    """`rlfactory-nb train examples/shop/config.yaml`: two GRPO steps of the tiny-calculator preset on
    the shop, episodes made from `rollout.env`, the environment's reward as the training reward."""
    root = Path(__file__).resolve().parents[2]
    command = [
        str(Path(sys.executable).with_name("rlfactory-nb")), "train", str(root / "examples" / "shop" / "config.yaml"),
        "grpo.steps=2", "grpo.prompts_per_step=2", "grpo.group_size=2", "grpo.eval_every=2",
        "grpo.checkpoint_every=2", "data.eval_size=2", "rollout.max_turns=3", f"output_dir={tmp_path}",
    ]
    done = subprocess.run(command, check=False, cwd=root, env={**os.environ, "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "finished step 2 of 2" in done.stdout
    run = tmp_path / "shop-tiny"
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 1, 2]
    last = metrics[-1]
    assert {"reward/env", "env/episodes_opened", "env/episodes_closed", "eval/sampled_reward/mean"} <= set(last), sorted(last)
    assert last["env/episodes_opened"] == last["env/episodes_closed"] >= 4
    trajectories = [json.loads(line) for path in (run / "trajectories").glob("*.jsonl") for line in path.read_text().splitlines()]
    assert len(trajectories) == 8
    assert all(t["messages"][0]["content"] == SYSTEM for t in trajectories)
    assert all("env_state" in t["metadata"] for t in trajectories)
