"""The OpenAI-compatible endpoint an agent program talks to: `/v1/chat/completions` and `/v1/models`.

One endpoint serves every episode of a program in this process, on 127.0.0.1 and a free port, on the
event loop the rollouts run on (so a call reaches the engine without a thread hop). Each episode is a
session (sessions.py) reached at `/s/<session>/v1` with its own key; a key is checked against the
session in the path, so no episode reads or extends another's calls. A request may also name its
session by key alone, at `/v1`.

Errors are OpenAI's shape (`{"error": {"message", "param", "code"}}`), each naming the field or limit:
malformed JSON, a body over `max_body_bytes`, an unknown model, `n > 1`, a closed session, a call past
the episode's calls or tokens. `stream: true` replays the finished reply as server-sent events.

aiohttp is the server: Ray's default install brings it, so the endpoint adds no dependency.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from aiohttp import web

from rlfactory_nb.programs.sessions import EpisodeSession
from rlfactory_nb.programs.wire import RequestError, parse_request, sse_chunks

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 8 * 1024 * 1024
"""the largest request body served; a longer one is refused with 413"""


class Endpoint:
    """The endpoint of one program in one process and event loop (module docstring)."""

    def __init__(self, max_body_bytes: int = MAX_BODY_BYTES):
        self.max_body_bytes = max_body_bytes
        self.sessions: dict[str, EpisodeSession] = {}
        self._by_key: dict[str, EpisodeSession] = {}
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
        for prefix in ("/s/{session}/v1", "/v1"):
            app.router.add_post(prefix + "/chat/completions", self._completions)
            app.router.add_get(prefix + "/models", self._models)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
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

    def base_url(self, session: EpisodeSession) -> str:
        return f"http://127.0.0.1:{self.port}/s/{session.id}/v1"

    def open(self, session: EpisodeSession) -> EpisodeSession:
        self.sessions[session.id] = session
        self._by_key[session.key] = session
        return session

    def forget(self, session: EpisodeSession) -> None:
        """Close `session`; later requests with its key get 410 for a while, then 401."""
        session.close()
        self.sessions.pop(session.id, None)
        self._by_key.pop(session.key, None)

    # ------------------------------------------------------------------ handlers

    def _session(self, request: web.Request) -> EpisodeSession:
        header = request.headers.get("Authorization", "")
        key = header[7:].strip() if header.lower().startswith("bearer ") else ""
        by_key = self._by_key.get(key)
        named = request.match_info.get("session")
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

    async def _models(self, request: web.Request) -> web.Response:
        try:
            session = self._session(request)
        except RequestError as error:
            return _error(error)
        name = session.serving.model_name
        return web.json_response({"object": "list", "data": [{"id": name, "object": "model", "owned_by": "rlfactory-nb"}]})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        try:
            session = self._session(request)
            chat = parse_request(await _json(request, self.max_body_bytes))
            if chat.model and chat.model != session.serving.model_name:
                raise RequestError(
                    404, f"model {chat.model!r} is not served here; this endpoint serves "
                    f"{session.serving.model_name!r} (llm.model)", "model", "model_not_found",
                )
            body = await session.complete(chat)
        except RequestError as error:
            return _error(error)
        except Exception as error:  # the program gets a named error; the episode goes on
            log.exception("endpoint: a call of session %s failed", request.match_info.get("session"))
            return _error(RequestError(500, f"the endpoint failed on this call: {type(error).__name__}: {error}", None, "server_error"))
        if not chat.stream:
            return web.Response(body=json.dumps(body, ensure_ascii=False), content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        for event in sse_chunks(body, chat.include_usage):
            await response.write(event)
        await response.write_eof()
        return response


async def _json(request: web.Request, limit: int) -> Any:
    if request.content_length is not None and request.content_length > limit:
        raise RequestError(413, _too_large(request.content_length, limit), None, "body_too_large")
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise RequestError(413, _too_large(None, limit), None, "body_too_large") from None
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise RequestError(400, f"the request body is not valid JSON: {error}", None, "invalid_json") from None


def _too_large(size: int | None, limit: int) -> str:
    got = f"{size:,} bytes" if size is not None else "a body"
    return f"{got} over the endpoint's request limit (max_body_bytes={limit:,})"


def _error(error: RequestError) -> web.Response:
    return web.json_response(error.body(), status=error.status)
