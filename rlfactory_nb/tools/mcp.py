"""One MCP server connection, owned by one long-lived task, restarted when the server dies.

Why a task of its own: the SDK's transports and `ClientSession` are anyio context managers whose
cancel scopes must be entered and exited in the same task, while a notebook starts tools in one cell
and stops them in another (anyio: "Attempted to exit cancel scope in a different task"). So
`start()` spawns a supervisor task that opens the transport and the session, lists the tools and then
serves requests taken from a queue; `call()` from any task just puts a request on that queue and
awaits its future, and `stop()` puts a stop marker there. Each call runs as its own child task of
the session, so one stdio session serves many calls at once.

Crashes: a pump between the transport and the session notices end-of-stream (the process died or
closed its pipe) and tells the supervisor at once, which restarts the server (with backoff, at most
`max_restarts` times in a row) even before the next call arrives. Calls in flight at that moment fail
with `ServerUnavailable`, which the ToolSet turns into an error result: they never hang.

Noise on stdout: a stdio server must write only JSON-RPC there. The SDK skips other lines; the pump
keeps the last few, and a server that then fails to start is reported with them (plus its stderr
tail), since a stray `print` is the usual reason a server never answers `initialize`.

Bounded handshakes: every start, the first and each restart, must initialize and list its tools
within `start_timeout_s`, and may write at most `_MAX_NOISE_BEFORE_HANDSHAKE` stray lines first
(the SDK parses and logs each one, so a flood costs the client CPU for every line). A restart that
misses either bound marks the server failed at once, instead of retrying: a server that hangs in
its handshake would cost every retry, and every call queued meanwhile, the full timeout again.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import IO, Any, Literal

import anyio
import anyio.abc
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp.types import CONNECTION_CLOSED

from rlfactory_nb.errors import HandshakeError, ServerStartError, ServerUnavailable
from rlfactory_nb.tools.config import ServerConfig, python_command
from rlfactory_nb.tools.mcp_protocol import (
    CallOutcome,
    RemoteTool,
    check_sendable,
    content_text,
    http_transport,
    list_tools,
    one_line,
)

logger = logging.getLogger(__name__)

State = Literal["stopped", "starting", "running", "restarting", "failed"]


@dataclass
class _Request:
    tool: str
    arguments: dict[str, Any]
    future: asyncio.Future[CallOutcome]


_STOP = object()
_NOISE_LINES = 3
"""non-protocol stdout lines kept per server, for start errors"""
_NOISE_CHARS = 200
_MAX_NOISE_BEFORE_HANDSHAKE = 1000
"""stray stdout lines a server may write before it has initialized and listed its tools"""


@dataclass(frozen=True)
class _Closed:
    """Queue marker: the session of this generation lost its connection."""

    generation: int


class MCPConnection:
    """A live connection to one MCP server (stdio process or streamable HTTP endpoint)."""

    def __init__(
        self,
        config: ServerConfig,
        *,
        max_restarts: int = 3,
        start_timeout_s: float = 60.0,
        backoff_s: float = 0.25,
    ):
        self.config = config
        self.max_restarts = max_restarts
        self.start_timeout_s = start_timeout_s
        self.backoff_s = backoff_s
        self.tools: list[RemoteTool] = []
        self.state: State = "stopped"
        self.restarts = 0
        """how many times the server was restarted after a crash"""
        self._queue: asyncio.Queue[Any] | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._generation = 0
        self._failures = 0
        self._last_error = ""
        self._stderr: IO[str] | None = None
        """where the server process logs; kept across restarts, closed by stop()"""
        self._noise: list[str] = []
        """the last lines the server wrote on stdout that were not JSON-RPC"""
        self._noise_in_handshake: int | None = None
        """stray lines during the current handshake; None once the session is running"""

    @property
    def name(self) -> str:
        return self.config.name

    async def start(self) -> list[RemoteTool]:
        """Launch the server, initialize the session and list its tools. Raises ServerStartError."""
        if self._supervisor is not None and not self._supervisor.done():
            return self.tools
        self._queue, self._failures, self.state, self._noise = asyncio.Queue(), 0, "starting", []
        if self._stderr is None or self._stderr.closed:
            self._stderr = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        first_ready: asyncio.Future[list[RemoteTool]] = asyncio.get_running_loop().create_future()
        self._supervisor = asyncio.create_task(self._supervise(first_ready), name=f"mcp-server-{self.name}")
        try:
            self.tools = await asyncio.wait_for(asyncio.shield(first_ready), self.start_timeout_s)
        except TimeoutError:
            await self._cancel_supervisor()
            raise ServerStartError(
                self._with_stderr(f"did not start within {self.start_timeout_s:g} s")
            ) from None
        return self.tools

    async def call(self, tool: str, arguments: dict[str, Any]) -> CallOutcome:
        """Call `tool` on the server. Cancel the awaiting task (e.g. a timeout) to cancel the call.
        Raises InvalidArguments, before the session sees them, for arguments it could not send."""
        check_sendable(arguments)
        if self._queue is None or self._supervisor is None or self._supervisor.done():
            # once the supervisor is done nobody would answer the queue: fail now instead of hanging
            raise ServerUnavailable(
                self._describe(self._last_error if self.state == "failed" else "is not running")
            )
        future: asyncio.Future[CallOutcome] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Request(tool, arguments, future))
        return await future

    async def stop(self, timeout_s: float = 10.0) -> None:
        """Stop serving and end the server process. Calls in flight get ServerUnavailable."""
        if self._supervisor is not None:
            if self._queue is not None:
                self._queue.put_nowait(_STOP)
            try:
                await asyncio.wait_for(asyncio.shield(self._supervisor), timeout_s)
            except TimeoutError:
                await self._cancel_supervisor()
        self._supervisor, self.state = None, "stopped"
        if self._stderr is not None:
            self._stderr.close()

    def stderr_tail(self, max_chars: int = 1500) -> str:
        """The end of what the server wrote to stderr (where servers log; useful after a crash)."""
        if self._stderr is None or self._stderr.closed:
            return ""
        self._stderr.flush()
        self._stderr.seek(0, 2)
        size = self._stderr.tell()
        self._stderr.seek(max(0, size - max_chars))
        return self._stderr.read()

    # -- the supervisor task: everything below runs in it -------------------------------------

    async def _supervise(self, first_ready: asyncio.Future[list[RemoteTool]]) -> None:
        try:
            while True:
                if self._failures:
                    self.state = "restarting"
                    if await self._wait_for_stop(self.backoff_s * 2 ** (self._failures - 1)):
                        return
                try:
                    if await self._run_session(first_ready):
                        return
                    self._last_error = "closed the connection (it crashed or exited)"
                except Exception as exc:  # noqa: BLE001 - any failure to start is reported as data
                    self._last_error = f"failed to start: {one_line(exc)}"
                    first_start = not first_ready.done()
                    if first_start:
                        first_ready.set_exception(ServerStartError(self._with_stderr(self._last_error)))
                    if first_start or _is_handshake_failure(exc):
                        logger.warning("%s; it is marked failed", self._describe(self._last_error))
                        self.state = "failed"
                        return
                self._failures += 1
                if self._failures > self.max_restarts:
                    self._last_error = f"gave up after {self.max_restarts} restarts; last: {self._last_error}"
                    self.state = "failed"
                    return
                self.restarts += 1
                logger.warning(
                    "%s; restarting it\n%s", self._describe(self._last_error), self.stderr_tail(600)
                )
        finally:
            if self.state != "failed":
                self.state = "stopped"
            self._fail_queued(self._describe(self._last_error if self.state == "failed" else "was stopped"))

    async def _run_session(self, first_ready: asyncio.Future[list[RemoteTool]]) -> bool:
        """Run one session until stop (returns True) or until the connection closes (False)."""
        self._generation += 1
        generation = self._generation
        async with self._open_transport() as (read, write), anyio.create_task_group() as group:
            to_session, session_read = anyio.create_memory_object_stream[SessionMessage | Exception](0)
            group.start_soon(self._pump, read, to_session, generation)
            async with ClientSession(session_read, write) as session:
                tools = await self._handshake(session)
                if not first_ready.done():
                    first_ready.set_result(tools)
                self.state = "running"
                stopped = await self._serve(session, group, generation)
            group.cancel_scope.cancel()
        return stopped

    async def _handshake(self, session: ClientSession) -> list[RemoteTool]:
        """Initialize and list the tools, within `start_timeout_s`. Raises HandshakeError."""
        self._noise_in_handshake = 0
        try:
            with anyio.fail_after(self.start_timeout_s):
                await session.initialize()
                return await list_tools(session)
        except TimeoutError:
            raise HandshakeError(
                f"did not initialize and list its tools within start_timeout_s={self.start_timeout_s:g} s"
            ) from None
        finally:
            self._noise_in_handshake = None

    def _open_transport(self) -> AbstractAsyncContextManager[Any]:
        config = self.config
        if config.transport == "stdio":
            assert config.command is not None
            params = StdioServerParameters(
                command=python_command(config.command),
                args=list(config.args),
                env=dict(config.env) or None,
                cwd=config.cwd,
            )
            return stdio_client(params, errlog=self._stderr)
        assert config.url is not None
        return http_transport(config.url, dict(config.headers))

    async def _serve(self, session: ClientSession, group: anyio.abc.TaskGroup, generation: int) -> bool:
        assert self._queue is not None
        while True:
            item = await self._queue.get()
            if item is _STOP:
                return True
            if isinstance(item, _Closed):
                if item.generation == generation:
                    return False
                continue  # a marker left over from an earlier session
            group.start_soon(self._run_call, session, item)

    async def _run_call(self, session: ClientSession, request: _Request) -> None:
        future = request.future
        if future.done():  # the caller gave up while the request waited in the queue
            return
        try:
            with anyio.CancelScope() as scope:
                future.add_done_callback(lambda f: scope.cancel() if f.cancelled() else None)
                result = await session.call_tool(request.tool, request.arguments)
            if not future.done():
                future.set_result(
                    CallOutcome(
                        bool(result.is_error), content_text(result.content, result.structured_content)
                    )
                )
                self._failures = 0
        except MCPError as exc:
            if not future.done():
                if exc.error.code == CONNECTION_CLOSED:
                    future.set_exception(
                        ServerUnavailable(self._describe("closed the connection during the call"))
                    )
                else:  # a protocol-level error answer (e.g. invalid params): the model should see it
                    future.set_result(CallOutcome(True, exc.error.message))
        except Exception as exc:  # noqa: BLE001 - the transport failed under this call
            if not future.done():
                future.set_exception(
                    ServerUnavailable(self._describe(f"failed during the call: {one_line(exc)}"))
                )
        finally:
            if not future.done():
                future.set_exception(ServerUnavailable(self._describe("stopped or crashed during the call")))

    async def _pump(self, source: Any, sink: Any, generation: int) -> None:
        """Forward the transport's messages to the session; report end-of-stream to the supervisor."""
        try:
            async with sink:
                async for message in source:
                    if isinstance(message, Exception):
                        self._note_noise(message)
                        if self._noise_in_handshake is not None:
                            self._noise_in_handshake += 1
                            if self._noise_in_handshake > _MAX_NOISE_BEFORE_HANDSHAKE:
                                raise HandshakeError(
                                    f"wrote more than {_MAX_NOISE_BEFORE_HANDSHAKE} lines that are not "
                                    "JSON-RPC on stdout before its handshake"
                                )
                    await sink.send(message)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the session is closing first: not a crash
        if self._queue is not None:
            self._queue.put_nowait(_Closed(generation))

    def _note_noise(self, error: Exception) -> None:
        """Keep a line the transport could not parse (the SDK hands it over as a validation error)."""
        errors = getattr(error, "errors", None)
        line = str(errors()[0].get("input", error)) if callable(errors) and errors() else str(error)
        if not self._noise:
            logger.warning("MCP server '%s' wrote non-JSON-RPC text on stdout: %.200r", self.name, line)
        self._noise = [*self._noise, line[:_NOISE_CHARS]][-_NOISE_LINES:]

    async def _wait_for_stop(self, delay_s: float) -> bool:
        """Sleep `delay_s` unless a stop request arrives first (True). Calls keep waiting in the queue."""
        assert self._queue is not None
        deadline = asyncio.get_running_loop().time() + delay_s
        pending: list[Any] = []
        stopped = False
        while not stopped and (remaining := deadline - asyncio.get_running_loop().time()) > 0:
            try:
                item = await asyncio.wait_for(self._queue.get(), remaining)
            except TimeoutError:
                break
            stopped = item is _STOP
            if isinstance(item, _Request):
                pending.append(item)
        for item in pending:
            self._queue.put_nowait(item)
        return stopped

    def _fail_queued(self, message: str) -> None:
        while self._queue is not None and not self._queue.empty():
            item = self._queue.get_nowait()
            if isinstance(item, _Request) and not item.future.done():
                item.future.set_exception(ServerUnavailable(message))

    async def _cancel_supervisor(self) -> None:
        if self._supervisor is not None:
            self._supervisor.cancel()
            await asyncio.gather(self._supervisor, return_exceptions=True)
        self._supervisor, self.state = None, "stopped"

    def _describe(self, problem: str) -> str:
        """A short message: it becomes the content of an error result, which the model reads."""
        return f"MCP server '{self.name}' {problem}"

    def _with_stderr(self, problem: str) -> str:
        """A start error: the problem, stray stdout lines (the usual cause) and the stderr tail."""
        text = self._describe(problem)
        if self._noise:
            shown = "\n".join(self._noise)
            text += (
                "\n--- it wrote text that is not MCP JSON-RPC on stdout (a stdio server must write only "
                f"protocol messages there; log to stderr) ---\n{shown}"
            )
        tail = self.stderr_tail(600).strip()
        return text + (f"\n--- its stderr ends with ---\n{tail}" if tail else "")


def _is_handshake_failure(exc: BaseException) -> bool:
    """Whether `exc`, or any exception in the groups anyio wraps it in, is a HandshakeError."""
    if isinstance(exc, BaseExceptionGroup):
        return any(_is_handshake_failure(inner) for inner in exc.exceptions)
    return isinstance(exc, HandshakeError)
