"""Issue 50, item 7: a correct math answer is scored correctly whatever hostile answers share its batch.

Before: twelve answers like `\\boxed{9^{9^{9^{9}}}}` ahead of one correct answer, scored together by
`RewardRunner(timeout_s=30)` with math-verify's pool of two workers, each held a worker for the
check's 5 s timeout and had it killed and restarted (seconds of importing sympy). The batch used the
runner's whole 30 s; on a busy machine the correct answer scored 0 on the runner's timeout (about 10
of 13 calls timed out, 4-5 worker starts, measured on two cores). Now such answers are refused before
any worker sees them (rewards/math_bounds.py): 0 with `refused` 1, in microseconds.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from rlfactory_nb.rewards.math import _verifier, math_verify
from rlfactory_nb.rewards.runner import RewardRunner
from rlfactory_nb.rewards.samples import make_sample
from rlfactory_nb.train.metrics import reward_metrics

pytestmark = pytest.mark.timeout(180)
HOSTILE = [
    "\\boxed{9^{9^{9^{9}}}}",
    "9**9**9**9",
    "\\boxed{10^{-10^{10}}}",
    "\\boxed{2^{3 \\cdot 10^{8}}}",
    "\\boxed{(x+y+z+1)^{30}}",
    "\\boxed{\\sum_{k=1}^{10^{9}} k^{k}}",
]


@pytest.fixture
def busy_machine():
    """Every core busy with a spinning process while the test scores: training's load."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    yield
    for spinner in spinners:
        spinner.kill()
        spinner.wait()


def test_twelve_hostile_answers_ahead_of_a_correct_one_on_a_busy_machine(busy_machine):
    pool = _verifier()
    try:
        math_verify(make_sample("\\boxed{1}", ground_truth="1"))  # a worker up, as after the first step
        started_workers = pool.started
        hostile = [make_sample(HOSTILE[i % len(HOSTILE)], ground_truth="5", id=f"h{i}") for i in range(12)]
        fine = make_sample("<answer>\\frac{5}{12}</answer>", ground_truth="5/12", id="fine")
        runner = RewardRunner({"math": math_verify}, timeout_s=30)
        began = time.monotonic()
        outcomes = runner.score_sync([*hostile, fine])
        elapsed = time.monotonic() - began
        assert (outcomes[-1].score, outcomes[-1].errors) == (1.0, []), "the correct answer lost its score"
        assert elapsed < 15, f"13 answers took {elapsed:.1f} s"
        assert pool.started == started_workers, "a worker was killed and restarted for a hostile answer"
        assert all(o.components == {"math": 0.0, "math/timeout": 0.0, "math/refused": 1.0} for o in outcomes[:-1])
        assert runner.metrics["reward/failures"] == 0 and runner.metrics["reward/abandoned_threads"] == 0
        row = reward_metrics([o.score for o in outcomes], [o.components for o in outcomes])
        assert row["reward/math/refused"] == pytest.approx(12 / 13)  # the step's share, counted
    finally:
        pool.close()


@pytest.mark.parametrize(
    ("answer", "gold"),
    [
        ("\\boxed{2^{10}}", "1024"),
        ("\\boxed{2^{2^{3}}}", "256"),
        ("\\boxed{10^{10^{2}}}", "10^{100}"),
        ("\\boxed{(x+1)^{2}}", "x^2+2x+1"),
        ("\\boxed{e^{-x^2}}", "e^{-x^{2}}"),
        ("\\boxed{\\sum_{k=1}^{n} k}", "\\sum_{k=1}^{n} k"),
        ("\\boxed{5!}", "120"),
    ],
)
def test_answers_with_ordinary_powers_are_still_verified(answer, gold):
    assert math_verify(make_sample(answer, ground_truth=gold)) == {"score": 1.0, "timeout": 0.0, "refused": 0.0}
