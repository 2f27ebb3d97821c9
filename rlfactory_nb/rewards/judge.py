"""An LLM judge as a reward function: a model behind any OpenAI-compatible chat endpoint (vLLM's
`vllm serve`, a hosted API) reads each sample and answers with a score.

    judge = LLMJudge("http://localhost:8000/v1", "Qwen/Qwen3-8B")
    await judge(sample)                    # {"score": 0.8}; a reward function like any other
    RewardRunner({"judge": judge, "em": exact_match})

A judge is a remote service with rate limits, so the plumbing is the point. Every request runs under
`max_concurrency`, is retried with exponential backoff on connection errors, timeouts, 429 and 5xx
(waiting what a `Retry-After` header asks), and fails with a `JudgeError` naming the URL, the
attempts and the last error. Each attempt must be complete within `timeout_s` and `max_reply_bytes`
(decompressed), whatever the server does (judge_http.py), so `max_duration_s` holds. Identical requests are answered from a cache (the same response is
often sampled several times in a GRPO group). Token usage accumulates in `judge.usage`, so a run can
report what judging cost. A reply with no readable score raises `JudgeParseError` quoting it; the
reward runner then counts or fails it per its `on_error`, like any reward that raises. The parsers
read at most `max_reply_bytes` in time linear in it, in a worker thread, so a reply written to stall
them cannot freeze the event loop (and with it the reward runner's timeout).

Group mode (relative judging, as ART's RULER does) shows the judge all attempts at one prompt in one
request and asks for a score each: no reference answer is needed, because GRPO only uses how the
attempts compare. See `score_group` and `as_group_reward`.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple, Self

import httpx

from rlfactory_nb.errors import JudgeError, JudgeParseError
from rlfactory_nb.rewards.judge_http import Answer, ReplyRejected, post, retry_after_s, token_counts
from rlfactory_nb.rewards.judge_prompts import (
    DEFAULT_GROUP_PROMPT,
    DEFAULT_PROMPT,
    GROUP_FIELDS,
    SAMPLE_FIELDS,
    check_template,
    group_fields,
    parse_group_scores,
    parse_score,
    question_of,
    sample_fields,
)
from rlfactory_nb.tools.cache import Recorded, ToolCache
from rlfactory_nb.types import Sample

ScoreParser = Callable[[str], "float | dict[str, Any]"]
"""reply text -> score in [0, 1] (or a reward dict); raises ValueError when there is none"""
GroupParser = Callable[[str], "list[float]"]
"""reply text -> one score per attempt, in order; both kinds of parser run in a worker thread and
should take time linear in the reply (a backtracking regex does not: `<score>` then 2,000 spaces
took 29 s)"""
GroupReward = Callable[[Sequence[Sample]], Awaitable[list[dict[str, float]]]]

_MAX_WAIT_S = 60.0
"""the longest single wait between attempts, whatever Retry-After asks"""


@dataclass
class JudgeUsage:
    """What a judge has spent since it was created or `reset_usage` was called."""

    requests: int = 0
    """requests the endpoint answered (each is billed)"""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_hits: int = 0
    """scores answered from the cache, at no cost"""
    retries: int = 0
    """attempts repeated after a connection error, timeout, 429 or 5xx"""
    failures: int = 0
    """requests given up after the last attempt (JudgeError)"""
    parse_errors: int = 0
    """replies with no readable score (JudgeParseError)"""
    seconds: float = 0.0
    """total time spent waiting on the endpoint, retries included"""

    def cost(self, prompt_price_per_m: float, completion_price_per_m: float) -> float:
        """Cost in the prices' currency, given prices per million prompt and completion tokens.

        >>> JudgeUsage(prompt_tokens=2_000_000, completion_tokens=100_000).cost(0.5, 2.0)
        1.2
        """
        return (
            self.prompt_tokens * prompt_price_per_m + self.completion_tokens * completion_price_per_m
        ) / 1e6


class _Reply(NamedTuple):
    text: str
    truncated: bool
    """cut off at max_tokens (finish_reason "length"): likely why no score is found"""


@dataclass
class _LoopState:
    """An HTTP client and a semaphore belong to one event loop; a judge used from a notebook cell and
    from `run_sync`'s loop keeps one of each per loop."""

    client: httpx.AsyncClient
    limit: asyncio.Semaphore


