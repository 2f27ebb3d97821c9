"""Hung user code cannot starve healthy user code (issue 54, item 4), and a hung environment cannot
hold a step forever (a default `env_timeout_s`).

Before: sync `@rf.tool` functions and plain-function programs ran on the event loop's default
executor (min(32, cpus + 4) threads); 40 hung tool calls, each given up by its caller, filled it,
and then a healthy tool call and a healthy program both timed out behind them."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import rlfactory_nb as rf
from rlfactory_nb import _threads
from rlfactory_nb.config import DEFAULTS
from rlfactory_nb.errors import HungCallsError
from rlfactory_nb.programs import AgentProgram
from rlfactory_nb.rollout.agent import Agent
from tests.programs.conftest import ReplayEngine

ROW = {"messages": [{"role": "user", "content": "What is 2+2?"}]}


@pytest.fixture
def release():
    """An event the hung calls wait on; set at the end so that no thread outlives the test."""
    event = threading.Event()
    yield event
    event.set()


async def hang_tool_calls(release: threading.Event, count: int) -> None:
    @rf.tool
    def hangs(seconds: int) -> str:
        """Wait for the test's end."""
        release.wait(120)
        return "late"

    for outcome in await asyncio.gather(
        *(asyncio.wait_for(hangs.run({"seconds": 1}), 0.2) for _ in range(count)), return_exceptions=True
    ):
        assert isinstance(outcome, TimeoutError)


async def test_hung_tool_calls_leave_room_for_a_healthy_tool_and_a_healthy_program(tiny_policy, release):
    await hang_tool_calls(release, 40)  # more than any machine's default executor (at most 32)

    @rf.tool
    def healthy(a: int) -> int:
        """Add one."""
        return a + 1

    started = time.perf_counter()
    reply = await asyncio.wait_for(healthy.run({"a": 1}), 5.0)
    assert reply.text == "2" and time.perf_counter() - started < 5.0

    def plain(row, llm):  # a plain function: it runs in a thread of its own pool
        reply = llm.sync_client().chat.completions.create(model=llm.model, messages=row["messages"])
        return reply.choices[0].message.content

    engine = ReplayEngine(tiny_policy.tokenizer, ["<answer>4</answer>"])
    program = AgentProgram(plain, engine=engine, tokenizer=tiny_policy.tokenizer, timeout_s=5.0)
    traj = await program.rollout(ROW)
    assert traj.finish_reason == "stop", traj.metadata.get("program_error")
    assert traj.metadata["final_answer"] == "<answer>4</answer>"


async def test_an_abandoned_call_gives_its_place_back_and_abandoned_calls_are_bounded(release):
    pool = _threads.ThreadPool("tool", size=2, max_abandoned=3)
    for _ in range(2):  # as many hung calls as places, each given up: none holds a place
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(pool.run(release.wait, 120), 0.1)
    assert (pool.running, pool.abandoned) == (0, 2)
    assert await asyncio.wait_for(pool.run(lambda: "healthy"), 2.0) == "healthy"
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(pool.run(release.wait, 120), 0.1)
    with pytest.raises(HungCallsError, match="3 tool calls are still running"):
        await pool.run(lambda: "refused")  # a fourth hung call would pass the bound
    release.set()
    for _ in range(100):
        if pool.abandoned == 0:
            break
        await asyncio.sleep(0.02)
    assert pool.abandoned == 0 and await pool.run(lambda: "again") == "again"


async def test_calls_past_the_pool_size_wait_in_turn_and_a_waiter_that_gives_up_leaves_the_queue(release):
    pool = _threads.ThreadPool("env", size=1)
    gate = threading.Event()
    first = asyncio.ensure_future(pool.run(gate.wait, 5))
    await asyncio.sleep(0.05)
    with pytest.raises(TimeoutError):  # waits for a place, gives up: no place is lost
        await asyncio.wait_for(pool.run(lambda: "never"), 0.1)
    second = asyncio.ensure_future(pool.run(lambda: "second"))
    await asyncio.sleep(0.05)
    assert not second.done()
    gate.set()
    assert await first is True and await second == "second"
    assert pool.running == 0


def test_every_kind_of_user_code_has_a_pool_of_its_own():
    assert set(_threads.POOLS) == {"tool", "env", "program", "reward"}
    assert all(pool.size >= 64 for pool in _threads.POOLS.values())


def test_a_hung_environment_ends_its_episode_by_default(tiny_policy):
    """Before: `env_timeout_s` had no default, and a hung environment held the step forever."""
    assert DEFAULTS.rollout.env_timeout_s is not None and 0 < DEFAULTS.rollout.env_timeout_s <= 3600
    agent = Agent(tiny_policy, env=rf.Environment)
    assert agent.episodes.limits.timeout_s == DEFAULTS.rollout.env_timeout_s
