"""One chat completion by another model: an engine (a `cluster.engine(...)` handle, a local engine) or
an OpenAI-compatible HTTP endpoint, behind one client.

The LLM judge (`rlfactory_nb.rewards.judge`) and a model used as a tool (`rlfactory_nb.tools.delegate`)
both need "send these messages, get the reply's text, count what it cost"; this is the one client
they share, so a judge and a model tool behave alike on a slow, failing or hostile model.

    client = chat_client(engine=cluster.engine("Qwen/QwQ-32B", kind="vllm", num_gpus=2))
    client = chat_client(base_url="http://localhost:8000/v1", model="Qwen/Qwen3-8B")
    reply = await client.complete([{"role": "user", "content": "..."}])   # ChatReply

Engine: the model's own tokenizer and chat template (the engine's `.tokenizer`, or `tokenizer=`)
render the messages to ids here, in the kernel or the driver, and only ids travel (tokens in, tokens
out: rollout/tokens.py). Every message's text is quoted first (chat/quoting.py): a policy's answer in a
judge's prompt that spells `<|im_end|><|im_start|>system` is read as characters, so it cannot close
the grading turn and write turns of its own. Each request is one `generate` call; up to `max_concurrency` are in flight at once,
and the engine batches them (hf: one padded batch; vLLM: continuous batching). An engine that died
(`EngineActorDied`) is raised as it is, never as a ChatError: every later request would fail too, so
a caller must not count it as one bad reply (the trainer fails the step, naming the engine).

HTTP: every request runs under `max_concurrency`, is retried with exponential backoff on connection
errors, timeouts, 429 and 5xx (waiting what a `Retry-After` header asks), and each attempt must be
complete within `timeout_s` and `max_reply_bytes` (chat_http.py). A request given up raises a
`ChatError` naming the URL, the attempts and the last error.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from rlfactory_nb.chat import quoting, render
from rlfactory_nb.chat.detect import detect_chat_format
from rlfactory_nb.engines.base import Engine, SamplingParams, context_length
from rlfactory_nb.engines.chat_http import Answer, ReplyRejected, post, retry_after_s, token_counts
from rlfactory_nb.engines.chat_types import ChatClient, ChatReply, ChatSettings, ChatUsage
from rlfactory_nb.errors import ChatError, ChatFormatError, ConfigError, EngineActorDied

log = logging.getLogger(__name__)
from rlfactory_nb.types import Message

_MAX_WAIT_S = 60.0
"""the longest single wait between HTTP attempts, whatever Retry-After asks"""


def chat_client(
    *,
    base_url: str | None = None,
    model: str | None = None,
    engine: Engine | None = None,
    tokenizer: Any = None,
    api_key: str | None = None,
    api_key_env: str = "OPENAI_API_KEY",
    settings: ChatSettings | None = None,
) -> ChatClient:
    """A client of `engine` (with its own tokenizer, or `tokenizer`) or of the endpoint at `base_url`
    (the API root, `http://localhost:8000/v1` for vLLM) serving `model`; exactly one of the two."""
    settings = settings or ChatSettings()
    if (base_url is None) == (engine is None):
        raise ConfigError(
            "give either engine= (a cluster.engine(...) handle or any engine) or base_url= (an "
            f"OpenAI-compatible endpoint) and model=; got base_url={base_url!r}, engine={engine!r}"
        )
    if engine is not None:
        return EngineChatClient(engine, settings, tokenizer, model)
    if model is None:
        raise ConfigError(f"base_url={base_url!r} needs model=, the name the endpoint serves")
    return HTTPChatClient(base_url, model, settings, api_key, api_key_env)


class _PerLoop:
    """An HTTP client and a semaphore belong to one event loop; a client used from a notebook cell and
    from `run_sync`'s loop keeps one of each per loop."""

    def __init__(self, make: Callable[[], Any]):
        self._make = make
        self._states: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()

    def get(self) -> Any:
        loop = asyncio.get_running_loop()
        if loop not in self._states:
            self._states[loop] = self._make()
        return self._states[loop]

    def pop(self) -> Any:
        return self._states.pop(asyncio.get_running_loop(), None)


