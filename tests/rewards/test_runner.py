"""RewardRunner: concurrency, timeouts, bad functions and bad values, on_error, metrics."""

from __future__ import annotations

import asyncio
import math
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from rlfactory_nb.config import RewardConfig
from rlfactory_nb.rewards import RewardError, RewardRunner, exact_match, make_sample

SAMPLES = [make_sample(f"<answer>{i}</answer>", ground_truth="1", id=f"s{i}") for i in range(8)]


async def test_scores_with_several_functions_first_is_the_training_reward() -> None:
    runner = RewardRunner({"em": exact_match, "detail": lambda s: {"score": 0.5, "part": 2}})
    outcomes = await runner.score(SAMPLES[:2])
    assert [o.score for o in outcomes] == [0.0, 1.0]
    assert outcomes[1].components == {"em": 1.0, "detail": 0.5, "detail/part": 2.0}
    assert outcomes[1].ok and outcomes[1].sample_id == "s1"
    assert set(outcomes[1].timing_s) == {"em", "detail"}


async def test_turn_scores_come_from_the_first_function() -> None:
    runner = RewardRunner({"process": lambda s: {"score": 1.0, "turn_scores": [0.25, 0.75]}})
    [outcome] = await runner.score(SAMPLES[:1])
    assert outcome.turn_scores == [0.25, 0.75]


async def test_async_functions_run_concurrently() -> None:
    async def slow(sample):
        await asyncio.sleep(0.2)
        return 1.0

    start = time.perf_counter()
    await RewardRunner(slow).score(SAMPLES)
    assert time.perf_counter() - start < 0.6  # 8 x 0.2 s in sequence would be 1.6 s


async def test_sync_functions_run_in_threads_without_blocking_the_loop() -> None:
    def blocking(sample):
        time.sleep(0.2)
        return 1.0

    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    tick_task = asyncio.create_task(ticker())
    start = time.perf_counter()
    await RewardRunner(blocking).score(SAMPLES)
    elapsed = time.perf_counter() - start
    tick_task.cancel()
    assert elapsed < 0.6
    assert ticks >= 10, "the event loop was blocked while sync rewards ran"


async def test_max_concurrency_is_respected() -> None:
    in_flight = peak = 0

    async def counting(sample):
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.02)
        in_flight -= 1
        return 0.0

    await RewardRunner(counting, max_concurrency=3).score(SAMPLES)
    assert peak == 3


def raises_key_error(sample):
    return {"a": 1}["answer"]


async def test_an_exception_names_function_sample_exception_and_line() -> None:
    runner = RewardRunner({"em": exact_match, "mine": raises_key_error})
    outcomes = await runner.score(SAMPLES[:2])
    failure = outcomes[1].errors[0]
    assert (failure.function, failure.sample_id, failure.kind) == ("mine", "s1", "exception")
    assert "raised KeyError: 'answer' (at " in failure.message and "test_runner.py:" in failure.message
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


@pytest.mark.parametrize(
    "value, expected", [(True, 1.0), (3, 3.0), (np.float32(0.5), 0.5), (np.array(2.0), 2.0)]
)
async def test_numbers_of_any_common_type_are_accepted(value: object, expected: float) -> None:
    [outcome] = await RewardRunner(lambda s: value).score(SAMPLES[:1])
    assert outcome.ok and outcome.score == expected and type(outcome.score) is float


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


async def test_samples_without_ids_are_numbered() -> None:
    sample = make_sample("x", id="")
    [outcome] = await RewardRunner(raises_key_error).score([sample])
    assert outcome.sample_id == "#0" and "on sample '#0'" in str(outcome.errors[0])


async def test_metrics_time_each_function_and_reset() -> None:
    async def slow(sample):
        await asyncio.sleep(0.05)
        return 1.0

    runner = RewardRunner({"slow": slow, "em": exact_match})
    await runner.score(SAMPLES[:2])
    metrics = runner.metrics
    assert metrics["reward/calls"] == 4 and metrics["reward/slow/calls"] == 2
    assert 0.05 <= metrics["reward/slow/time_mean_s"] <= metrics["reward/slow/time_max_s"] < 0.5
    runner.reset_metrics()
    assert runner.metrics["reward/calls"] == 0


def test_score_sync_from_plain_code() -> None:
    outcomes = RewardRunner(exact_match).score_sync(SAMPLES[:2])
    assert [o.score for o in outcomes] == [0.0, 1.0]


JUPYTER_LIKE = """
import asyncio
from rlfactory_nb.rewards import RewardRunner, exact_match, make_sample

async def cell():  # a notebook cell runs inside the kernel's running loop
    samples = [make_sample("<answer>1</answer>", ground_truth="1"), make_sample("2", ground_truth="1")]
    print([o.score for o in RewardRunner(exact_match).score_sync(samples)])

asyncio.run(cell())
"""


def test_score_sync_inside_a_running_loop_like_jupyter() -> None:
    # A subprocess, because nest_asyncio patches asyncio for the whole process.
    done = subprocess.run(
        [sys.executable, "-c", JUPYTER_LIKE], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[1.0, 0.0]"


def test_from_config_loads_the_named_function() -> None:
    runner = RewardRunner.from_config(RewardConfig(on_error="fail", timeout_s=5.0))
    assert list(runner.functions) == ["exact_match"]
    assert runner.on_error == "fail" and runner.timeout_s == 5.0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"on_error": "skip"}, 'on_error must be "zero" or "fail"'),
        ({"timeout_s": 0}, "timeout_s > 0"),
        ({"max_concurrency": 0}, "max_concurrency >= 1"),
    ],
)
def test_bad_settings_are_rejected(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RewardRunner(exact_match, **kwargs)


def test_non_callable_function_is_named() -> None:
    with pytest.raises(TypeError, match="reward function 'em' is a str"):
        RewardRunner({"em": "exact_match"})
