"""OpenEnv environments: one WebSocket session per episode on a running OpenEnv server.

OpenEnv (`openenv` on PyPI) serves an environment over HTTP and WebSocket; TRL, SkyRL and others train
on it. Its stateless HTTP routes (`POST /reset`, `POST /step`) make a fresh environment per request,
which is useless for an episode, so this adapter uses only `/ws`: the server creates one environment
for the connection and keeps it until the socket closes. Each episode opens its own socket in
`reset` and closes it in `close`.

An MCP environment's tools (`list_tools` / `call_tool` actions) become the episode's tools; reward and
done come from the observations. A plain environment instead takes the model's answer as its action
(`action=` maps the answer to the action's JSON):

    server = OpenEnvServer("examples.guess.openenv_server:app").start()    # or a URL already running
    agent = rf.Agent(policy, env=openenv_env(server.url))

Why the wire protocol and not `openenv.core.EnvClient`: openenv 0.10 requires fastmcp 3, which
requires mcp<2, and importing any `openenv.core` module imports fastmcp; this project needs mcp 2.3.
The server therefore runs in its own venv (scripts/install_openenv.sh), as a separate process, which
is how OpenEnv environments run in real use (a container, a Space), and this client speaks its
documented message protocol with `websockets`. Tests run it against the real openenv server.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rlfactory_nb.envs.adapters.openenv_server import OpenEnvServer, shared_server
from rlfactory_nb.envs.base import EnvFactory, Environment, Reset, Response
from rlfactory_nb.errors import ConfigError, EpisodeError
from rlfactory_nb.tools.python import result_text
from rlfactory_nb.types import ToolCall, ToolResult, ToolSpec, ToolStatus, Turn

__all__ = ["OpenEnvEnvironment", "OpenEnvServer", "openenv_env"]

MAX_FRAME_BYTES = 16 * 1024 * 1024
"""the largest WebSocket frame (message) read from an OpenEnv server; a larger one ends the episode
with an EpisodeError naming the limit (before, any size was read: a 96 MiB opening frame was kept)"""

_TOOL_ERROR_STATUS: dict[str, ToolStatus] = {
    "tool_not_found": "unknown_tool",
    "invalid_args": "invalid_args",
    "timeout": "timeout",
}


def openenv_env(
    url: str | None = None,
    *,
    app: str | None = None,
    python: str | None = None,
    cwd: str | Path | None = None,
    action: Callable[[str], dict[str, Any]] | None = None,
    observation_text: Callable[[dict[str, Any]], str] | None = None,
    reset_args: str = "reset_args",
    message_timeout_s: float = 60.0,
    max_frame_bytes: int = MAX_FRAME_BYTES,
) -> EnvFactory:
    """An Environment factory over an OpenEnv server: at `url`, or started locally from `app`
    ("module:app", served by uvicorn under `python`, the OpenEnv venv's interpreter, in the folder
    `cwd`, default this checkout, which is first on its path) once per process.

    `action(answer)` turns the model's answer into a step action for a plain (non-MCP) environment;
    without it the environment must be an MCP one and the model acts through its tools.
    `observation_text(observation)` renders an observation for the model (default: its fields as JSON,
    or its one text field). The row's `reset_args` column (a dict) is passed to the server's reset.
    `max_frame_bytes` bounds each message the server sends (MAX_FRAME_BYTES)."""
    if (url is None) == (app is None):
        raise ConfigError("openenv_env: give exactly one of url= (a running server) or app= ('module:app')")
    if cwd is not None and url is not None:
        raise ConfigError("openenv_env: cwd= is the folder a server started from app= runs in; a server at url= runs already")
    if cwd is not None and not Path(cwd).is_dir():
        raise ConfigError(f"openenv_env: cwd={str(cwd)!r} is not a folder (the one a server started from app= runs in)")
    cwd = None if cwd is None else str(Path(cwd).resolve())
    return functools.partial(
        OpenEnvEnvironment, url, app=app, python=python, cwd=cwd, action=action, observation_text=observation_text,
        reset_args=reset_args, message_timeout_s=message_timeout_s, max_frame_bytes=max_frame_bytes,
    )


class OpenEnvEnvironment(Environment):
    """One OpenEnv WebSocket session: opened in `reset`, closed in `close`."""

    def __init__(
        self,
        url: str | None,
        *,
        app: str | None = None,
        python: str | None = None,
        cwd: str | None = None,
        action: Callable[[str], dict[str, Any]] | None = None,
        observation_text: Callable[[dict[str, Any]], str] | None = None,
        reset_args: str = "reset_args",
        message_timeout_s: float = 60.0,
        max_frame_bytes: int = MAX_FRAME_BYTES,
    ):
        self.url = url if url is not None else shared_server(app, python, cwd).url  # type: ignore[arg-type]
        self._action = action
        self._observation_text = observation_text or default_observation_text
        self._reset_args = reset_args
        self._timeout = message_timeout_s
        if not (isinstance(max_frame_bytes, int) and max_frame_bytes > 0):
            raise ConfigError(f"openenv_env: max_frame_bytes must be a positive number of bytes, got {max_frame_bytes!r}")
        self._max_frame_bytes = max_frame_bytes
        self._socket: Any = None
        self._specs: list[ToolSpec] = []
        self.done = False
        """True once an observation said the episode is over"""
        self.rewards: list[float] = []
        """every reward an observation carried, in order"""
        self.steps = 0
        self.step_latency_s: list[float] = []

    async def reset(self, row: dict[str, Any], *, seed: int) -> Reset | None:
        self._socket = await _connect(self.url, self._timeout, self._max_frame_bytes)
        data = {"seed": seed, **dict(row.get(self._reset_args) or {})}
        opened = await self._request({"type": "reset", "data": data}, where="reset")
        if self._action is None:
            listed = await self._request({"type": "step", "data": {"type": "list_tools"}}, where="reset")
            self._specs = [_spec(t) for t in listed["observation"].get("tools", [])]
            if not self._specs:
                raise EpisodeError(
                    "reset", f"OpenEnv server {self.url} lists no MCP tools; for a plain environment pass "
                    "action= (the model's answer -> the step action's JSON)")
        self._observe(opened)
        text = self._observation_text(opened["observation"])
        return Reset(messages=[{"role": "user", "content": text}]) if text else None

    def tool_specs(self) -> list[ToolSpec]:
        return list(self._specs)

    async def call_tools(self, calls: Sequence[ToolCall]) -> list[ToolResult]:
        return [await self._call(call) for call in calls]

    def finished(self) -> bool:
        """An observation said done (a game won by a tool call): the episode ends after this turn."""
        return self.done

    async def respond(self, turn: Turn) -> Response | None:
        if self.done or self._action is None:
            return Response(done=True, reward=self.reward())
        answer = turn.answer if turn.answer is not None else turn.text
        stepped = await self._request({"type": "step", "data": self._action(answer)}, where="respond")
        self._observe(stepped)
        text = self._observation_text(stepped["observation"])
        messages = [{"role": "user", "content": text}] if text else []
        return Response(messages, done=self.done, reward=self.reward())  # type: ignore[arg-type]

    def reward(self) -> float | None:
        return self.rewards[-1] if self.rewards else None

    def state(self) -> dict[str, Any] | None:
        return {"url": self.url, "steps": self.steps, "done": self.done, "rewards": list(self.rewards)}

    async def close(self) -> None:
        socket, self._socket = self._socket, None
        if socket is None:
            return
        with contextlib.suppress(Exception):  # the server may be gone already; the socket still closes
            await asyncio.wait_for(socket.send(json.dumps({"type": "close"})), timeout=2.0)
        await socket.close()

    async def _call(self, call: ToolCall) -> ToolResult:
        if self.done:
            return ToolResult(call.name, "error", "the episode is over; no more actions are taken")
        started = time.perf_counter()
        payload = {"type": "call_tool", "tool_name": call.name, "arguments": dict(call.arguments)}
        stepped = await self._request({"type": "step", "data": payload}, where="tool")
        self._observe(stepped)
        status, text = _tool_outcome(stepped["observation"])
        return ToolResult(call.name, status, text, time.perf_counter() - started)

    def _observe(self, data: dict[str, Any]) -> None:
        """Reward and done as the observation gives them."""
        if data.get("reward") is not None:
            self.rewards.append(float(data["reward"]))
        self.done = self.done or bool(data.get("done"))

    async def _request(self, message: dict[str, Any], *, where: str) -> dict[str, Any]:
        """One message, one reply on this episode's socket; every way it can fail is an EpisodeError."""
        if self._socket is None:
            raise EpisodeError(where, f"no OpenEnv session is open with {self.url} (reset did not run)")
        started = time.perf_counter()
        reply = await _exchange(self._socket, message, self._timeout, self.url, where, self._max_frame_bytes)
        self.step_latency_s.append(time.perf_counter() - started)
        self.steps += message["type"] == "step"
        if reply.get("type") == "error":
            raise EpisodeError(where, _error_text(self.url, reply.get("data") or {}))
        data = reply.get("data")
        if not isinstance(data, dict) or not isinstance(data.get("observation", {}), dict):
            raise EpisodeError(where, f"OpenEnv server {self.url} sent a reply without data: {str(reply)[:200]}")
        data.setdefault("observation", {})
        return data


