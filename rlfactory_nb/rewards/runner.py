"""Score a batch of samples with reward functions, concurrently, without letting one bad function
crash or stall a training step silently.

Every (sample, function) call runs under a timeout. A sync function runs in its own daemon thread, so
a slow one cannot block the event loop and a hung one cannot keep the interpreter from exiting (a
thread cannot be killed: a timed-out call is abandoned and counted, and work waiting inside it sees
that and gives up: rewards/threads.py). An async reward must not do slow synchronous work itself;
the verified rewards (`tool_verified`) run a sync tool or check in a thread for that reason.
An exception, a timeout or a value that is not a reward becomes a `RewardFailure` naming the
function, the sample and the cause;
`on_error="fail"` raises them all as one `RewardError`, `on_error="zero"` scores that function 0.
Failures and per-function timings are counted either way and exposed by `metrics`.

With several functions, the first is the training reward (`RewardOutcome.score`); the others are
logged next to it. To train on a weighted sum, pass one `combine(...)`.

A group reward (`@group_reward`, `LLMJudge.as_group_reward()`) takes the samples of one prompt and
returns one score per sample: `score_groups` calls it once per group, under the same timeout, and a
failure of the call (or a list of the wrong length) is a failure for every sample of the group,
counted per sample like a per-sample function's. `score` treats each sample as a group of one.

One failure is not counted: an engine actor that died under a function (an LLM judge's engine,
`EngineActorDied`) is raised as it is, whatever `on_error` says, since every later sample would fail
too; the trainer then fails the step, naming the engine. A function that meters what it spends (an
LLM judge: requests, tokens, seconds) reports it through `usage_metrics`, once per training step.
"""

from __future__ import annotations

import asyncio
import inspect
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from rlfactory_nb._async import run_sync
from rlfactory_nb._threads import in_thread
from rlfactory_nb.config_sections import RewardConfig
from rlfactory_nb.errors import ArgumentTypeError, ConfigError, EngineActorDied, RewardError
from rlfactory_nb.rewards.loading import load_reward
from rlfactory_nb.rewards.values import (
    InvalidRewardValue,
    RewardFunction,
    RewardValue,
    is_async_function,
    is_group_reward,
    to_reward_value,
)
from rlfactory_nb.types import Sample

FailureKind = Literal["exception", "timeout", "invalid"]


@runtime_checkable
class Metered(Protocol):
    """A reward function that counts what it spends (`LLMJudge`)."""

    @property
    def metrics(self) -> dict[str, float]:
        """`<name>/<counter>` -> value since the last `reset_usage`"""
        ...

    def reset_usage(self) -> None: ...


@dataclass(frozen=True)
class RewardFailure:
    """One reward function that did not produce a reward for one sample."""

    function: str
    sample_id: str
    kind: FailureKind
    message: str

    def __str__(self) -> str:
        return f"reward function {self.function!r} on sample {self.sample_id!r}: {self.message}"


@dataclass(frozen=True)
class RewardOutcome:
    """The rewards of one sample."""

    sample_id: str
    score: float
    """the first function's score: the training reward (0.0 when it failed)"""
    components: dict[str, float] = field(default_factory=dict)
    """`name` -> score for every function that succeeded, and `name/component` for their dict keys"""
    turn_scores: list[float] | None = None
    """the first function's per-turn scores, when it gives them"""
    errors: list[RewardFailure] = field(default_factory=list)
    timing_s: dict[str, float] = field(default_factory=dict)
    """seconds each function took on this sample"""

    @property
    def ok(self) -> bool:
        return not self.errors


