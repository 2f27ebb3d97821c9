"""An MCP server written only for the tests: slow, hanging, failing and crashing tools.

Run as `python tests/tools/servers/test_server.py` (stdio), or with `--http PORT` to serve streamable
HTTP on 127.0.0.1:PORT/mcp.
"""

import asyncio
import os
import sys
import time

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("test-server", log_level="WARNING")


@server.tool()
async def sleep(seconds: float = 0.2) -> str:
    """Wait `seconds` (without blocking the server), then answer "slept"."""
    await asyncio.sleep(seconds)
    return "slept"


@server.tool()
def blocking_sleep(seconds: float = 0.2) -> str:
    """Wait `seconds` in a worker thread, then answer "slept"."""
    time.sleep(seconds)
    return "slept"


@server.tool()
async def hang() -> str:
    """Never answers."""
    await asyncio.Event().wait()
    return "unreachable"


@server.tool()
def pid() -> int:
    """The server's process id (the crash test kills it)."""
    return os.getpid()


@server.tool()
def echo(text: str, times: int = 1) -> str:
    """Answer `text` repeated `times` times."""
    return text * times


@server.tool()
def counter() -> int:
    """How many times this tool was called in this process (shows whether a cache answered)."""
    counter.calls = getattr(counter, "calls", 0) + 1
    return counter.calls


@server.tool()
def exit_now() -> str:
    """Ends the process without answering."""
    os._exit(3)


@server.tool()
def header(name: str, ctx: Context) -> str:
    """The value of an HTTP request header (empty over stdio)."""
    request = ctx.request_context.request
    return request.headers.get(name, "") if request is not None else ""


if __name__ == "__main__":
    if "--http" in sys.argv:
        server.run("streamable-http", port=int(sys.argv[sys.argv.index("--http") + 1]))
    else:
        server.run("stdio")
