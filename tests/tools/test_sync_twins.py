"""`run_sync` and the ToolSet's sync twins: from plain code and from inside a running event loop."""

import asyncio
import subprocess
import sys
import textwrap

from rlfactory_nb._async import run_sync
from rlfactory_nb.tools import ToolSet


async def _loop_id() -> int:
    return id(asyncio.get_running_loop())


def test_run_sync_reuses_one_loop_so_long_lived_tasks_survive():
    # asyncio.run would close the loop between calls and kill a server session's owner task
    assert run_sync(_loop_id()) == run_sync(_loop_id())


def test_sync_twins_from_plain_code(server_entry):
    tools = ToolSet.from_config({"servers": [server_entry("plain")]})
    tools.start_sync()
    try:
        assert tools.call_sync("echo", {"text": "a"}).content == "a"
        results = tools.call_many_sync([("echo", {"text": "b"}), ("sleep", {"seconds": 0.01})])
        assert [r.content for r in results] == ["b", "slept"]
    finally:
        tools.stop_sync()


def test_sync_twins_inside_a_running_loop_like_a_notebook_cell(server_entry):
    # In a subprocess: nest-asyncio patches asyncio for the whole process, as it does in a kernel.
    script = textwrap.dedent(
        f"""
        import asyncio
        from rlfactory_nb.tools import ToolSet

        async def cell():
            tools = ToolSet.from_config({{"servers": [{server_entry("kernel")!r}]}})
            tools.start_sync()                       # a sync call while the loop runs
            print(tools.call_sync("echo", {{"text": "sync"}}).content)
            print((await tools.call("echo", {{"text": "async"}})).content)   # same session, awaited
            print(len(tools.call_many_sync([("sleep", {{"seconds": 0.05}})] * 8)))
            tools.stop_sync()

        asyncio.run(cell())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["sync", "async", "8"]
