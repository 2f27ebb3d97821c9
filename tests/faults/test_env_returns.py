"""Issue 54, items 5, 9 and 10: what an environment returns is bounded and checked like a ToolSet's.

5. One size limit on every text that enters a trajectory: an environment's 2 MiB tool result was
   kept whole (a ToolSet cuts at `max_result_chars`), and tokenizing it stalled every episode's loop.
9. One row's malformed return (a string from `reset`, as TRL classes return; `Response("text")`; a
   non-number in `Response.info["user_tokens"]`) failed the whole batch: now it is that episode's error.
10. An environment's `@rf.tool` methods skipped the argument schema check: `cancel_order(order_id=1008.5)`
   ran, answered "Done" and logged the action.
"""

from __future__ import annotations

import asyncio

import pytest

import rlfactory_nb as rf
from rlfactory_nb.engines.testing import ScriptedEngine
from rlfactory_nb.envs.base import Response
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.programs import AgentProgram
from rlfactory_nb.rollout.agent import Agent
from rlfactory_nb.types import ToolCall
from tests.programs.conftest import ReplayEngine

CALL = '<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'
HUGE = "x" * (2 << 20)
LIMIT = 4000
CUT = len(f"\n[... truncated: showing {LIMIT} of {len(HUGE)} characters]") + LIMIT


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def row(content, **columns):
    return {"messages": [{"role": "user", "content": content}], **columns}


class Huge(rf.Environment):
    """Says 2 MiB wherever an environment can speak."""

    def reset(self, row, *, seed):
        return [{"role": "user", "content": HUGE}]

    @rf.tool
    def read(self) -> str:
        """Read the page."""
        return HUGE

    def respond(self, turn):
        return Response([{"role": "user", "content": HUGE}])


async def test_every_text_an_environment_says_is_cut_to_one_limit(tokenizer):
    engine = ScriptedEngine(tokenizer, [CALL.format(name="read", args="{}"), "fine", "done"])
    traj = await Agent(None, engine=engine, tokenizer=tokenizer, env=Huge, max_turns=3, max_total_tokens=20000).rollout(row("go"))
    said = [m for m in traj.messages if m["role"] != "assistant" and m["content"] != "go"]
    assert [m["role"] for m in said] == ["user", "tool", "user"]  # the opening, the tool result, the reply
    assert all(len(m["content"]) == CUT and m["content"].endswith(f"of {len(HUGE)} characters]") for m in said), (
        f"texts of {[len(m['content']) for m in said]} characters entered the trajectory"
    )
    assert len(traj.turns[0].results[0].content) == CUT and len(traj.turns[1].replies[0]["content"]) == CUT


async def test_a_programs_history_is_cut_to_the_same_limit(tokenizer):
    async def relays(row, llm):
        client = llm.client()
        await client.chat.completions.create(model=llm.model, messages=[*row["messages"], {"role": "user", "content": HUGE}])
        return "done"

    engine = ReplayEngine(tokenizer, ["ok"])
    program = AgentProgram(relays, engine=engine, tokenizer=tokenizer, max_total_tokens=20000)
    traj = await program.rollout(row("go"))
    assert "program_error" not in traj.metadata, traj.metadata.get("program_error")
    assert len(traj.messages[1]["content"]) == CUT


class Malformed(rf.Environment):
    """Returns what the row's `kind` names: each malformed, as user code (or a TRL class) returns it."""

    def reset(self, row, *, seed):
        self.kind = row["kind"]
        return "Welcome to the game." if self.kind == "reset_text" else None

    def respond(self, turn):
        if self.kind == "response_text":
            return Response("Try again.")
        if self.kind == "user_tokens":
            return Response([{"role": "user", "content": "Again."}], info={"user_tokens": "many"})
        return Response([{"role": "user", "content": "Good."}], done=True)


async def test_one_rows_malformed_return_is_that_episodes_error_and_the_others_finish(tokenizer):
    agent = Agent(None, engine=ScriptedEngine(tokenizer, ["an answer"]), tokenizer=tokenizer, env=Malformed, max_turns=3)
    kinds = ["reset_text", "response_text", "user_tokens", "healthy"]
    trajectories = await asyncio.gather(*(agent.rollout(row("play", kind=kind)) for kind in kinds))
    by_kind = dict(zip(kinds, trajectories))
    assert by_kind["healthy"].finish_reason == "stop" and "env_error" not in by_kind["healthy"].metadata
    expected = {
        "reset_text": ("reset", "reset() returned a str ('Welcome to the game.'), not a list of messages"),
        "response_text": ("respond", "Response.messages is a str ('Try again.'), not a list of messages"),
        "user_tokens": ("respond", "Response.info['user_tokens'] is a str ('many'), not a number"),
    }
    for kind, (where, message) in expected.items():
        traj = by_kind[kind]
        assert traj.finish_reason == "error", f"{kind}: {traj.finish_reason}"
        assert traj.metadata["env_error"]["kind"] == where and message in traj.metadata["env_error"]["message"]
    assert agent.episodes.stats.errors == {"reset": 1, "respond": 2} and agent.episodes.stats.closed == 4


class Shop(rf.Environment):
    def reset(self, row, *, seed):
        self.orders, self.log = {1008: "pending"}, []

    @rf.tool
    def cancel_order(self, order_id: int) -> str:
        """Cancel an order.

        Args:
            order_id: the order's number
        """
        self.log.append(("cancel", order_id))
        if order_id in self.orders:
            self.orders[order_id] = "cancelled"
        return "Done"

    def state(self):
        return {"orders": {str(k): v for k, v in self.orders.items()}, "log": list(self.log)}


async def test_an_environment_tools_arguments_are_checked_against_its_schema(tokenizer):
    calls = [CALL.format(name="cancel_order", args='{"order_id": 1008.5}'),
             CALL.format(name="cancel_order", args='{"order_id": "1008"}'),
             CALL.format(name="cancel_order", args='{"order_id": 1008, "refund": true}'), "ok"]
    traj = await Agent(None, engine=ScriptedEngine(tokenizer, calls), tokenizer=tokenizer, env=Shop, max_turns=4).rollout(row("cancel"))
    results = [r for t in traj.turns for r in t.results]
    assert [r.status for r in results] == ["invalid_args"] * 3, [r.content for r in results]
    assert "1008.5 is not of type 'integer'" in results[0].content
    assert "'1008' is not of type 'integer'" in results[1].content
    assert traj.turns[-1].state == {"orders": {"1008": "pending"}, "log": []}, "a call the schema refuses ran"


async def test_the_shops_cancel_order_refuses_a_fractional_order_id():
    """The issue's case on the shipped recipe: the action was logged and "Done" said, order unchanged."""
    from rlfactory_nb.recipes.shop.env import Shop
    from tests.examples.test_shop import a_row

    row = a_row("cancel")
    order_id = row["gold_actions"][0]["arguments"]["order_id"]
    shop = Shop()
    await shop.reset(row, seed=0)
    try:
        [refused] = await shop.call_tools([ToolCall("cancel_order", {"order_id": order_id + 0.5})])
        assert refused.status == "invalid_args" and "is not of type 'integer'" in refused.content
        assert shop.reward() == 0.0, "the shop changed for a call its schema refuses"
        [done] = await shop.call_tools([ToolCall("cancel_order", {"order_id": order_id})])
        assert done.ok and shop.reward() == 1.0
    finally:
        await shop.close()