async def _connect(url: str, timeout: float, max_frame_bytes: int) -> Any:
    from websockets.asyncio.client import connect  # the optional extra, imported where it is used

    ws_url = url.rstrip("/").replace("https://", "wss://").replace("http://", "ws://") + "/ws"
    local = "://localhost" in ws_url or "://127.0.0.1" in ws_url
    try:
        return await connect(ws_url, open_timeout=timeout, close_timeout=5.0, max_size=max_frame_bytes,
                             **({"proxy": None} if local else {}))
    except Exception as error:
        raise EpisodeError("reset", f"cannot open an OpenEnv session at {ws_url}: {type(error).__name__}: {error}") from error


async def _exchange(
    socket: Any, message: dict[str, Any], timeout: float, url: str, where: str, max_frame_bytes: int
) -> dict[str, Any]:
    from websockets.exceptions import ConnectionClosed
    from websockets.frames import CloseCode

    try:
        await socket.send(json.dumps(message))
    except ConnectionClosed:
        pass  # a refused session sends its error frame, then closes: read that frame below
    try:
        raw = await asyncio.wait_for(socket.recv(), timeout=timeout)
    except TimeoutError as error:
        raise EpisodeError("timeout", f"OpenEnv server {url} did not answer {message['type']!r} within {timeout:g} s") from error
    except ConnectionClosed as error:
        if error.sent is not None and error.sent.code == CloseCode.MESSAGE_TOO_BIG:
            raise EpisodeError(
                where, f"OpenEnv server {url} sent a frame over max_frame_bytes={max_frame_bytes:,} during "
                f"{message['type']!r}; raise openenv_env(max_frame_bytes=...) if its observations are that large",
            ) from error
        raise EpisodeError(where, f"OpenEnv server {url} closed the session during {message['type']!r}: {error}") from error
    try:
        reply = json.loads(raw)
    except (TypeError, ValueError) as error:
        raise EpisodeError(where, f"OpenEnv server {url} sent a malformed frame (not JSON): {str(raw)[:120]!r}") from error
    if not isinstance(reply, dict):
        raise EpisodeError(where, f"OpenEnv server {url} sent a malformed frame (not an object): {str(raw)[:120]!r}")
    return reply