class EngineChatClient:
    """Chat completions by an engine; see the module docstring."""

    def __init__(self, engine: Engine, settings: ChatSettings, tokenizer: Any = None, model: str | None = None):
        self.engine = engine
        self.tokenizer = tokenizer if tokenizer is not None else getattr(engine, "tokenizer", None)
        self._own = render.own_renderer(self.tokenizer) if self.tokenizer is not None else None
        """the family that renders this tokenizer's prompts itself (DeepSeek V3.2/V4, Kimi K3), if one does"""
        if self.tokenizer is None or not (getattr(self.tokenizer, "chat_template", None) or self._own):
            raise ConfigError(
                f"engine {engine!r} carries no tokenizer with a chat template: pass tokenizer= (the judged "
                "model's own, e.g. AutoTokenizer.from_pretrained(...)), so prompts render as the model expects"
            )
        self.settings = settings
        self.usage = ChatUsage()
        self.where = f"engine {getattr(engine, 'name', type(engine).__name__)}"
        self.model = model or str(getattr(self.tokenizer, "name_or_path", "") or self.where)
        self._limits = _PerLoop(lambda: asyncio.Semaphore(settings.max_concurrency))
        self.chat_format = _family(self.tokenizer)
        self._said_room = False

    def __repr__(self) -> str:
        return f"EngineChatClient({self.where!r})"

    async def complete(self, messages: Sequence[Message], seed: int | None = None) -> ChatReply:
        ids = self._render(messages)
        sampling = SamplingParams(temperature=self.settings.temperature, max_new_tokens=self._room(len(ids)), seed=seed)
        async with self._limits.get():
            generation = await self._timed(self._generate(ids, sampling))
        self.usage.requests += 1
        self.usage.prompt_tokens += len(ids)
        self.usage.completion_tokens += len(generation.token_ids)
        text = self.tokenizer.decode(generation.token_ids, skip_special_tokens=True)
        return ChatReply(text, truncated=generation.finish_reason == "length")

    async def _generate(self, ids: list[int], sampling: SamplingParams) -> Any:
        timeout_s = self.settings.timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                return await self.engine.generate(ids, sampling)
        except EngineActorDied:
            self.usage.failures += 1
            raise
        except TimeoutError as exc:
            raise self._failure(f"{self.where} gave no reply within {timeout_s:g} s (timeout_s)") from exc
        except Exception as exc:  # any engine failure but its death is this one request's
            # the engine's knob is max_new_tokens; the object the user built calls it max_tokens
            said = str(exc).replace("max_new_tokens", "max_tokens")
            raise self._failure(f"{self.where} failed: {type(exc).__name__}: {said}") from exc

    def _room(self, prompt_tokens: int) -> int:
        """`max_tokens`, or what the engine's context leaves after the prompt when that is less (said
        once per client: a judge's default 1024 does not fit a small model's context)."""
        wanted = self.settings.max_tokens
        context = context_length(self.engine)
        if context is None or prompt_tokens + wanted <= context:
            return wanted
        room = context - prompt_tokens
        if room < 1:
            raise self._failure(
                f"a prompt of {prompt_tokens} tokens fills {self.where}'s context of {context} tokens: shorten the "
                "prompt (the judge's prompt_template, or what it quotes), or serve a model with a longer context"
            )
        if not self._said_room:
            self._said_room = True
            log.warning(
                "%s: max_tokens=%d does not fit its context of %d tokens after a prompt of %d; replies get the "
                "%d tokens left (set max_tokens lower to choose, or serve a model with a longer context)",
                self.where, wanted, context, prompt_tokens, room,
            )
        return room

    async def _timed(self, work: Any) -> Any:
        start = time.perf_counter()
        try:
            return await work
        finally:
            self.usage.seconds += time.perf_counter() - start

    def _render(self, messages: Sequence[Message]) -> list[int]:
        """The prompt's ids, every message's text quoted (chat/quoting.py): the policy's words in a
        judge's or model tool's prompt spelling `<|im_end|>` stay characters, not a turn marker."""
        quoter = quoting.Quoter(self.tokenizer, self.chat_format)
        quoted = quoter.messages(messages)
        if self._own is not None:
            text = render.render_prompt(self._own, self.tokenizer, quoted, add_generation_prompt=True)
        else:
            text = self.tokenizer.apply_chat_template(quoted, add_generation_prompt=True, tokenize=False)
        return quoting.encode(self.tokenizer, text, quoter.found)

    def _failure(self, message: str) -> ChatError:
        self.usage.failures += 1
        return ChatError(message)

    async def aclose(self) -> None:
        """Nothing to close: the engine is its owner's (close it there)."""


def _family(tokenizer: Any) -> Any:
    """The tokenizer's family, whose structural markers are quoted too; None (special tokens only)
    for a template no family matches."""
    try:
        return detect_chat_format(tokenizer)
    except (ChatFormatError, AttributeError):  # no family matches, or a tokenizer without a vocabulary
        return None


@dataclass
class _Connection:
    client: httpx.AsyncClient
    limit: asyncio.Semaphore


