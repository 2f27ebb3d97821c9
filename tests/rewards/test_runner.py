"""RewardRunner: concurrency, metrics, settings. Functions that raise, hang or return NaN and the
on_error policy are fault cases: tests/faults/test_rewards.py."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import numpy as np
import pytest

from rlfactory_nb.config_sections import RewardConfig
from rlfactory_nb.rewards import RewardRunner, exact_match, make_sample

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


@pytest.mark.parametrize(
    "value, expected", [(True, 1.0), (3, 3.0), (np.float32(0.5), 0.5), (np.array(2.0), 2.0)]
)
async def test_numbers_of_any_common_type_are_accepted(value: object, expected: float) -> None:
    [outcome] = await RewardRunner(lambda s: value).score(SAMPLES[:1])
    assert outcome.ok and outcome.score == expected and type(outcome.score) is float


def raises_key_error(sample):
    return {"a": 1}["answer"]


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
