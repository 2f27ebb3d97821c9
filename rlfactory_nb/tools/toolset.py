"""ToolSet: every tool of a config behind one `call`, with validation, limits, timeouts and a cache.

The rollout loop hands the ToolSet whatever the model asked for and always gets a `ToolResult` back:
an unknown name, arguments that break the schema, a timeout, a crashed server and the tool's own
error are all results with a `status` and a message the model reads (a tool failure is data).
Only misuse by the programmer (calling from another event loop, a broken config) raises.

Names: a tool keeps its short name when only one server offers it; when several do, each becomes
`server.tool`. The qualified name always works too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import difflib
import logging
import os
import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from rlfactory_nb._async import run_sync
from rlfactory_nb._views import view_of
from rlfactory_nb.config import ConfigError
from rlfactory_nb.errors import ChatError, EngineActorDied
from rlfactory_nb.tools import validate
from rlfactory_nb.tools.cache import Recorded, SharedCache, ToolCache, cache_key
from rlfactory_nb.tools.config import (
    FunctionConfig,
    ServerConfig,
    ToolSetSettings,
    ToolsFile,
    load_tools_config,
)
from rlfactory_nb.tools.mcp import MCPConnection, ServerStartError, ServerUnavailable
from rlfactory_nb.tools.mcp_protocol import RemoteTool
from rlfactory_nb.tools.python import PythonTool
from rlfactory_nb.tools.tool_table import ToolEntry, function_entry, tool_table
from rlfactory_nb.types import ToolCall, ToolResult, ToolSpec

logger = logging.getLogger(__name__)

Found = tuple[Recorded, bool, bool] | None
"""what one lookup-or-call yields: (outcome, cacheable, cached); None: replay found no record"""


class ToolSet:
    """The tools of one config: MCP servers and Python functions. Async API with `*_sync` twins."""

    def __init__(
        self,
        servers: Sequence[ServerConfig] = (),
        functions: Sequence[FunctionConfig | PythonTool | Callable[..., Any]] = (),
        settings: ToolSetSettings | None = None,
        *,
        shared_cache: SharedCache | None = None,
    ):
        """`shared_cache`: a cache tier shared with the job's other processes (cluster/tool_cache.py),
        asked after this process's LRU; it records to `settings.cache_path` instead of this ToolSet."""
        self.settings = settings = settings or ToolSetSettings()
        self.connections = {
            s.name: MCPConnection(
                s, max_restarts=settings.max_restarts, start_timeout_s=settings.start_timeout_s
            )
            for s in servers
        }
        self._functions = [function_entry(f, i) for i, f in enumerate(functions)]
        self.cache = _make_cache(settings, shared_cache)
        self._tools: dict[str, ToolEntry] = {}
        self._exposed: list[str] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._global_limit: asyncio.Semaphore | None = None
        self._start_lock: asyncio.Lock | None = None
        self._in_flight: dict[str, asyncio.Future[Found]] = {}  # by cache key

    @classmethod
    def from_config(
        cls,
        source: str | Path | Mapping[str, Any] | ToolsFile,
        *,
        shared_cache: SharedCache | None = None,
        **settings: Any,
    ) -> ToolSet:
        """A ToolSet from our YAML, an `{"mcpServers": ...}` JSON, a dict of either, or a parsed file.
        Keyword arguments (timeout_s, max_concurrency, max_result_chars, cache, cache_path, ...)
        override the file's `settings:`; `shared_cache` as the constructor takes it."""
        if isinstance(source, ToolsFile):  # parsed already: its settings checked, the keywords not yet
            source = dataclasses.replace(source, settings=checked_settings(source.settings, settings))
        parsed = source if isinstance(source, ToolsFile) else load_tools_config(source, **settings)
        return cls(parsed.servers, parsed.functions, parsed.settings, shared_cache=shared_cache)

    @classmethod
    def from_functions(
        cls,
        *functions: PythonTool | Callable[..., Any],
        shared_cache: SharedCache | None = None,
        **settings: Any,
    ) -> ToolSet:
        """A ToolSet of Python functions only (no processes to start); arguments as `from_config`'s."""
        return cls((), functions, checked_settings(ToolSetSettings(), settings), shared_cache=shared_cache)

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self._loop is not None

    async def start(self, warm_validators: bool = True) -> Self:
        """Start every server at once, list and name their tools, and warm the argument validators
        (`import jsonschema` costs seconds; without warming, a tool's first call pays it)."""
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self.started:
                return self
            listings = await self._start_servers()
            try:
                self._tools, self._exposed = tool_table(listings, self.connections, self._functions, self.settings)
            except ConfigError:
                await self.stop()
                raise
            for entry in self._tools.values() if warm_validators else ():
                validate.schema_validator(entry.spec.input_schema)
            self._global_limit = asyncio.Semaphore(self.settings.max_concurrency)
            self._loop = asyncio.get_running_loop()
        return self

    async def stop(self) -> None:
        """Stop every server process this ToolSet started."""
        await asyncio.gather(*(c.stop() for c in self.connections.values()))
        self._loop = None

    def start_sync(self) -> Self:
        return run_sync(self.start())

    def stop_sync(self) -> None:
        run_sync(self.stop())

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # -- what the model is told -----------------------------------------------------------------

    @property
    def specs(self) -> list[ToolSpec]:
        """The tools the model may call, by exposed name (start first)."""
        self._require_started()
        return [self._tools[name].spec for name in self._exposed]

    @property
    def names(self) -> list[str]:
        return [spec.name for spec in self.specs]

    def spec(self, name: str) -> ToolSpec:
        self._require_started()
        return self._tools[name].spec

    # -- calling --------------------------------------------------------------------------------

    async def call(self, name: str, arguments: Mapping[str, Any] | str | None = None) -> ToolResult:
        """Call one tool. `arguments` may be a dict or its JSON text. Always returns a ToolResult,
        whatever the model wrote (validate.py: no tool or server sees what cannot be sent)."""
        started_at = time.perf_counter()
        if not self.started:
            await self.start()
        self._check_loop()
        entry = self._tools.get(name) if isinstance(name, str) else None
        if entry is None:
            shown = validate.shown_name(name)
            return _result(shown, "unknown_tool", self._unknown_message(shown), started_at)
        args, problem = validate.checked_arguments(entry.spec.name, entry.spec.input_schema, arguments)
        if problem:
            return _result(name, "invalid_args", validate.shown_text(problem), started_at)
        return await self._call_checked(name, entry, args, started_at)

    async def call_many(
        self, calls: Iterable[ToolCall | tuple[str, Mapping[str, Any] | str | None]]
    ) -> list[ToolResult]:
        """Run calls concurrently (within the limits); results come back in the order of `calls`."""
        pairs = [(c.name, c.arguments) if isinstance(c, ToolCall) else c for c in calls]
        return list(await asyncio.gather(*(self.call(name, args) for name, args in pairs)))

    def call_sync(self, name: str, arguments: Mapping[str, Any] | str | None = None) -> ToolResult:
        return run_sync(self.call(name, arguments))

    def call_many_sync(
        self, calls: Iterable[ToolCall | tuple[str, Mapping[str, Any] | str | None]]
    ) -> list[ToolResult]:
        return run_sync(self.call_many(calls))

    async def _call_checked(
        self, name: str, entry: ToolEntry, args: dict[str, Any], started_at: float
    ) -> ToolResult:
        use_cache = self.cache is not None and (
            self.settings.replay or (self.settings.cache and entry.options.cache is not False)
        )
        key = cache_key(entry.qualified, args)
        if use_cache and (pending := self._in_flight.get(key)) is not None:
            # The same call is running now (a group's samples ask the same thing at the same moment,
            # before any result is cached): share its outcome instead of calling again.
            found = await _shielded(pending)
            if found is _CANCELLED:
                return _result(name, "error", _CANCELLED_MESSAGE, started_at)
            if found is None:
                return _unrecorded(name, started_at)
            self.cache.count_hit()
            return self._result(name, found[0], started_at, cached=True)
        if use_cache and (hit := self.cache.get(entry.qualified, args)) is not None:
            return self._result(name, hit, started_at, cached=True)
        # Registered as in flight before the shared tier is asked: identical calls arriving while it
        # answers wait for this one rather than ask (and maybe call) again.
        call = asyncio.ensure_future(self._shared_or_invoke(entry, args, use_cache))
        if use_cache:
            self._in_flight[key] = call
            call.add_done_callback(lambda _: self._in_flight.pop(key, None))
        found = await _shielded(call)  # a cancelled caller leaves it to the others
        if found is _CANCELLED:
            return _result(name, "error", _CANCELLED_MESSAGE, started_at)
        if found is None:
            return _unrecorded(name, started_at)
        outcome, cacheable, cached = found
        if cacheable and self.cache is not None:
            self.cache.put(entry.qualified, args, outcome)
        return self._result(name, outcome, started_at, cached=cached)

    async def _shared_or_invoke(self, entry: ToolEntry, args: dict[str, Any], use_cache: bool) -> Found:
        """After a local miss: the shared cache tier's outcome, else (in replay: None) a real call's."""
        if use_cache and (hit := await self.cache.get_shared(entry.qualified, args)) is not None:
            return hit, False, True
        if self.settings.replay:
            return None
        outcome, cacheable = await self._invoke_limited(entry, args)
        return outcome, cacheable, False

    async def _invoke_limited(self, entry: ToolEntry, args: dict[str, Any]) -> tuple[Recorded, bool]:
        """(outcome with the full text, cacheable) of one real call, under the concurrency limits and the timeout.
        Waiting for a slot does not count against the timeout."""
        assert self._global_limit is not None
        async with self._global_limit:
            if entry.semaphore is None:
                return await self._invoke(entry, args)
            async with entry.semaphore:
                return await self._invoke(entry, args)

    async def _invoke(self, entry: ToolEntry, args: dict[str, Any]) -> tuple[Recorded, bool]:
        timeout_s = entry.options.timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                outcome = await entry.invoke(entry.remote_name, args)
        except TimeoutError:
            return Recorded("timeout", f"tool {entry.spec.name} timed out after {timeout_s:g} s"), False
        except EngineActorDied:  # a model tool's engine: every later call fails too; fail the step, naming it
            raise
        except (ServerUnavailable, ChatError) as exc:  # the server or the model behind it: may come back
            return Recorded("error", str(exc)), False
        except validate.InvalidArguments as exc:
            return Recorded("invalid_args", f"invalid arguments for {entry.spec.name}: {exc}"), False
        except Exception as exc:  # noqa: BLE001 - a Python tool raised: the model reads the error
            return Recorded("error", f"{type(exc).__name__}: {exc}"), True
        return Recorded("error" if outcome.is_error else "ok", outcome.text, outcome.details), True

    def _result(self, name: str, outcome: Recorded, started_at: float, cached: bool = False) -> ToolResult:
        """The ToolResult the caller gets: the outcome's text truncated to `max_result_chars`."""
        text = validate.cut_text(outcome.content, self.settings.max_result_chars, outcome.full_length)
        return _result(name, outcome.status, text, started_at, cached, outcome.details)

    # -- setup internals --------------------------------------------------------------------------

    async def _start_servers(self) -> dict[str, list[RemoteTool]]:
        names = list(self.connections)
        outcomes = await asyncio.gather(*(self.connections[n].start() for n in names), return_exceptions=True)
        failures = [o for o in outcomes if isinstance(o, BaseException)]
        if failures:
            await self.stop()
            for failure in failures:
                if not isinstance(failure, (ServerStartError, OSError)):
                    raise failure
            where = f"tool servers failed to start on node {socket.gethostname()} (pid {os.getpid()}):"
            raise ServerStartError("\n".join([where, *(str(f) for f in failures)]))
        return dict(zip(names, outcomes))

    def _unknown_message(self, name: str) -> str:
        close = difflib.get_close_matches(name, self._exposed, n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        return f"unknown tool '{name}'.{hint} Available tools: {', '.join(self._exposed)}"

    def _require_started(self) -> None:
        if not self.started:
            raise ServerUnavailable(
                "the ToolSet is not started: `await tools.start()` (or `tools.start_sync()`) first"
            )

    def _check_loop(self) -> None:
        if self.connections and asyncio.get_running_loop() is not self._loop:
            raise ServerUnavailable(
                "this ToolSet was started on another event loop; its server sessions live there. "
                "Use it from the loop that started it (in a notebook: `await` or the *_sync methods, not asyncio.run)"
            )

    def stats(self) -> dict[str, Any]:
        """Server states and restarts, and the cache's hit/miss counters."""
        servers = {n: {"state": c.state, "restarts": c.restarts} for n, c in self.connections.items()}
        return {"servers": servers, "cache": self.cache.stats() if self.cache is not None else None}

    def view(self) -> Any:
        """A notebook widget (ToolSetView): servers, schemas, a form to call a tool."""
        return view_of(self)

    def __repr__(self) -> str:
        tools = ", ".join(self._exposed) if self.started else "not started"
        return f"ToolSet(servers={list(self.connections)}, python={len(self._functions)}, tools: {tools})"


def checked_settings(base: ToolSetSettings, settings: Mapping[str, Any]) -> ToolSetSettings:
    """`base` with `settings` over it, checked as a tools file's `settings:` is: a typo or a wrong
    type is a ConfigError naming the key (and the closest one), never silently dropped."""
    if not settings:
        return base
    return load_tools_config({"settings": {**dataclasses.asdict(base), **settings}}).settings


def _make_cache(settings: ToolSetSettings, shared: SharedCache | None) -> ToolCache | None:
    if settings.replay and settings.cache_path is None:
        raise ConfigError(["settings.replay: replay needs settings.cache_path (the recorded sqlite file)"])
    if not settings.cache and settings.cache_path is None:
        return None
    # Entries keep only what the model can read: the rest of a long output is never shown.
    return ToolCache(
        max_entries=settings.cache_size, path=settings.cache_path, shared=shared, max_content_chars=settings.max_result_chars
    )


_CANCELLED: Any = object()
_CANCELLED_MESSAGE = "the call was cancelled: the agent-tool call it ran under timed out"


async def _shielded(call: asyncio.Future[Found]) -> Found:
    """`call`'s outcome, awaited under a shield; `_CANCELLED` when `call` itself was cancelled and
    this caller was not (an agent tool's timeout cancels the calls its rollout started, which
    another caller may share)."""
    try:
        return await asyncio.shield(call)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if not call.cancelled() or (task is not None and task.cancelling() > 0):
            raise
        return _CANCELLED


def _unrecorded(name: str, started_at: float) -> ToolResult:
    return _result(name, "error", f"replay: no recorded result for {name} with these arguments", started_at)


def _result(
    name: str, status: str, content: str, started_at: float, cached: bool = False, details: dict[str, Any] | None = None
) -> ToolResult:
    latency_s = time.perf_counter() - started_at
    return ToolResult(name, status, content, latency_s=latency_s, cached=cached, details=details)  # type: ignore[arg-type]
