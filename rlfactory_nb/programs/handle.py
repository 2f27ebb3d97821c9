"""What an agent program is given for one episode (`LLM`: where to call, with which key, the
episode's tools and its environment's answer) and how its episodes are served (`ProgramSettings`).

`llm.client()` is the real `openai.AsyncOpenAI`, reaching this episode's session in memory
(local.py) or, with `in_memory=False`, over loopback HTTP as any client given `llm.base_url` does.
`llm.tools` are the episode environment's tools (`EpisodeTools`: the run's ToolSet by default, a
shop's database tools under `rollout.env`), and `await llm.respond()` is what the environment says to
the model's last reply (a simulated customer's answer), as rf.Agent's loop asks it.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from rlfactory_nb.envs.base import Response
from rlfactory_nb.programs import local
from rlfactory_nb.programs.endpoint import EPISODE_HEADER, MAX_BODY_BYTES, Endpoint
from rlfactory_nb.rollout.episode import Episode
from rlfactory_nb.rollout.settings import RolloutSettings
from rlfactory_nb.types import ToolCall, ToolResult, ToolSpec

CALLER: ContextVar[str | None] = ContextVar("rlfactory_nb_program_episode", default=None)
"""the session of the episode whose program runs in this context (its task, and the threads it
starts with the context copied); the clients `llm` makes send it with each request (EPISODE_HEADER)"""


@dataclass(frozen=True)
class ProgramSettings:
    """How a program's episodes are served: the run's `RolloutSettings` (a run binds its own), and
    what only a program has (its endpoint, its clients, its own time limit)."""

    rollout: RolloutSettings = field(default_factory=RolloutSettings)
    """the chat format, parser, reasoning mode, drift check, limits, sampling and environment, as an
    rf.Agent's (`limits.max_turns`: the model calls an episode may make)"""
    request_sampling: bool = True
    """a request's temperature, top_p and seed are obeyed (a program on its own); a run sets False"""
    timeout_s: float = 300.0
    """an episode's wall-clock limit; past it the program is cancelled and the episode ends as data"""
    model_name: str = "policy"
    """the model name the endpoint serves (llm.model); another name is refused with 404"""
    max_body_bytes: int = MAX_BODY_BYTES
    max_connections: int = 16
    """connections one episode's client may open at once (its concurrent calls), over HTTP"""
    in_memory: bool = True
    """`llm.client()` hands its requests to the endpoint in memory (local.py); False: over loopback
    HTTP, as a framework given `llm.base_url` calls"""


class EpisodeTools:
    """The tools of one episode's environment, as a program calls them (`llm.tools`): a ToolSet's
    `specs`, `call` and `call_many`, run in the episode (its caching and limits, or a shop's own
    database: the environment's reward and state see each call, as they see an Agent's)."""

    def __init__(self, episode: Episode, max_text_chars: int):
        self._episode, self._max_text_chars = episode, max_text_chars

    @property
    def specs(self) -> list[ToolSpec]:
        return self._episode.tool_specs()

    def schemas(self) -> list[dict[str, Any]]:
        """The tools as an OpenAI request's `tools` list."""
        return [spec.to_openai() for spec in self.specs]

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """One call; a tool failure is data (an error result the program may show the model)."""
        return (await self.call_many([(name, arguments)]))[0]

    async def call_many(self, calls: Sequence[tuple[str, dict[str, Any]]]) -> list[ToolResult]:
        """Several calls at once (a ToolSet runs them in parallel), one result each, in order."""
        return await self._episode.call_tools([ToolCall(name, dict(arguments)) for name, arguments in calls], self._max_text_chars)


class LLM:
    """What a program gets for one episode: where to call, with which key, the episode's tools, and
    the environment's answer to the model's last reply (`respond`)."""

    def __init__(
        self, base_url: str, api_key: str, model: str, tools: EpisodeTools | None, settings: ProgramSettings,
        endpoint: Endpoint | None = None, respond: Callable[[], Awaitable[Response | None]] | None = None,
    ):
        self.base_url = base_url
        self.api_key = api_key
        self.model = model
        self.tools = tools
        """the episode environment's tools (None: it has none): the run's ToolSet, with its caching
        and limits, or the tools of an environment made for this episode (`rollout.env`)"""
        self._settings = settings
        self._endpoint = endpoint
        self._respond = respond
        self._clients: list[Any] = []

    async def respond(self) -> Response | None:
        """What the episode's environment says to the model's last reply, when that reply made no
        tool call (a simulated customer's answer, a game's move): a `Response` whose `messages` the
        program adds to its conversation and sends back, and `done` once the environment ends the
        episode; None when the environment has nothing to say (the episode ends there)."""
        return await self._respond() if self._respond is not None else None

    def client(self, **options: Any) -> Any:
        """An `openai.AsyncOpenAI` for this episode (no retries: a refused call names its limit)."""
        import openai

        return self._keep(openai.AsyncOpenAI(**self._client_options(openai.DefaultAsyncHttpxClient, options, local.LocalTransport)))

    def sync_client(self, **options: Any) -> Any:
        """An `openai.OpenAI` for a program written as a plain function (it runs in a thread)."""
        import openai

        return self._keep(openai.OpenAI(**self._client_options(openai.DefaultHttpxClient, options, local.LocalSyncTransport)))

    def _client_options(self, http_client: Any, options: dict[str, Any], transport: type) -> dict[str, Any]:
        http = local.http_package()

        # One pool per episode, sized for its own concurrent calls: a shared default pool (100
        # connections) would cap how many episodes run at once. The endpoint is plain HTTP on the
        # loopback: no TLS, and so no certificate store to load (56 ms a client, measured).
        size = self._settings.max_connections
        limits = http.Limits(max_connections=size, max_keepalive_connections=size)
        # Each request says which episode's program sends it, so a client kept across episodes is
        # refused (endpoint.py) instead of writing one episode's calls into another's trajectory.
        hooks = {"request": [_name_caller_async if transport is local.LocalTransport else _name_caller]}
        if self._settings.in_memory and self._endpoint is not None:
            # no socket at all: the requests reach the endpoint in this process in memory (local.py)
            client = http_client(transport=transport(self._endpoint, http), event_hooks=hooks)
        else:
            client = http_client(limits=limits, verify=False, event_hooks=hooks)
        return {
            "base_url": self.base_url, "api_key": self.api_key, "max_retries": 0,
            "timeout": self._settings.timeout_s, "http_client": client, **options,
        }

    def _keep(self, client: Any) -> Any:
        self._clients.append(client)
        return client

    async def aclose(self) -> None:
        for client in self._clients:
            closed = client.close()
            if inspect.isawaitable(closed):
                await closed


def _name_caller(request: Any) -> None:
    caller = CALLER.get()
    if caller is not None:
        request.headers[EPISODE_HEADER] = caller


async def _name_caller_async(request: Any) -> None:
    _name_caller(request)