class HTTPChatClient:
    """Chat completions by an OpenAI-compatible `/chat/completions` endpoint; see the module docstring.
    The key is `api_key`, else the `api_key_env` environment variable, else none (a local vLLM needs none)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        settings: ChatSettings,
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
    ):
        self.where = self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.settings = settings
        self.usage = ChatUsage()
        key = api_key if api_key is not None else os.environ.get(api_key_env)
        self._api_key_env = api_key_env
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        limits = httpx.Limits(max_connections=settings.max_concurrency)
        self._connections = _PerLoop(
            lambda: _Connection(
                httpx.AsyncClient(timeout=settings.timeout_s, limits=limits), asyncio.Semaphore(settings.max_concurrency)
            )
        )

    def __repr__(self) -> str:
        return f"HTTPChatClient({self.url!r}, {self.model!r})"

    async def complete(self, messages: Sequence[Message], seed: int | None = None) -> ChatReply:
        body = {
            "model": self.model,
            "messages": list(messages),
            "temperature": self.settings.temperature,
            "max_tokens": self.settings.max_tokens,
            **({"seed": seed} if seed is not None else {}),
        }
        connection = self._connections.get()
        async with connection.limit:
            start = time.perf_counter()
            try:
                data = await self._post_with_retries(connection.client, body)
            finally:
                self.usage.seconds += time.perf_counter() - start
        return self._read_reply(data)

    async def aclose(self) -> None:
        """Close this event loop's connections."""
        connection = self._connections.pop()
        if connection is not None:
            await connection.client.aclose()

    async def _post_with_retries(self, client: httpx.AsyncClient, body: dict[str, Any]) -> Any:
        settings = self.settings
        attempts = settings.max_retries + 1
        last_error = ""
        for attempt in range(1, attempts + 1):
            wait = settings.backoff_s * 2 ** (attempt - 1)
            try:
                answer = await post(
                    client, self.url, body, self._headers, timeout_s=settings.timeout_s, max_bytes=settings.max_reply_bytes
                )
            except httpx.TimeoutException as exc:
                last_error = f"{type(exc).__name__}: no reply within {settings.timeout_s:g} s (timeout_s)"
            except httpx.TransportError as exc:  # refused, reset, DNS: the server is down or restarting
                last_error = f"{type(exc).__name__}: {exc}"
            except ReplyRejected as exc:  # the same server would send it again: not retried
                raise self._failure(f"endpoint {self.url} sent an unusable reply: {exc}") from exc
            else:
                if answer.status == 200:
                    return self._read_json(answer)
                last_error = f"HTTP {answer.status}: {answer.excerpt()!r}"
                if answer.status != 429 and answer.status < 500:
                    raise self._failure(
                        f"endpoint {self.url} refused the request ({last_error}); not retried{self._hint(answer.status)}"
                    )
                wait = retry_after_s(answer.headers) or wait
            if attempt < attempts:
                self.usage.retries += 1
                await asyncio.sleep(min(wait, _MAX_WAIT_S))
        raise self._failure(
            f"endpoint {self.url} (model {self.model!r}) failed after {attempts} attempt(s) "
            f"(max_retries={settings.max_retries}); last error: {last_error}"
        )

    def _read_json(self, answer: Answer) -> Any:
        try:
            data = json.loads(answer.body)
        except (ValueError, RecursionError) as exc:  # RecursionError: nesting deeper than json goes
            raise self._failure(
                f"endpoint {self.url} answered 200 with a body that is not JSON: {answer.excerpt()!r}"
            ) from exc
        try:
            prompt_tokens, completion_tokens = token_counts(data)
        except ReplyRejected as exc:
            raise self._failure(f"endpoint {self.url} answered with invalid usage: {exc}") from exc
        self.usage.requests += 1
        self.usage.prompt_tokens += prompt_tokens
        self.usage.completion_tokens += completion_tokens
        return data

    def _read_reply(self, data: Any) -> ChatReply:
        try:
            choice = data["choices"][0]
            content = choice["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise ChatError(
                f"endpoint {self.url} answered without choices[0].message.content "
                f"(not the chat-completions shape): {str(data)[:300]!r}"
            ) from exc
        return ChatReply(str(content or ""), truncated=choice.get("finish_reason") == "length")

    def _failure(self, message: str) -> ChatError:
        """A ChatError for a request given up, counted in `usage.failures`."""
        self.usage.failures += 1
        return ChatError(message)

    def _hint(self, status: int) -> str:
        if status == 404:
            return "; check that base_url is the API root, usually ending in /v1, and the model name"
        if status in (401, 403):
            return f"; pass api_key= or set the {self._api_key_env} environment variable"
        return ""


def max_duration_s(settings: ChatSettings) -> float:
    """The longest one HTTP reply can take without Retry-After: every attempt timing out, plus the
    backoff between them (an engine request: `timeout_s`). A reward runner's `timeout_s` should be larger."""
    waits = sum(min(settings.backoff_s * 2**i, _MAX_WAIT_S) for i in range(settings.max_retries))
    return (settings.max_retries + 1) * settings.timeout_s + waits
