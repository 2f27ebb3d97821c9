"""Faults of tool servers: killed, hanging, noisy or broken at start-up, huge answers, call floods.

Real MCP servers over stdio (tests/tools/servers/test_server.py) and real signals. A tool failure is
data: each case ends in a ToolResult the model reads, or, at start-up, in a ServerStartError that names
the server and quotes what it wrote.
"""

import asyncio
import os
import signal
import time

import pytest
import pytest_asyncio
from rollout.scripted import ScriptedEngine

from rlfactory_nb.rollout.agent import Agent
from rlfactory_nb.tools import ServerStartError, ToolSet, tool
from rlfactory_nb.train.metrics import rollout_metrics

from .conftest import CALL, TEST_SERVER, server_entry

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(60)]

TEN_MB = 10 * 1024 * 1024


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tools():
    config = {"servers": [server_entry("alpha", tools={"hang": {"timeout_s": 0.5}})]}
    async with ToolSet.from_config(config, max_result_chars=50) as toolset:
        yield toolset


# -- a server killed mid-run ---------------------------------------------------------------------


async def test_crash_mid_call_costs_one_error_then_the_server_is_back():
    async with ToolSet.from_config({"servers": [server_entry("victim")]}, cache=False) as tools:
        pid = int((await tools.call("pid", {})).content)
        in_flight = asyncio.create_task(tools.call("sleep", {"seconds": 30}))
        await asyncio.sleep(0.3)
        os.kill(pid, signal.SIGKILL)
        crashed = await asyncio.wait_for(in_flight, 10)
        assert crashed.status == "error" and "victim" in crashed.content
        after = await tools.call("pid", {})
        assert after.ok and int(after.content) != pid
        assert tools.stats()["servers"]["victim"]["restarts"] == 1


async def test_a_server_that_exits_during_a_call_is_restarted():
    async with ToolSet.from_config({"servers": [server_entry("quitter")]}, cache=False) as tools:
        died = await tools.call("exit_now", {})
        assert died.status == "error"
        assert (await tools.call("echo", {"text": "ok"})).content == "ok"


async def test_a_server_killed_during_a_rollout_costs_one_error_and_the_rollout_continues(tokenizer):
    replies = {"go": [CALL.format(name="sleep", args='{"seconds": 30}'), CALL.format(name="pid", args="{}"), "done"]}
    async with ToolSet.from_config({"servers": [server_entry("victim")]}, cache=False) as tools:
        pid = int((await tools.call("pid", {})).content)
        agent = Agent(None, tools, engine=ScriptedEngine(tokenizer, replies), tokenizer=tokenizer, drift="off")
        rollout = asyncio.create_task(agent.rollout([{"role": "user", "content": "go"}]))
        await asyncio.sleep(1.0)  # the first turn's call is in flight on the server
        os.kill(pid, signal.SIGKILL)
        traj = await asyncio.wait_for(rollout, 20)
    first, second = traj.turns[0].results, traj.turns[1].results
    assert first[0].status == "error" and "'victim'" in first[0].content
    assert second[0].ok and int(second[0].content) != pid, "the restarted server answered turn 2"
    assert traj.finish_reason == "stop" and traj.num_turns == 3
    assert rollout_metrics([traj])["tools/status/error"] == 1


# -- a server that hangs ---------------------------------------------------------------------------


async def test_a_hanging_tool_times_out_and_the_server_keeps_serving(tools):
    start = time.perf_counter()
    result = await tools.call("hang", {})
    assert result.status == "timeout" and "0.5" in result.content
    assert time.perf_counter() - start < 3
    assert (await tools.call("echo", {"text": "still here"})).content == "still here"


async def test_other_calls_proceed_while_one_hangs(tools):
    hung, *others = await tools.call_many([("hang", {})] + [("echo", {"text": f"n{i}"}) for i in range(4)])
    assert hung.status == "timeout"
    assert [r.content for r in others] == ["n0", "n1", "n2", "n3"]
    assert max(r.latency_s for r in others) < 0.4, "the echoes did not wait for the hanging call"


