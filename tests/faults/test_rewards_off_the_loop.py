"""Issue 44, findings 11 and 12: reward work never holds the event loop or a worker for nobody.

- 11: the NL2SQL reward ran the model's SQL on the event loop: six slow queries took 12 s one after
  another and the reward runner's 1 s timeout never fired. A synchronous tool call or check inside
  a verified reward now runs in a thread.
- 12: math-verify checks the runner had given up on stayed queued for the pool's workers, and a
  hostile answer's worker computed on, so the next step's correct answer waited and scored 0.
  These tests switch math-verify's answer bounds off (rewards/math_bounds.py, which now refuses the
  tower before any worker sees it) to check the pool itself against an answer the bounds miss.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time

import pytest

from rlfactory_nb.recipes.nl2sql.reward import execution_match
from rlfactory_nb.rewards.math import _verifier, math_verify
from rlfactory_nb.rewards.runner import RewardRunner
from rlfactory_nb.rewards.samples import make_sample

SLOW_SQL = "SELECT count(*) FROM orders a, orders b, orders c, orders d"  # runs to the tool's 2 s limit
HOSTILE = "\\boxed{9^{9^{9^{9}}}}"


@pytest.fixture
def no_bounds(monkeypatch):
    monkeypatch.setattr("rlfactory_nb.rewards.math.refusal", lambda answer: None)


async def longest_stall(work) -> tuple[float, object]:
    """(the longest gap between ticks of a 10 ms ticker while `work` ran, its result)."""
    gaps, last, done = [0.0], time.perf_counter(), False

    async def tick() -> None:
        nonlocal last
        while not done:
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    try:
        result = await work
    finally:
        done = True
        await ticker
    return max(gaps), result


async def test_the_nl2sql_reward_runs_slow_sql_off_the_loop_and_the_runner_timeout_holds() -> None:
    await execution_match(make_sample("<answer>SELECT 1</answer>", ground_truth={"rows": [[1]]}))  # the database is built
    samples = [make_sample(f"<answer>{SLOW_SQL}</answer>", ground_truth={"rows": [[1]]}, id=f"s{i}") for i in range(6)]
    runner = RewardRunner({"sql": execution_match}, timeout_s=1.0)
    started = time.perf_counter()
    stall, outcomes = await longest_stall(runner.score(samples))
    elapsed = time.perf_counter() - started
    assert elapsed < 4, f"six slow queries took {elapsed:.1f} s: they ran one after another on the loop"
    assert [failure.kind for outcome in outcomes for failure in outcome.errors] == ["timeout"] * 6
    assert stall < 0.5, f"the event loop stalled {stall:.2f} s"


async def test_checks_the_runner_gave_up_on_free_their_workers_for_the_next_answers(no_bounds) -> None:
    pool = _verifier()
    try:
        math_verify(make_sample("\\boxed{1}", ground_truth="1"))  # one worker up
        slow = functools.partial(math_verify, timeout_s=20.0)
        hostile = [make_sample(HOSTILE, ground_truth="5", id=f"h{i}") for i in range(pool.max_workers + 2)]
        outcomes = await RewardRunner({"math": slow}, timeout_s=2.0).score(hostile)
        assert {failure.kind for outcome in outcomes for failure in outcome.errors} == {"timeout"}
        deadline = time.monotonic() + 10.0  # they stop within 50 ms; a loaded machine may take longer
        while time.monotonic() < deadline and _reward_threads("math_verify"):
            await asyncio.sleep(0.05)
        assert _reward_threads("math_verify") == [], "abandoned checks are still queued or computing"
        assert pool.live == 0, "the workers computing for nobody were stopped"
        fine = make_sample("<answer>\\frac{5}{12}</answer>", ground_truth="5/12", id="fine")
        started = time.monotonic()
        (outcome,) = await RewardRunner({"math": slow}, timeout_s=30.0).score([fine])
        assert outcome.score == 1.0 and outcome.components["math/timeout"] == 0.0
        assert time.monotonic() - started < 20, "the correct answer waited behind the hostile ones"
    finally:
        pool.close()


async def test_one_hostile_answer_does_not_hold_up_the_others(no_bounds) -> None:
    """Its check holds one worker for its own timeout (two minutes here); the others use the rest."""
    pool = _verifier()
    try:
        math_verify(make_sample("\\boxed{1}", ground_truth="1"))
        hostile_check = functools.partial(math_verify, timeout_s=120.0)
        hostile = asyncio.create_task(
            RewardRunner({"math": hostile_check}, timeout_s=300.0).score([make_sample(HOSTILE, ground_truth="5")])
        )
        await asyncio.sleep(0.5)
        fine = [make_sample(f"<answer>{n}/2</answer>", ground_truth=str(n / 2), id=f"f{n}") for n in range(1, 7)]
        started = time.monotonic()
        outcomes = await RewardRunner({"math": math_verify}, timeout_s=90.0).score(fine)
        assert [outcome.score for outcome in outcomes] == [1.0] * 6
        assert time.monotonic() - started < 90 and not hostile.done(), "the others waited for the hostile check"
        hostile.cancel()
        await asyncio.gather(hostile, return_exceptions=True)
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline and pool.live > pool.max_workers - 1:
            await asyncio.sleep(0.05)
        assert pool.live <= pool.max_workers - 1, "the abandoned hostile check's worker was stopped"
    finally:
        pool.close()


def _reward_threads(name: str) -> list[threading.Thread]:
    """This test's reward threads (`reward:<function>`): another test's deliberately hanging reward
    (a `reward:hangs` thread sleeps on in the same worker process) is not this one's to wait for."""
    return [thread for thread in threading.enumerate() if thread.name == f"reward:{name}" and thread.is_alive()]
