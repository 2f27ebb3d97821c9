"""Environments that misbehave: each failure ends its episode as data (a named error kind, counted,
finish_reason "error"), the other episodes and the batch go on, and `close` has run. The last test
counts instances and child processes before and after 200 failing episodes."""

import asyncio
import os
import subprocess
import time

import pytest

import rlfactory_nb as rf
from rlfactory_nb.engines.testing import ScriptedEngine
from rlfactory_nb.envs import Response
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.rollout.agent import Agent
from rlfactory_nb.rollout.groups import rollout_groups

CALL = '<tool_call>\n{"name": "poke", "arguments": {}}\n</tool_call>'
LIVE: list[object] = []
"""instances made and not closed"""


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


class Faulty(rf.Environment):
    """Fails where the row says: "init", "reset", "tool", "respond", "reward", "close", "hang", "close_hang"."""

    def __init__(self):
        LIVE.append(self)
        self.fault = None

    def reset(self, row, *, seed):
        self.fault = row["fault"]
        if self.fault == "reset":
            raise KeyError("no such table")

    def tool_specs(self):
        return [rf.tools.python.tool(lambda: "", name="poke", description="Poke.").spec]

    async def call_tools(self, calls):
        if self.fault == "tool":
            raise ConnectionError("sandbox went away")
        if self.fault == "hang":
            await asyncio.sleep(3600)
        return [rf.types.ToolResult("poke", "ok", "poked") for _ in calls]

    def respond(self, turn):
        if self.fault == "respond":
            raise ValueError("cannot parse the move")
        return Response([{"role": "user", "content": "again"}]) if self.fault == "chatty" else None

    def reward(self):
        if self.fault == "reward":
            raise ZeroDivisionError("empty board")
        return 1.0

    def close(self):
        LIVE.remove(self)
        if self.fault == "close":
            raise OSError("cannot remove the sandbox")
        if self.fault == "close_hang":
            time.sleep(1.0)  # a close past its bound is abandoned, counted, and the episode still ends


class BrokenInit(Faulty):
    def __init__(self):
        raise RuntimeError("cannot start the browser")


def agent_for(tokenizer, env=Faulty, **options):
    engine = ScriptedEngine(tokenizer, {"go": [CALL, "done"]})  # per conversation: a call, then an answer
    options = {"max_turns": 3, "env_timeout_s": 0.5, **options}
    return Agent(None, engine=engine, tokenizer=tokenizer, env=env, **options)


def row(fault):
    return {"messages": [{"role": "user", "content": f"go {fault}"}], "fault": fault}


@pytest.mark.parametrize(
    ("fault", "kind", "error"),
    [
        ("reset", "reset", "KeyError"),
        ("tool", "tool", "ConnectionError"),
        ("respond", "respond", "ValueError"),
        ("reward", "reward", "ZeroDivisionError"),
        ("close", "close", "OSError"),
        ("hang", "timeout", "TimeoutError"),
        ("close_hang", "close", "TimeoutError"),
    ],
)
async def test_a_failing_environment_ends_its_episode_as_data_and_the_batch_goes_on(tokenizer, fault, kind, error):
    LIVE.clear()
    agent = agent_for(tokenizer)
    [[failed], [fine]] = await rollout_groups(agent, [row(fault), row("none")], group_size=1)
    assert failed.finish_reason == "error"
    assert failed.metadata["env_error"]["kind"] == kind and failed.metadata["env_error"]["error"] == error
    assert fine.finish_reason == "stop" and "env_error" not in fine.metadata and fine.metadata["env_reward"] == 1.0
    assert dict(agent.episodes.stats.errors) == {kind: 1}
    assert agent.episodes.stats.opened == agent.episodes.stats.closed == 2 and not LIVE


async def test_a_factory_that_raises_is_a_create_error(tokenizer):
    agent = agent_for(tokenizer, env=BrokenInit, max_open_envs=1)
    trajectories = await asyncio.gather(*(agent.rollout(row("none")) for _ in range(3)))
    assert [t.metadata["env_error"]["kind"] for t in trajectories] == ["create"] * 3
    assert all(t.num_turns == 0 and t.finish_reason == "error" for t in trajectories)
    assert agent.episodes.stats.errors["create"] == 3 and agent.episodes.stats.opened == 0  # slots were given back


async def test_a_user_that_never_stops_ends_at_the_turn_limit_and_closes(tokenizer):
    LIVE.clear()
    agent = Agent(None, engine=ScriptedEngine(tokenizer, ["hm"]), tokenizer=tokenizer, env=Faulty, max_turns=5)
    traj = await agent.rollout(row("chatty"))
    assert traj.finish_reason == "max_turns" and traj.num_turns == 5 and not LIVE


async def test_a_cancelled_rollout_still_closes_its_environment(tokenizer):
    LIVE.clear()
    agent = agent_for(tokenizer, env_timeout_s=None)
    task = asyncio.ensure_future(agent.rollout(row("hang")))
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not LIVE and agent.episodes.stats.closed == 1


class Sandboxed(Faulty):
    """Holds a child process per episode, as a sandbox or a browser would."""

    def reset(self, row, *, seed):
        self.process = subprocess.Popen(["sleep", "60"])
        super().reset(row, seed=seed)

    def close(self):
        self.process.kill()
        self.process.wait()
        super().close()


def children() -> set[int]:
    path = f"/proc/{os.getpid()}/task/{os.getpid()}/children"
    with open(path) as listing:
        return {int(pid) for pid in listing.read().split()}


async def test_200_failing_episodes_leave_no_instance_and_no_child_process(tokenizer):
    LIVE.clear()
    before = children()
    faults = ["tool", "respond", "reward", "close", "hang"] * 40
    agent = agent_for(tokenizer, env=Sandboxed, env_timeout_s=2.0, max_open_envs=64)
    rows = [row(fault) for fault in faults]
    groups = await rollout_groups(agent, rows, group_size=1)
    assert all(group[0].finish_reason == "error" for group in groups)
    assert sum(agent.episodes.stats.errors.values()) == 200
    assert agent.episodes.stats.opened == agent.episodes.stats.closed == 200
    assert not LIVE and children() == before
