"""MCP start-ups are bounded: a restart that hangs in its handshake marks the server failed, and a
server that floods stdout before its handshake is refused after a bounded number of lines.

The servers here speak raw JSON-RPC (no SDK), so they can misbehave exactly where the client reads.
"""

import sys
import textwrap
import time

import pytest

from rlfactory_nb.tools import ServerStartError, ToolSet

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(120)]

RAW_SERVER = textwrap.dedent(
    """
    import json, os, sys, time

    mode, marker = sys.argv[1], sys.argv[2]
    second_start = os.path.exists(marker)
    open(marker, "a").close()
    for line in sys.stdin:
        request = json.loads(line)
        method, ident = request.get("method"), request.get("id")
        if method == "initialize":
            if mode == "hang" and second_start:
                time.sleep(3600)
            if mode == "flood":
                sys.stdout.write("not json-rpc\\n" * 200_000)
            result = {"protocolVersion": request["params"]["protocolVersion"], "capabilities": {"tools": {}},
                      "serverInfo": {"name": "raw", "version": "0"}}
        elif method == "tools/list":
            result = {"tools": [{"name": "die", "inputSchema": {"type": "object"}}]}
        elif method == "tools/call":
            os._exit(0)
        else:
            continue
        if ident is not None:
            sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}) + "\\n")
            sys.stdout.flush()
    """
)


def raw_config(tmp_path, mode: str) -> dict:
    script = tmp_path / "raw_server.py"
    script.write_text(RAW_SERVER)
    args = [str(script), mode, str(tmp_path / "started-once")]
    return {"servers": [{"name": "raw", "command": sys.executable, "args": args, "timeout_s": 20}]}


async def test_a_restart_that_hangs_in_its_handshake_marks_the_server_failed(tmp_path):
    async with ToolSet.from_config(raw_config(tmp_path, "hang"), start_timeout_s=2, cache=False) as tools:
        crashed = await tools.call("die", {})  # the server exits; its restart hangs in `initialize`
        assert crashed.status == "error"
        during_restart = await tools.call("die", {})
        assert during_restart.status == "error", "before: the call waited its whole 20 s timeout"
        assert "'raw'" in during_restart.content and "start_timeout_s=2" in during_restart.content
        assert tools.stats()["servers"]["raw"]["state"] == "failed"
        started = time.perf_counter()
        later = await tools.call("die", {})
        assert later.status == "error" and "'raw'" in later.content
        assert time.perf_counter() - started < 1.0, "a failed server's calls fail at once"


async def test_a_server_that_floods_stdout_before_its_handshake_is_refused_after_bounded_lines(tmp_path):
    started = time.perf_counter()
    with pytest.raises(ServerStartError) as info:
        await ToolSet.from_config(raw_config(tmp_path, "flood"), start_timeout_s=60).start()
    message = str(info.value)
    assert "'raw'" in message and "more than 1000 lines that are not JSON-RPC" in message
    assert time.perf_counter() - started < 30  # measured 2-3 s; before: "did not start within 60 s"
