"""An LLM judge as a reward function: a model reads each sample and answers with a score. The model is
an engine (`cluster.engine(...)` on the cluster's own GPUs, or any local engine) or sits behind an
OpenAI-compatible chat endpoint (vLLM's `vllm serve`, a hosted API).

    judge = LLMJudge(engine=cluster.engine("Qwen/QwQ-32B", kind="vllm", num_gpus=2))
    judge = LLMJudge("http://localhost:8000/v1", "Qwen/Qwen3-8B")
    await judge(sample)                    # {"score": 0.8}; a reward function like any other
    RewardRunner({"judge": judge, "em": exact_match})

A judge is a remote service with limits, so the plumbing is the point, and it is the chat client's
(`rlfactory_nb.engines.chat_client`, shared with model tools): with an engine, the judge model's own
tokenizer and chat template render the prompt here and requests go to the engine concurrently (it
batches them); with an endpoint, every request runs under `max_concurrency`, is retried with
exponential backoff on connection errors, timeouts, 429 and 5xx, and each attempt must be complete
within `timeout_s` and `max_reply_bytes`, so `max_duration_s` holds. A request given up raises a
`JudgeError` naming the URL or engine, the attempts and the last error; an engine actor that died
raises `EngineActorDied` (the trainer fails the step naming it: every later score would fail too).
Identical requests are answered from a cache (the same response is often sampled several times in a
GRPO group). Token usage and time accumulate in `judge.usage` (`judge.metrics` for the run's
metric stream). A reply with no readable score raises `JudgeParseError` quoting it; the reward
runner then counts or fails it per its `on_error`, like any reward that raises. The parsers read at
most `max_reply_bytes` in time linear in it, in a worker thread, so a reply written to stall them
cannot freeze the event loop (and with it the reward runner's timeout).

Group mode (relative judging, as ART's RULER does) shows the judge all attempts at one prompt in one
request and asks for a score each: no reference answer is needed, because GRPO only uses how the
attempts compare. See `score_group` and `as_group_reward`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Self

from rlfactory_nb._threads import in_thread
from rlfactory_nb.config_sections import JudgeConfig
from rlfactory_nb.engines.base import Engine
from rlfactory_nb.engines.chat_client import chat_client, max_duration_s
from rlfactory_nb.engines.chat_types import ChatReply, ChatSettings, ChatUsage
from rlfactory_nb.errors import ChatError, JudgeError, JudgeParseError, SampleError
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
from rlfactory_nb.types import Message, Sample

ScoreParser = Callable[[str], "float | dict[str, Any]"]
"""reply text -> score in [0, 1] (or a reward dict); raises ValueError when there is none"""
GroupParser = Callable[[str], "list[float]"]
"""reply text -> one score per attempt, in order; both kinds of parser run in a worker thread and
should take time linear in the reply (a backtracking regex does not: `<score>` then 2,000 spaces
took 29 s)"""
GroupReward = Callable[[Sequence[Sample]], Awaitable[list[dict[str, float]]]]

JudgeUsage = ChatUsage
"""what a judge has spent: its chat client's usage (the name `rf.rewards` has always exported)"""