class RewardRunner:
    """Scores samples with named reward functions; see the module docstring."""

    def __init__(
        self,
        functions: RewardFunction | Mapping[str, RewardFunction],
        *,
        on_error: Literal["zero", "fail"] = "zero",
        max_concurrency: int = 32,
        timeout_s: float = 60.0,
    ):
        if callable(functions):
            functions = {getattr(functions, "__name__", "reward"): functions}
        if not functions:
            raise ConfigError("RewardRunner needs at least one reward function")
        for name, function in functions.items():
            if not callable(function):
                raise ArgumentTypeError(f"reward function {name!r} is a {type(function).__name__}, not callable")
        if on_error not in ("zero", "fail"):
            raise ConfigError(f'on_error must be "zero" or "fail", got {on_error!r}')
        if max_concurrency < 1 or timeout_s <= 0:
            raise ConfigError(
                f"need max_concurrency >= 1 and timeout_s > 0, got {max_concurrency}, {timeout_s}"
            )
        self.functions = dict(functions)
        self.on_error = on_error
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.reset_metrics()

    @classmethod
    def from_config(
        cls, config: RewardConfig, functions: RewardFunction | Mapping[str, RewardFunction] | None = None
    ) -> RewardRunner:
        """The runner `config` describes; `functions` (objects from the kernel) replace its `function`."""
        return cls(
            functions if functions is not None else load_reward(config.function, config.args),
            on_error=config.on_error,
            max_concurrency=config.max_concurrency,
            timeout_s=config.timeout_s,
        )

    def with_function(self, name: str, function: RewardFunction, first: bool) -> RewardRunner:
        """A runner with the same settings and `function` added as `name`: first (the training
        reward) or last (logged beside it)."""
        if name in self.functions:
            raise ConfigError(f"the reward functions already include one named {name!r}")
        added = {name: function}
        functions = {**added, **self.functions} if first else {**self.functions, **added}
        return RewardRunner(functions, on_error=self.on_error, max_concurrency=self.max_concurrency, timeout_s=self.timeout_s)

    @property
    def primary(self) -> str:
        return next(iter(self.functions))

    async def score(self, samples: Sequence[Sample]) -> list[RewardOutcome]:
        """One outcome per sample, in order (group rewards see each sample as a group of one).
        Raises RewardError if any call failed and on_error="fail"."""
        return [outcome for group in await self.score_groups([[sample] for sample in samples]) for outcome in group]

    async def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutcome]]:
        """Outcomes shaped like `groups` (the samples of one prompt each); see the module docstring."""
        limit = asyncio.Semaphore(self.max_concurrency)
        ids, start = [], 0
        for group in groups:
            ids.append([sample.id or f"#{start + i}" for i, sample in enumerate(group)])
            start += len(group)
        per_sample = [name for name, function in self.functions.items() if not is_group_reward(function)]
        per_group = [name for name in self.functions if name not in per_sample]

        async def one(sample_id: str, sample: Sample) -> list[tuple[RewardValue | RewardFailure, float]]:
            async with limit:
                return list(await asyncio.gather(*(self._call(name, sample_id, sample) for name in per_sample)))

        async def whole(index: int) -> list[list[tuple[RewardValue | RewardFailure, float]]]:
            async with limit:
                return list(await asyncio.gather(*(self._call_group(name, ids[index], groups[index]) for name in per_group)))

        sample_results, group_results = await asyncio.gather(
            asyncio.gather(*(one(ids[g][i], s) for g, group in enumerate(groups) for i, s in enumerate(group))),
            asyncio.gather(*(whole(g) for g in range(len(groups)))),
        )
        outcomes, flat = [], iter(sample_results)
        for g, group in enumerate(groups):
            row = []
            for i in range(len(group)):
                results = dict(zip(per_sample, next(flat)))
                results.update({name: group_results[g][k][i] for k, name in enumerate(per_group)})
                row.append(self._outcome(ids[g][i], results))
            outcomes.append(row)
        failures = [failure for row in outcomes for outcome in row for failure in outcome.errors]
        if failures and self.on_error == "fail":
            raise RewardError(failures)
        return outcomes

    def score_sync(self, samples: Sequence[Sample]) -> list[RewardOutcome]:
        """`score` from plain code or a notebook cell."""
        return run_sync(self.score(samples))

    def _outcome(
        self, sample_id: str, results: dict[str, tuple[RewardValue | RewardFailure, float]]
    ) -> RewardOutcome:
        """One sample's outcome from every function's (value or failure, seconds)."""
        components: dict[str, float] = {}
        errors: list[RewardFailure] = []
        timing: dict[str, float] = {}
        for name in self.functions:
            value, seconds = results[name]
            timing[name] = seconds
            if isinstance(value, RewardFailure):
                errors.append(value)
                continue
            components[name] = value.score
            components.update({f"{name}/{key}": number for key, number in value.components.items()})
        primary = results[self.primary][0]
        if isinstance(primary, RewardFailure):
            return RewardOutcome(sample_id, 0.0, components, None, errors, timing)
        return RewardOutcome(sample_id, primary.score, components, primary.turn_scores, errors, timing)

    async def _call(
        self, name: str, sample_id: str, sample: Sample
    ) -> tuple[RewardValue | RewardFailure, float]:
        function = self.functions[name]
        start = time.perf_counter()
        try:
            value = await asyncio.wait_for(self._invoke(name, function, sample), self.timeout_s)
            outcome: RewardValue | RewardFailure = to_reward_value(value)
        except TimeoutError:
            outcome = RewardFailure(
                name, sample_id, "timeout", f"no result within {self.timeout_s:g} s (timeout_s)"
            )
        except InvalidRewardValue as exc:
            outcome = RewardFailure(name, sample_id, "invalid", str(exc))
        except EngineActorDied:
            raise  # not one sample's failure: see the module docstring
        except Exception as exc:  # noqa: BLE001  (any error in user code becomes a reported failure)
            outcome = RewardFailure(name, sample_id, "exception", _describe(exc))
        seconds = time.perf_counter() - start
        self._record(name, outcome, seconds)
        return outcome, seconds

    async def _call_group(
        self, name: str, sample_ids: list[str], group: Sequence[Sample]
    ) -> list[tuple[RewardValue | RewardFailure, float]]:
        """Call a group reward once for `group`: one (value or failure, seconds) per sample."""
        start = time.perf_counter()
        outcomes: list[RewardValue | RewardFailure]
        try:
            values = await asyncio.wait_for(self._invoke(name, self.functions[name], list(group)), self.timeout_s)
            if not isinstance(values, (list, tuple)) or len(values) != len(group):
                got = f"{len(values)} values" if isinstance(values, (list, tuple)) else f"a {type(values).__name__}"
                raise InvalidRewardValue(
                    f"group reward returned {got} for a group of {len(group)} samples; it must return a list "
                    "with one score (a number or a dict with 'score') per sample, in the order given"
                )
            outcomes = [_checked(name, sample_id, value) for sample_id, value in zip(sample_ids, values)]
        except TimeoutError:
            message = f"no result for the group within {self.timeout_s:g} s (timeout_s)"
            outcomes = [RewardFailure(name, sample_id, "timeout", message) for sample_id in sample_ids]
        except InvalidRewardValue as exc:
            outcomes = [RewardFailure(name, sample_id, "invalid", str(exc)) for sample_id in sample_ids]
        except EngineActorDied:
            raise  # not one group's failure: see the module docstring
        except Exception as exc:  # noqa: BLE001  (any error in user code becomes a reported failure)
            message = _describe(exc)
            outcomes = [RewardFailure(name, sample_id, "exception", message) for sample_id in sample_ids]
        seconds = time.perf_counter() - start
        for outcome in outcomes:
            self._record(name, outcome, seconds)
        return [(outcome, seconds) for outcome in outcomes]

    async def _invoke(self, name: str, function: RewardFunction, sample: Any) -> Any:
        if is_async_function(function):
            return await function(sample)
        try:
            value = await in_thread("reward", function, sample)
        except asyncio.CancelledError:
            self._abandoned_threads += 1  # the thread runs on; it cannot be stopped
            raise
        return await value if inspect.isawaitable(value) else value

    def _record(self, name: str, outcome: RewardValue | RewardFailure, seconds: float) -> None:
        self._calls[name] += 1
        self._time_total[name] += seconds
        self._time_max[name] = max(self._time_max[name], seconds)
        if isinstance(outcome, RewardFailure):
            self._failures[name, outcome.kind] += 1

    @property
    def metrics(self) -> dict[str, float]:
        """Counters and timings since creation or `reset_metrics`, as flat `reward/...` keys."""
        metrics: dict[str, float] = {
            "reward/calls": sum(self._calls.values()),
            "reward/failures": sum(self._failures.values()),
            "reward/abandoned_threads": self._abandoned_threads,
        }
        for kind in ("exception", "timeout", "invalid"):
            metrics[f"reward/failures/{kind}"] = sum(n for (_, k), n in self._failures.items() if k == kind)
        for name in self.functions:
            calls = self._calls[name]
            metrics[f"reward/{name}/calls"] = calls
            metrics[f"reward/{name}/failures"] = sum(n for (f, _), n in self._failures.items() if f == name)
            metrics[f"reward/{name}/time_mean_s"] = self._time_total[name] / calls if calls else 0.0
            metrics[f"reward/{name}/time_max_s"] = self._time_max[name]
        return metrics

    def usage_metrics(self) -> dict[str, float]:
        """What the metered functions (an LLM judge) spent since the last call, as `reward/<name>/...`
        keys (`reward/judge/tokens`, `reward/judge/seconds_mean`, ...); their counters restart at 0."""
        metrics: dict[str, float] = {}
        for function in self.functions.values():
            if isinstance(function, Metered):
                metrics.update({f"reward/{key}": value for key, value in function.metrics.items()})
                function.reset_usage()
        return metrics

    def reset_metrics(self) -> None:
        self._calls: Counter[str] = Counter()
        self._failures: Counter[tuple[str, FailureKind]] = Counter()
        self._time_total: defaultdict[str, float] = defaultdict(float)
        self._time_max: defaultdict[str, float] = defaultdict(float)
        self._abandoned_threads = 0


def _checked(name: str, sample_id: str, value: Any) -> RewardValue | RewardFailure:
    try:
        return to_reward_value(value)
    except InvalidRewardValue as exc:
        return RewardFailure(name, sample_id, "invalid", str(exc))


def _describe(exc: BaseException) -> str:
    """`raised KeyError: 'answer' (at reward.py:12)`: the innermost frame is usually the user's line."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"raised {type(exc).__name__}: {exc}{where}"
