"""Reward faults: functions that raise, hang or return NaN (handled per `on_error`, named, counted),
a judge endpoint that is down, slow, failing or answering garbage (retried, then a clear JudgeError),
and the same faults inside a real training step."""

from __future__ import annotations

import asyncio
import math
import re
import socket
import threading
import time
from urllib.parse import urlencode

import httpx
import pytest

from rlfactory_nb.rewards import RewardError, RewardRunner, exact_match, make_sample
from rlfactory_nb.rewards.judge import JudgeError, LLMJudge
from rlfactory_nb.train.loop import train
from rlfactory_nb.train.metrics import read_metrics

pytestmark = pytest.mark.timeout(120)

SAMPLES = [make_sample(f"<answer>{i}</answer>", ground_truth="1", id=f"s{i}") for i in range(8)]


# -- reward functions that fail ----------------------------------------------------------------------

def raises_key_error(sample):
    return {"a": 1}["answer"]


async def test_an_exception_names_function_sample_exception_and_line() -> None:
    runner = RewardRunner({"em": exact_match, "mine": raises_key_error})
    outcomes = await runner.score(SAMPLES[:2])
    failure = outcomes[1].errors[0]
    assert (failure.function, failure.sample_id, failure.kind) == ("mine", "s1", "exception")
    assert "raised KeyError: 'answer' (at " in failure.message and "test_rewards.py:" in failure.message
    assert str(failure).startswith("reward function 'mine' on sample 's1': raised KeyError")
    assert outcomes[1].score == 1.0 and outcomes[1].components == {"em": 1.0}, (
        "the other function still counts"
    )
    assert runner.metrics["reward/mine/failures"] == 2 and runner.metrics["reward/failures/exception"] == 2


async def test_a_failing_training_reward_scores_zero() -> None:
    outcomes = await RewardRunner(raises_key_error).score(SAMPLES[:1])
    assert outcomes[0].score == 0.0 and not outcomes[0].ok


@pytest.mark.parametrize(
    "value, message",
    [
        (None, "the returned value is None"),
        (float("nan"), "the returned value is nan"),
        (math.inf, "the returned value is inf"),
        ("1.0", r"is a str \(.1\.0.\), not a number"),
        ([1.0], "is a list"),
        ({"value": 1.0}, "has no 'score' key"),
        ({"score": 1.0, "part": "high"}, "component 'part' is a str"),
        ({"score": 1.0, "turn_scores": 0.5}, "'turn_scores' must be a list"),
        ({"score": 1.0, "turn_scores": [0.5, None]}, r"turn_scores\[1\] is None"),
    ],
)
async def test_invalid_values_are_failures(value: object, message: str) -> None:
    runner = RewardRunner({"bad": lambda s: value})
    [outcome] = await runner.score(SAMPLES[:1])
    assert outcome.score == 0.0
    assert outcome.errors[0].kind == "invalid"
    assert outcome.errors[0].function == "bad" and outcome.errors[0].sample_id == "s0"
    assert re.search(message, outcome.errors[0].message), outcome.errors[0].message
    assert runner.metrics["reward/failures/invalid"] == 1


async def test_hanging_functions_time_out_sync_and_async() -> None:
    release = threading.Event()

    def hangs_in_a_thread(sample):
        release.wait()
        return 1.0

    async def hangs_on_the_loop(sample):
        await asyncio.Event().wait()

    runner = RewardRunner({"sync": hangs_in_a_thread, "async": hangs_on_the_loop}, timeout_s=0.2)
    start = time.perf_counter()
    outcomes = await runner.score(SAMPLES[:4])
    release.set()
    assert time.perf_counter() - start < 1.0
    failures = [failure for outcome in outcomes for failure in outcome.errors]
    assert {(f.function, f.kind) for f in failures} == {("sync", "timeout"), ("async", "timeout")}
    assert "no result within 0.2 s" in failures[0].message
    assert runner.metrics["reward/failures/timeout"] == 8
    assert runner.metrics["reward/abandoned_threads"] == 4


async def test_on_error_fail_raises_every_failure_after_counting() -> None:
    runner = RewardRunner({"mine": raises_key_error}, on_error="fail")
    with pytest.raises(
        RewardError, match=r"8 reward failure\(s\):\n  - reward function 'mine' on sample 's0'"
    ) as info:
        await runner.score(SAMPLES)
    assert len(info.value.failures) == 8
    assert "and 3 more" in str(info.value)
    assert runner.metrics["reward/failures"] == 8


# -- a judge endpoint that is down or slow ------------------------------------------------------------