class LLMJudge:
    """Scores samples with a model on an engine or behind an OpenAI-compatible `/chat/completions`
    endpoint; see the module docstring. Call it like a reward function: `await judge(sample)`."""

    def __init__(
        self,
        base_url: str | None = None,
        model: str | None = None,
        *,
        engine: Engine | None = None,
        tokenizer: Any = None,
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
        """Either `engine` (a `cluster.engine(...)` handle or any engine; `tokenizer`: the judge
        model's, when the engine carries none) or `base_url`, the API root the OpenAI client takes
        (`http://localhost:8000/v1` for vLLM), with `model`. The key is `api_key`, else the
        `api_key_env` environment variable, else none (a local vLLM needs none). `cache_path` also
        records replies in a sqlite file, reused across runs. `timeout_s` bounds each attempt from
        sending to the reply's last byte; `max_reply_bytes` bounds an HTTP reply's body once
        decompressed (1 MiB holds any honest reply of `max_tokens`)."""
        settings = ChatSettings(
            max_concurrency, timeout_s, max_retries, backoff_s, temperature, max_tokens, max_reply_bytes
        )
        self.client = chat_client(
            base_url=base_url, model=model, engine=engine, tokenizer=tokenizer,
            api_key=api_key, api_key_env=api_key_env, settings=settings,
        )  # fmt: skip
        self.prompt_template = check_template(prompt_template, SAMPLE_FIELDS, "prompt_template")
        self.group_template = check_template(group_template, GROUP_FIELDS, "group_template")
        self.score_parser = score_parser
        self.group_parser = group_parser
        self.name = self.__name__ = name  # the reward runner names a function by __name__
        self._cache = ToolCache(path=cache_path) if cache or cache_path is not None else None

    @classmethod
    def from_config(cls, config: JudgeConfig, engine: Engine) -> LLMJudge:
        """The judge `reward.judge` declares, on its engine (started by the run's backend)."""
        return cls(
            engine=engine, model=config.model, max_concurrency=config.max_concurrency,
            timeout_s=config.timeout_s, max_tokens=config.max_tokens,
        )  # fmt: skip

    @property
    def model(self) -> str:
        return self.client.model

    @property
    def usage(self) -> JudgeUsage:
        return self.client.usage

    def __repr__(self) -> str:
        return f"LLMJudge({self.client.where!r}, {self.model!r})"

    async def __call__(self, sample: Sample) -> dict[str, Any]:
        """`{"score": s}` with s in [0, 1] (or the custom parser's dict) for one sample."""
        value = await self._ask(self.prompt_template.format(**sample_fields(sample)), self.score_parser)
        return value if isinstance(value, dict) else {"score": value}

    async def score_group(self, samples: Sequence[Sample]) -> list[dict[str, float]]:
        """`{"score": s}` per sample, from one request that shows the judge every attempt at one prompt
        and asks how they compare. The samples must share their question."""
        if not samples:
            raise SampleError("score_group needs at least one sample")
        questions = {question_of(sample) for sample in samples}
        if len(questions) > 1:
            raise SampleError(
                f"score_group compares attempts at one prompt, but the {len(samples)} samples "
                f"(ids {[sample.id for sample in samples][:8]}) ask {len(questions)} different questions"
            )
        prompt = self.group_template.format(**group_fields(samples))

        def parse(reply: str) -> list[float]:
            scores = list(self.group_parser(reply))
            if len(scores) != len(samples):
                raise JudgeParseError(f"expected {len(samples)} scores, one per attempt, got {len(scores)}")
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
        return max_duration_s(self.client.settings)

    @property
    def metrics(self) -> dict[str, float]:
        """`usage` as flat `<name>/...` keys for the run's metric stream, with `tokens` (prompt and
        completion) and `seconds_mean` (the mean latency of a request)."""
        usage = self.usage
        metrics: dict[str, float] = {f"{self.name}/{key}": value for key, value in asdict(usage).items()}
        metrics[f"{self.name}/tokens"] = usage.prompt_tokens + usage.completion_tokens
        requests = usage.requests + usage.failures
        metrics[f"{self.name}/seconds_mean"] = usage.seconds / requests if requests else 0.0
        return metrics

    def reset_usage(self) -> None:
        self.client.usage = ChatUsage()

    async def aclose(self) -> None:
        """Close this event loop's connections (the cache file stays, for the next judge; an engine
        stays its owner's)."""
        await self.client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _ask(self, prompt: str, parser: Callable[[str], Any]) -> Any:
        """`parser` applied to the judge's reply to `prompt`, from the cache or the model. Only
        replies that parse are cached: a sampled judge (temperature > 0) gets another chance."""
        messages: list[Message] = [{"role": "user", "content": prompt}]
        settings = self.client.settings
        key = {"model": self.model, "messages": messages, "temperature": settings.temperature, "max_tokens": settings.max_tokens}
        hit = self._cache.get(self.client.where, key) if self._cache is not None else None
        if hit is not None:
            self.usage.cached_hits += 1
        reply = ChatReply(hit.content, truncated=False) if hit is not None else await self._complete(messages)
        try:
            value = await in_thread("reward", parser, reply.text)
        except Exception as exc:  # a custom parser may raise anything; every kind means "no score"
            raise self._parse_error(reply, str(exc)) from exc
        if self._cache is not None and hit is None:
            self._cache.put(self.client.where, key, Recorded("ok", reply.text))
        return value

    async def _complete(self, messages: list[Message]) -> ChatReply:
        try:
            return await self.client.complete(messages)
        except ChatError as exc:
            raise JudgeError(f"judge {exc}") from exc

    def _parse_error(self, reply: ChatReply, reason: str) -> JudgeParseError:
        self.usage.parse_errors += 1
        # a truncated reply is the usual cause, and its fix is a setting, not the prompt
        limit = self.client.settings.max_tokens
        cut = f"; the reply was cut off at max_tokens={limit}, raise it" if reply.truncated else ""
        return JudgeParseError(
            f"judge model {self.model!r} gave a reply with no readable score ({reason}){cut}; "
            f"reply: {reply.text[:400]!r}"
        )
