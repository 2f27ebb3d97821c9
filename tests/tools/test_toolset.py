"""ToolSet over real MCP servers started over stdio (tests/tools/servers/test_server.py).

Fault cases (crashes, hangs, start-up failures, huge output) live in tests/faults/test_tool_servers.py."""

import asyncio
import os
import socket
import sys
import time
from pathlib import Path

import pytest
import pytest_asyncio

from rlfactory_nb.tools import ToolSet, tool
from rlfactory_nb.types import ToolCall

pytestmark = pytest.mark.asyncio(loop_scope="module")

TEST_SERVER = Path(__file__).parent / "servers" / "test_server.py"


@tool
def shout(text: str) -> str:
    """Upper-case the text."""
    return text.upper()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tools(server_entry):
    """Two copies of the test server (so names collide) and a Python function."""
    config = {
        "servers": [
            server_entry("alpha", tools={"hang": {"timeout_s": 0.5}, "sleep": {"max_concurrency": 64}}),
            server_entry("beta", enabled=["echo"]),
        ],
        "functions": [shout],
    }
    async with ToolSet.from_config(config, max_result_chars=50) as toolset:
        yield toolset


async def test_lists_tools_with_short_names_unless_they_collide(tools):
    names = tools.names
    assert {"sleep", "hang", "pid", "counter", "shout"} <= set(names)
    assert "alpha.echo" in names and "beta.echo" in names and "echo" not in names
    assert "beta.sleep" not in names  # beta exposes only `echo`
    assert tools.spec("alpha.echo").server == "alpha"
    assert tools.spec("shout").input_schema["required"] == ["text"]


async def test_qualified_names_work_for_unique_tools_too(tools):
    result = await tools.call("alpha.pid", {})
    assert result.ok and result.content.isdigit()


async def test_schema_violations_are_invalid_args_without_calling(tools):
    wrong_type = await tools.call("alpha.echo", {"text": 3})
    missing = await tools.call("alpha.echo", {})
    bad_json = await tools.call("alpha.echo", '{"text": ')
    assert [r.status for r in (wrong_type, missing, bad_json)] == ["invalid_args"] * 3
    assert "'text'" in wrong_type.content and "string" in wrong_type.content
    assert "required" in missing.content
    assert "JSON" in bad_json.content


async def test_arguments_may_arrive_as_json_text(tools):
    result = await tools.call("alpha.echo", '{"text": "hi", "times": 2}')
    assert (result.status, result.content) == ("ok", "hihi")


async def test_unknown_tool_names_the_available_ones(tools):
    result = await tools.call("ech", {"text": "x"})
    assert result.status == "unknown_tool"
    assert "alpha.echo" in result.content and "sleep" in result.content


async def test_32_concurrent_calls_overlap(tools):
    start = time.perf_counter()
    results = await tools.call_many([("sleep", {"seconds": 0.2})] * 32)
    elapsed = time.perf_counter() - start
    assert [r.status for r in results] == ["ok"] * 32
    assert elapsed < 32 * 0.2 / 4, f"32 calls of 0.2 s took {elapsed:.2f} s: not parallel"


async def test_call_many_keeps_order_and_accepts_tool_calls(tools):
    calls = [ToolCall("alpha.echo", {"text": str(i)}) for i in range(5)] + [ToolCall("shout", {"text": "a"})]
    results = await tools.call_many(calls)
    assert [r.content for r in results] == ["0", "1", "2", "3", "4", "A"]


async def test_repeated_calls_are_served_from_the_cache(tools):
    first = await tools.call("counter", {})
    second = await tools.call("counter", {})
    assert not first.cached and second.cached
    assert second.content == first.content  # the server was not asked again
    assert tools.cache.hits >= 1


async def test_python_function_tool_runs_in_the_same_toolset(tools):
    result = await tools.call("shout", {"text": "quiet"})
    assert (result.status, result.content) == ("ok", "QUIET")


async def test_stop_ends_the_server_process(server_entry):
    tools = ToolSet.from_config({"servers": [server_entry("short-lived")]})
    await tools.start()
    pid = int((await tools.call("pid", {})).content)
    await tools.stop()
    with pytest.raises(ProcessLookupError):
        for _ in range(50):  # the process may take a moment to be reaped
            os.kill(pid, 0)
            await asyncio.sleep(0.1)
    after = await tools.call("echo", {"text": "x"})  # a stopped ToolSet starts again on demand
    assert after.ok
    await tools.stop()


async def test_enabled_names_that_the_server_lacks_are_config_errors(server_entry):
    from rlfactory_nb.config import ConfigError

    with pytest.raises(ConfigError, match="no tool 'ecko'.*did you mean 'echo'"):
        await ToolSet.from_config({"servers": [server_entry("typo", enabled=["ecko"])]}).start()


async def test_streamable_http_server_with_headers():
    port = _free_port()
    server = await asyncio.create_subprocess_exec(
        sys.executable, str(TEST_SERVER), "--http", str(port), stderr=asyncio.subprocess.DEVNULL
    )
    try:
        await _wait_for_port(port)
        config = {
            "servers": [{"name": "web", "url": f"http://127.0.0.1:{port}/mcp", "headers": {"X-Token": "abc"}}]
        }
        async with ToolSet.from_config(config) as tools:
            assert (await tools.call("header", {"name": "x-token"})).content == "abc"
            results = await tools.call_many([("sleep", {"seconds": 0.2})] * 8)
            assert [r.status for r in results] == ["ok"] * 8
    finally:
        server.kill()
        await server.wait()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def _wait_for_port(port: int, timeout_s: float = 20.0) -> None:
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            await asyncio.sleep(0.1)
    raise TimeoutError(f"test server did not listen on port {port}")
