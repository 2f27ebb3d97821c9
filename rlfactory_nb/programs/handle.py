"""What an agent program is given for one episode (`LLM`: where to call, with which key, the run's
tools) and how its episodes are served (`ProgramSettings`).

`llm.client()` is the real `openai.AsyncOpenAI`, reaching this episode's session in memory
(local.py) or, with `in_memory=False`, over loopback HTTP as any client given `llm.base_url` does.
"""

from __future__ import annotations

import inspect
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from rlfactory_nb.chat import ChatFormat
from rlfactory_nb.engines.base import SamplingParams
from rlfactory_nb.programs import local
from rlfactory_nb.programs.endpoint import EPISODE_HEADER, MAX_BODY_BYTES, Endpoint
from rlfactory_nb.programs.sessions import Limits

CALLER: ContextVar[str | None] = ContextVar("rlfactory_nb_program_episode", default=None)
"""the session of the episode whose program runs in this context (its task, and the threads it
starts with the context copied); the clients `llm` makes send it with each request (EPISODE_HEADER)"""


@dataclass(frozen=True)
class ProgramSettings:
    """How a program's episodes are served; a run replaces the limits and sampling with its own."""

    chat_format: str | ChatFormat = "auto"
    limits: Limits = field(default_factory=Limits)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    request_sampling: bool = True
    """a request's temperature, top_p and seed are obeyed (a program on its own); a run sets False"""
    enable_thinking: bool = False
    timeout_s: float = 300.0
    """an episode's wall-clock limit; past it the program is cancelled and the episode ends as data"""
    drift: str = "warn"
    model_name: str = "policy"
    """the model name the endpoint serves (llm.model); another name is refused with 404"""
    max_body_bytes: int = MAX_BODY_BYTES
    max_connections: int = 16
    """connections one episode's client may open at once (its concurrent calls), over HTTP"""
    in_memory: bool = True
    """`llm.client()` hands its requests to the endpoint in memory (local.py); False: over loopback
    HTTP, as a framework given `llm.base_url` calls"""


class LLM:
    """What a program gets for one episode: where to call, with which key, and the run's tools."""

    def __init__(
        self, base_url: str, api_key: str, model: str, tools: Any, settings: ProgramSettings, endpoint: Endpoint | None = None,
    ):
        self.base_url = base_url
        self.api_key = api_key
        self.model = model
        self.tools = tools
        """the run's ToolSet (or None): call tools through it so caching and limits stay the run's"""
        self._settings = settings
        self._endpoint = endpoint
        self._clients: list[Any] = []

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