class LLMJudge:
    """Scores samples with a model behind an OpenAI-compatible `/chat/completions` endpoint; see the
    module docstring. Call it like a reward function: `await judge(sample)`."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        prompt_template: str = DEFAULT_PROMPT,
        score_parser: ScoreParser = parse_score,
        group_template: str = DEFAULT_GROUP_PROMPT,
        group_parser: GroupParser = parse_group_scores,
        max_concurrency: int = 8,
        timeout_s: float = 30.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        cache: bool = True,
        cache_path: str | Path | None = None,
        temperature: float = 0.0,
        max_tokens: int = 1024,
        max_reply_bytes: int = 2**20,
        name: str = "judge",
    ):
        """`base_url` is the API root the OpenAI client takes (`http://localhost:8000/v1` for vLLM).
        The key is `api_key`, else the `api_key_env` environment variable, else none (a local vLLM
        needs none). `cache_path` also records replies in a sqlite file, reused across runs.
        `timeout_s` bounds each attempt from connecting to the reply's last byte; `max_reply_bytes`
        bounds the reply's body once decompressed (1 MiB holds any honest reply of `max_tokens`)."""
        if (
            max_concurrency < 1
            or not 0 < timeout_s < float("inf")
            or max_retries < 0
            or backoff_s < 0
            or max_tokens < 1
            or max_reply_bytes < 1
        ):
            raise ValueError(
                "need max_concurrency >= 1, 0 < timeout_s < inf, max_retries >= 0, backoff_s >= 0, "
                f"max_tokens >= 1 and max_reply_bytes >= 1; got {max_concurrency}, {timeout_s}, "
                f"{max_retries}, {backoff_s}, {max_tokens}, {max_reply_bytes}"
            )
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.prompt_template = check_template(prompt_template, SAMPLE_FIELDS, "prompt_template")
        self.group_template = check_template(group_template, GROUP_FIELDS, "group_template")
        self.score_parser = score_parser
        self.group_parser = group_parser
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.max_reply_bytes = max_reply_bytes
        self.name = self.__name__ = name  # the reward runner names a function by __name__
        key = api_key if api_key is not None else os.environ.get(api_key_env)
        self._api_key_env = api_key_env
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._cache = ToolCache(path=cache_path) if cache or cache_path is not None else None
        self._states: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = (
            weakref.WeakKeyDictionary()
        )
        self.usage = JudgeUsage()

    def __repr__(self) -> str:
        return f"LLMJudge({self.url!r}, {self.model!r})"

    async def __call__(self, sample: Sample) -> dict[str, Any]:
        """`{"score": s}` with s in [0, 1] (or the custom parser's dict) for one sample."""
        value = await self._ask(self.prompt_template.format(**sample_fields(sample)), self.score_parser)
        return value if isinstance(value, dict) else {"score": value}

    async def score_group(self, samples: Sequence[Sample]) -> list[dict[str, float]]:
        """`{"score": s}` per sample, from one request that shows the judge every attempt at one prompt
        and asks how they compare. The samples must share their question."""
        if not samples:
            raise ValueError("score_group needs at least one sample")
        questions = {question_of(sample) for sample in samples}
        if len(questions) > 1:
            raise ValueError(
                f"score_group compares attempts at one prompt, but the {len(samples)} samples "
                f"(ids {[sample.id for sample in samples][:8]}) ask {len(questions)} different questions"
            )
        prompt = self.group_template.format(**group_fields(samples))

        def parse(reply: str) -> list[float]:
            scores = list(self.group_parser(reply))
            if len(scores) != len(samples):
                raise ValueError(f"expected {len(samples)} scores, one per attempt, got {len(scores)}")
            return scores

        return [{"score": float(score)} for score in await self._ask(prompt, parse)]

    def as_group_reward(self) -> GroupReward:
        """`score_group` as a plain async function of one group, for the trainer to call per prompt:

            judge_group = judge.as_group_reward()
            values = await asyncio.gather(*(judge_group(group) for group in sample_groups))

        where `sample_groups[i]` holds the samples of prompt i (`rollout_groups` returns trajectories
        in that shape). It raises like `score_group`; the caller counts or fails it as `on_error` says.
        The function carries `group_reward = True`, so a runner can tell it from a per-sample reward.
        """

        async def group_reward(samples: Sequence[Sample]) -> list[dict[str, float]]:
            return await self.score_group(samples)

        group_reward.__name__ = group_reward.__qualname__ = f"{self.name}_group"
        group_reward.group_reward = True  # type: ignore[attr-defined]
        return group_reward

    def cost(self, prompt_price_per_m: float, completion_price_per_m: float) -> float:
        """`usage.cost`: what judging has cost so far at these prices per million tokens."""
        return self.usage.cost(prompt_price_per_m, completion_price_per_m)

    @property
    def max_duration_s(self) -> float:
        """The longest one score can take without Retry-After: every attempt timing out, plus the
        backoff between them. A reward runner's `timeout_s` should be larger."""
        waits = sum(min(self.backoff_s * 2**i, _MAX_WAIT_S) for i in range(self.max_retries))
        return (self.max_retries + 1) * self.timeout_s + waits

    @property
    def metrics(self) -> dict[str, float]:
        """`usage` as flat `<name>/...` keys for the run's metric stream."""
        metrics: dict[str, float] = {f"{self.name}/{key}": value for key, value in asdict(self.usage).items()}
        requests = self.usage.requests + self.usage.failures
        metrics[f"{self.name}/seconds_mean"] = self.usage.seconds / requests if requests else 0.0
        return metrics

    def reset_usage(self) -> None:
        self.usage = JudgeUsage()

    async def aclose(self) -> None:
        """Close this event loop's connections (the cache file stays, for the next judge)."""
        state = self._states.pop(asyncio.get_running_loop(), None)
        if state is not None:
            await state.client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _ask(self, prompt: str, parser: Callable[[str], Any]) -> Any:
        """`parser` applied to the judge's reply to `prompt`, from the cache or the endpoint. Only
        replies that parse are cached: a sampled judge (temperature > 0) gets another chance."""
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        hit = self._cache.get(self.url, body) if self._cache is not None else None
        if hit is not None:
            self.usage.cached_hits += 1
        reply = _Reply(hit.content, truncated=False) if hit is not None else await self._request(body)
        try:
            value = await asyncio.to_thread(parser, reply.text)
        except Exception as exc:  # a custom parser may raise anything; every kind means "no score"
            raise self._parse_error(reply, str(exc)) from exc
        if self._cache is not None and hit is None:
            self._cache.put(self.url, body, Recorded("ok", reply.text))
        return value

    async def _request(self, body: dict[str, Any]) -> _Reply:
        state = self._state()
        async with state.limit:
            start = time.perf_counter()
            try:
                data = await self._post_with_retries(state.client, body)
            finally:
                self.usage.seconds += time.perf_counter() - start
        return self._read_reply(data)

    async def _post_with_retries(self, client: httpx.AsyncClient, body: dict[str, Any]) -> Any:
        attempts = self.max_retries + 1
        last_error = ""
        for attempt in range(1, attempts + 1):
            wait = self.backoff_s * 2 ** (attempt - 1)
            try:
                answer = await post(
                    client, self.url, body, self._headers, timeout_s=self.timeout_s, max_bytes=self.max_reply_bytes
                )
            except httpx.TimeoutException as exc:
                last_error = f"{type(exc).__name__}: no reply within {self.timeout_s:g} s (timeout_s)"
            except httpx.TransportError as exc:  # refused, reset, DNS: the server is down or restarting
                last_error = f"{type(exc).__name__}: {exc}"
            except ReplyRejected as exc:  # the same server would send it again: not retried
                raise self._failure(f"judge endpoint {self.url} sent an unusable reply: {exc}") from exc
            else:
                if answer.status == 200:
                    return self._read_json(answer)
                last_error = f"HTTP {answer.status}: {answer.excerpt()!r}"
                if answer.status != 429 and answer.status < 500:
                    raise self._failure(
                        f"judge endpoint {self.url} refused the request ({last_error}); not retried"
                        f"{self._hint(answer.status)}"
                    )
                wait = retry_after_s(answer.headers) or wait
            if attempt < attempts:
                self.usage.retries += 1
                await asyncio.sleep(min(wait, _MAX_WAIT_S))
        raise self._failure(
            f"judge endpoint {self.url} (model {self.model!r}) failed after {attempts} attempt(s) "
            f"(max_retries={self.max_retries}); last error: {last_error}"
        )

    def _read_json(self, answer: Answer) -> Any:
        try:
            data = json.loads(answer.body)
        except (ValueError, RecursionError) as exc:  # RecursionError: nesting deeper than json goes
            raise self._failure(
                f"judge endpoint {self.url} answered 200 with a body that is not JSON: {answer.excerpt()!r}"
            ) from exc
        try:
            prompt_tokens, completion_tokens = token_counts(data)
        except ReplyRejected as exc:
            raise self._failure(f"judge endpoint {self.url} answered with invalid usage: {exc}") from exc
        self.usage.requests += 1
        self.usage.prompt_tokens += prompt_tokens
        self.usage.completion_tokens += completion_tokens
        return data

    def _failure(self, message: str) -> JudgeError:
        """A JudgeError for a request given up, counted in `usage.failures`."""
        self.usage.failures += 1
        return JudgeError(message)

    def _read_reply(self, data: Any) -> _Reply:
        try:
            choice = data["choices"][0]
            content = choice["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise JudgeError(
                f"judge endpoint {self.url} answered without choices[0].message.content "
                f"(not the chat-completions shape): {str(data)[:300]!r}"
            ) from exc
        return _Reply(str(content or ""), truncated=choice.get("finish_reason") == "length")

    def _parse_error(self, reply: _Reply, reason: str) -> JudgeParseError:
        self.usage.parse_errors += 1
        # a truncated reply is the usual cause, and its fix is a setting, not the prompt
        cut = f"; the reply was cut off at max_tokens={self.max_tokens}, raise it" if reply.truncated else ""
        return JudgeParseError(
            f"judge model {self.model!r} gave a reply with no readable score ({reason}){cut}; "
            f"reply: {reply.text[:400]!r}"
        )

    def _hint(self, status: int) -> str:
        if status == 404:
            return "; check that base_url is the API root, usually ending in /v1, and the model name"
        if status in (401, 403):
            return f"; pass api_key= or set the {self._api_key_env} environment variable"
        return ""

    def _state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        state = self._states.get(loop)
        if state is None:
            client = httpx.AsyncClient(
                timeout=self.timeout_s, limits=httpx.Limits(max_connections=self.max_concurrency)
            )
            state = self._states[loop] = _LoopState(client, asyncio.Semaphore(self.max_concurrency))
        return state