# -- start-up failures -----------------------------------------------------------------------------


async def test_a_server_that_cannot_start_raises_with_its_stderr():
    config = {"servers": [{"name": "broken", "command": "python", "args": ["-c", "import sys; sys.exit('no such tool server')"]}]}
    with pytest.raises(ServerStartError, match="broken") as info:
        await ToolSet.from_config(config).start()
    assert "no such tool server" in str(info.value)


NOISY = "import sys, time; print('Welcome to my server v1'); sys.stdout.flush(); sys.stderr.write('loading index\\n')"


@pytest.mark.parametrize("then, start_timeout_s", [("; sys.exit(3)", 30.0), ("; time.sleep(60)", 1.5)])
async def test_garbage_on_stdout_is_quoted_in_the_start_error_with_the_stderr_tail(then, start_timeout_s):
    config = {"servers": [{"name": "noisy", "command": "python", "args": ["-c", NOISY + then]}]}
    started = time.perf_counter()
    with pytest.raises(ServerStartError) as info:
        await ToolSet.from_config(config, start_timeout_s=start_timeout_s).start()
    message = str(info.value)
    assert "'noisy'" in message and "not MCP JSON-RPC on stdout" in message
    assert "Welcome to my server v1" in message and "loading index" in message
    assert time.perf_counter() - started < start_timeout_s + 8  # the SDK gives the process 2 s to exit


async def test_a_banner_on_stdout_before_a_working_server_is_tolerated():
    banner = f"print('banner'); import runpy, sys; sys.argv = [{str(TEST_SERVER)!r}]; runpy.run_path(sys.argv[0], run_name='__main__')"
    config = {"servers": [{"name": "chatty", "command": "python", "args": ["-c", banner]}]}
    async with ToolSet.from_config(config) as tools:
        assert (await tools.call("echo", {"text": "fine"})).content == "fine"


# -- huge answers and call floods -------------------------------------------------------------------


async def test_long_output_is_truncated_with_a_marker(tools):
    result = await tools.call("echo", {"text": "x", "times": 500})
    assert result.content.startswith("x" * 50)
    assert "truncated" in result.content and "500" in result.content


async def test_a_10_mb_answer_from_a_server_is_truncated_with_a_marker(tools):
    result = await tools.call("echo", {"text": "y", "times": TEN_MB})
    assert result.ok and result.content.startswith("y" * 50)
    assert len(result.content) < 200 and f"showing 50 of {TEN_MB} characters" in result.content
    assert (await tools.call("echo", {"text": "next"})).content == "next", "the session survived"


@tool
def flood(n: int) -> str:
    """Return n characters."""
    return "z" * n


async def test_a_10_mb_answer_from_a_python_tool_is_truncated_too():
    async with ToolSet.from_functions(flood, max_result_chars=1000) as tools:
        result = await tools.call("flood", {"n": TEN_MB})
    assert result.ok and len(result.content) < 1100 and f"of {TEN_MB} characters" in result.content


async def test_500_calls_in_one_turn_are_capped_and_the_rest_reported_once(tokenizer):
    calls = "".join(CALL.format(name="flood", args=f'{{"n": {i}}}') for i in range(500))
    replies = {"flood me": [calls, "done"]}
    async with ToolSet.from_functions(flood) as tools:
        agent = Agent(
            None, tools, engine=ScriptedEngine(tokenizer, replies), tokenizer=tokenizer,
            max_new_tokens=200_000, max_total_tokens=400_000, drift="off",
        )
        traj = await agent.rollout([{"role": "user", "content": "flood me"}])
    turn = traj.turns[0]
    assert len(turn.calls) == len(turn.results) == 8
    assert len(turn.parse_errors) == 1 and "500 tool calls in one turn" in turn.parse_errors[0].message
    metrics = rollout_metrics([traj])
    assert metrics["tools/calls"] == 8 and metrics["rollout/parse_errors"] == 1
    shown = [m["content"] for m in traj.messages if m["role"] == "tool"]
    assert len(shown) == 9 and len(shown[-1]) < 1000, "the model reads one short note about the rest"