def _error_text(url: str, data: dict[str, Any]) -> str:
    code = str(data.get("code", "UNKNOWN"))
    if code.lower() == "capacity_reached":
        return (f"OpenEnv server {url} refused a session: at capacity ({data.get('active_sessions')}/"
                f"{data.get('max_sessions')} sessions); lower the rollout concurrency or raise the server's "
                "max_concurrent_envs")
    return f"OpenEnv server {url} answered with an error ({code}): {data.get('message', '')}"


def _spec(tool: dict[str, Any]) -> ToolSpec:
    schema = tool.get("input_schema") or tool.get("inputSchema") or {"type": "object", "properties": {}}
    return ToolSpec(tool["name"], tool.get("description") or "", schema, server="openenv")


def _tool_outcome(observation: dict[str, Any]) -> tuple[ToolStatus, str]:
    """(status, text) of a CallToolObservation: a framework error, a tool error, or the result."""
    error = observation.get("error")
    if error:
        return _TOOL_ERROR_STATUS.get(str(error.get("error_type")), "error"), str(error.get("message", ""))
    result = observation.get("result")
    if isinstance(result, dict) and isinstance(result.get("content"), list):
        texts = [str(part.get("text", "")) for part in result["content"] if isinstance(part, dict)]
        return ("error" if result.get("is_error") else "ok"), "\n".join(t for t in texts if t)
    return "ok", result_text(result)


def default_observation_text(observation: dict[str, Any]) -> str:
    """An observation as the model reads it: its one text field, else its fields as JSON (metadata left out).

    >>> default_observation_text({"metadata": {}, "message": "Guess a number."})
    'Guess a number.'
    >>> default_observation_text({"metadata": {}, "board": [1, 2], "turn": 3})
    '{"board": [1, 2], "turn": 3}'
    """
    fields = {k: v for k, v in observation.items() if k not in ("metadata", "tools")}
    if len(fields) == 1 and isinstance(next(iter(fields.values())), str):
        return next(iter(fields.values()))
    return json.dumps(fields, ensure_ascii=False) if fields else ""