def stats(server: str) -> dict:
    return httpx.get(f"{server}/stats").json()


def model(**script) -> str:
    """The stub's instructions for a request, written as its model name."""
    return urlencode(script)


def judge_for(server: str, **options) -> LLMJudge:
    options.setdefault("backoff_s", 0.01)
    return LLMJudge(f"{server}/v1", options.pop("model", model()), **options)


def sample(answer: str = "36", id: str = "s0"):
    return make_sample(f"<think>6*6</think><answer>{answer}</answer>", ground_truth="36", id=id)


async def test_runner_counts_a_judge_failure_as_a_reward_failure(judge_url):
    judge = judge_for(judge_url, model=model(text="no idea"))
    runner = RewardRunner({"judge": judge}, on_error="zero")
    [outcome] = await runner.score([sample()])
    assert outcome.score == 0.0 and "no readable score" in outcome.errors[0].message
    assert runner.metrics["reward/failures"] == 1


async def test_retries_server_errors_then_succeeds(judge_url):
    judge = judge_for(judge_url, model=model(fail500=2, score=6))
    assert await judge(sample()) == {"score": 0.6}
    assert stats(judge_url)["requests"] == 3
    assert (judge.usage.retries, judge.usage.requests) == (2, 1)


async def test_429_waits_as_long_as_retry_after_asks(judge_url):
    judge = judge_for(judge_url, model=model(fail429=1, after=0.5, score=9))
    start = time.perf_counter()
    assert await judge(sample()) == {"score": 0.9}
    assert time.perf_counter() - start >= 0.45  # not the 0.01 s backoff
    assert judge.usage.retries == 1


async def test_gives_up_after_the_retries_naming_url_attempts_and_error(judge_url):
    judge = judge_for(judge_url, model=model(fail500=99), max_retries=2)
    with pytest.raises(JudgeError, match=r"127\.0\.0\.1.*failed after 3 attempt.*HTTP 500.*scripted 500"):
        await judge(sample())
    assert stats(judge_url)["requests"] == 3 and judge.usage.failures == 1


async def test_a_hanging_endpoint_times_out_each_attempt(judge_url):
    judge = judge_for(judge_url, model=model(hang=3), timeout_s=0.3, max_retries=1)
    start = time.perf_counter()
    with pytest.raises(JudgeError, match=r"after 2 attempt.*ReadTimeout: no reply within 0.3 s"):
        await judge(sample())
    assert time.perf_counter() - start < 2.0


async def test_an_endpoint_that_is_down_fails_clearly():
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    judge = LLMJudge(f"http://127.0.0.1:{port}/v1", "m", max_retries=1, backoff_s=0.01)
    with pytest.raises(
        JudgeError, match=rf"127\.0\.0\.1:{port}/v1/chat/completions.*2 attempt.*ConnectError"
    ):
        await judge(sample())


async def test_a_body_that_is_not_json_is_an_endpoint_error(judge_url):
    with pytest.raises(JudgeError, match="not JSON.*not json"):
        await judge_for(judge_url, model=model(badjson=1))(sample())


async def test_a_wrong_base_url_is_not_retried_and_says_what_to_fix(judge_url):
    judge = LLMJudge(judge_url, model(), backoff_s=0.01)  # no /v1
    with pytest.raises(JudgeError, match="HTTP 404.*not retried.*ending in /v1"):
        await judge(sample())
    assert judge.usage.retries == 0


# -- the same faults inside a training step -----------------------------------------------------------


async def test_a_raising_reward_in_training_scores_zero_and_is_counted(make_cfg):
    result = await train(make_cfg(reward="raises", grpo__steps=1))
    [row] = read_metrics(result.run_dir)
    assert row["reward/failures"] == 12 and row["reward/mean"] == 0.0
    assert row["groups/zero_variance"] == 3, "all-zero groups carry no signal and are dropped"


async def test_a_nan_reward_with_on_error_fail_stops_the_step_naming_the_function(make_cfg):
    with pytest.raises(RewardError, match=r"(?s)12 reward failure.*reward function 'not_a_number' on sample .*value is nan"):
        await train(make_cfg(reward="not_a_number", reward__on_error="fail", grpo__steps=1))


async def test_a_hanging_reward_in_training_times_out_and_the_step_finishes(make_cfg):
    started = time.perf_counter()
    result = await train(make_cfg(reward="hangs", reward__timeout_s=0.5, grpo__steps=1))
    [row] = read_metrics(result.run_dir)
    assert row["reward/failures"] == 12 and time.perf_counter() - started < 60
