"""The OpenAI-compatible endpoint an agent program talks to: `/v1/chat/completions` and `/v1/models`.

One endpoint serves every episode of a program in this process, on 127.0.0.1 and a free port, on the
event loop the rollouts run on (so a call reaches the engine without a thread hop), while any episode
is open (program.py starts it once and closes it after the last). Each episode is a session
(sessions.py) reached at `/s/<session>/v1` with its own key; a key is checked against the session in
the path, from the headers and before the body is read, so no episode reads or extends another's
calls and a process without a key makes the endpoint hold nothing. A request may also name its
session by key alone, at `/v1`. Requests come two ways into one `serve`: over HTTP (aiohttp, for a
framework given `llm.base_url`) and in memory (local.py, for the client `llm.client()` gives).

Errors are OpenAI's shape (`{"error": {"message", "param", "code"}}`), each naming the field or limit:
malformed JSON or a field of the wrong type, a body over `max_body_bytes`, an unknown model, `n > 1`,
a closed session, a client of another episode (409), a call past the episode's calls or tokens.
`stream: true` replays the finished reply as server-sent events.

aiohttp is the server: Ray's default install brings it, so the endpoint adds no dependency.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from rlfactory_nb.programs.sessions import CallSession
from rlfactory_nb.programs.wire import RequestError, parse_request, sse_chunks

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 8 * 1024 * 1024
"""the largest request body served; a longer one is refused with 413"""

_SHUTDOWN_S = 2.0
"""how long closing waits for requests in flight (an abandoned program's) before cancelling them"""

EPISODE_HEADER = "X-RLFactory-Episode"
"""the session of the episode whose program sends a request, set by the clients `llm` makes; a request
whose path or key names another session is refused with 409 (a client kept across episodes)"""


class Endpoint:
    """The endpoint of one program in one process and event loop (module docstring)."""

    def __init__(self, max_body_bytes: int = MAX_BODY_BYTES):
        self.max_body_bytes = max_body_bytes
        self.sessions: dict[str, CallSession] = {}
        self._by_key: dict[str, CallSession] = {}
        self._runner: web.AppRunner | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.port = 0

    @property
    def started(self) -> bool:
        return self._runner is not None

    async def start(self) -> Endpoint:
        """Listen on 127.0.0.1 at a free port (see `port`)."""
        if self._runner is not None:
            return self
        app = web.Application(client_max_size=self.max_body_bytes)
        app.router.add_route("*", "/{path:.*}", self._handle)  # `serve` routes, for aiohttp and in memory alike
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=_SHUTDOWN_S)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        self._runner, self.loop = runner, asyncio.get_running_loop()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        self._runner = None

    def base_url(self, session: CallSession) -> str:
        return f"http://127.0.0.1:{self.port}/s/{session.id}/v1"

    def open(self, session: CallSession) -> CallSession:
        self.sessions[session.id] = session
        self._by_key[session.key] = session
        return session

    def forget(self, session: CallSession) -> None:
        """Close `session`; later requests with its key get 410 for a while, then 401."""
        session.close()
        self.sessions.pop(session.id, None)
        self._by_key.pop(session.key, None)

    # ------------------------------------------------------------------ handlers

    async def serve(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> Reply:
        """Answer one request, whichever way it came (aiohttp here, or `local.py` in memory)."""
        try:
            admitted = self.admit(method, path, headers)
        except RequestError as error:
            return _error(error)
        return await self.answer(admitted, body)

    def admit(self, method: str, path: str, headers: Mapping[str, str]) -> Admitted:
        """The route and session a request reaches, from its method, path and headers alone: a
        request without a session's key is refused before its body is read."""
        route = _ROUTE.match(path)
        if route is None:
            raise RequestError(404, f"no route {path}: this endpoint serves /v1/chat/completions and /v1/models", None, "not_found")
        wanted = "GET" if route["route"] == "models" else "POST"
        if method != wanted:
            raise RequestError(405, f"{path} takes {wanted}, not {method}", None, "method_not_allowed")
        authorization = headers.get("Authorization") or ""
        key = authorization[7:].strip() if authorization.lower().startswith("bearer ") else ""
        session = self._session(key, route["session"], headers.get(EPISODE_HEADER))
        return Admitted(route["route"], session)

    async def answer(self, admitted: Admitted, body: bytes) -> Reply:
        """Serve an admitted request with its body."""
        session = admitted.session
        if admitted.route == "models":
            name = session.serving.model_name
            return _json_reply({"object": "list", "data": [{"id": name, "object": "model", "owned_by": "rlfactory-nb"}]})
        try:
            if len(body) > self.max_body_bytes:
                raise RequestError(413, _too_large(len(body), self.max_body_bytes), None, "body_too_large")
            chat = parse_request(_parse_json(body))
            if chat.model and chat.model != session.serving.model_name:
                raise RequestError(
                    404, f"model {chat.model!r} is not served here; this endpoint serves "
                    f"{session.serving.model_name!r} (llm.model)", "model", "model_not_found",
                )
            completion = await session.complete(chat)
        except RequestError as error:
            return _error(error)
        except Exception as error:  # the program gets a named error; the episode goes on
            log.exception("endpoint: a call of session %s failed", session.id)
            return _error(RequestError(500, f"the endpoint failed on this call: {type(error).__name__}: {error}", None, "server_error"))
        if chat.stream:
            return Reply(200, b"".join(sse_chunks(completion, chat.include_usage)), "text/event-stream")
        return _json_reply(completion)

    def _session(self, key: str, named: str | None, caller: str | None) -> CallSession:
        by_key = self._by_key.get(key)
        addressed = named or (by_key.id if by_key is not None else None)
        if caller and addressed and caller != addressed:
            raise self._misrouted(caller, addressed)
        if named is None:
            if by_key is None:
                raise RequestError(401, "no session has this API key: use the llm handle's api_key", None, "invalid_api_key")
            return by_key
        session = self.sessions.get(named)
        if session is None:
            raise RequestError(410, f"session {named} is closed or unknown: its episode has ended", None, "session_closed")
        if by_key is not session:
            raise RequestError(
                403, f"this API key does not belong to session {named}: each episode calls with its own "
                "llm.api_key", None, "session_key_mismatch",
            )
        return session

    def _misrouted(self, caller: str, addressed: str) -> RequestError:
        """A client of one episode called from another episode's program: refused, and the calling
        episode ends with the error even if its program catches it (its calls went nowhere)."""
        message = (
            f"the program of episode {caller} called with a client of episode {addressed}: a client from "
            "llm.client() (or llm.base_url and llm.api_key) serves only the episode it was made for; make "
            "one in each episode instead of keeping one across episodes"
        )
        calling = self.sessions.get(caller)
        if calling is not None and calling.misuse is None:
            calling.misuse = message
        return RequestError(409, message, None, "client_of_another_episode")

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        """aiohttp's way in: admit the request by its headers, then read the body (at most
        `max_body_bytes`, enforced as it reads), then serve."""
        try:
            admitted = self.admit(request.method, request.path, request.headers)
            body = await _read(request, self.max_body_bytes) if request.method == "POST" else b""
        except RequestError as error:
            reply = _error(error)
        else:
            reply = await self.answer(admitted, body)
        if reply.content_type != "text/event-stream":
            return web.Response(body=reply.body, status=reply.status, content_type=reply.content_type)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        await response.write(reply.body)
        await response.write_eof()
        return response


@dataclass(frozen=True)
class Admitted:
    """A request the endpoint let in: its route ("chat/completions" or "models") and its session."""

    route: str
    session: CallSession


@dataclass(frozen=True)
class Reply:
    """A response of the endpoint: status, body, and its content type (JSON, or SSE events)."""

    status: int
    body: bytes
    content_type: str = "application/json"


_ROUTE = re.compile(r"^(?:/s/(?P<session>[^/]+))?/v1/(?P<route>chat/completions|models)$")


def _json_reply(body: Any, status: int = 200) -> Reply:
    return Reply(status, json.dumps(body, ensure_ascii=False).encode())


async def _read(request: web.Request, limit: int) -> bytes:
    if request.content_length is not None and request.content_length > limit:
        raise RequestError(413, _too_large(request.content_length, limit), None, "body_too_large")
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise RequestError(413, _too_large(None, limit), None, "body_too_large") from None


def _parse_json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise RequestError(400, f"the request body is not valid JSON: {error}", None, "invalid_json") from None
    except RecursionError:
        raise RequestError(400, "the request body nests deeper than JSON is read here", None, "invalid_json") from None


def _too_large(size: int | None, limit: int) -> str:
    got = f"{size:,} bytes" if size is not None else "a body"
    return f"{got} over the endpoint's request limit (max_body_bytes={limit:,})"


def _error(error: RequestError) -> Reply:
    return _json_reply(error.body(), error.status)
