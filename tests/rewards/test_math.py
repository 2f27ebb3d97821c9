"""math_verify and gsm8k on outputs shaped like real models': reasoning, boxed or tagged answers,
GSM8K solutions; a hostile answer is stopped at the timeout, scored 0 and counted."""

import functools
import threading
import time

import pytest

from rlfactory_nb.rewards import RewardRunner, gsm8k, gsm8k_answer, math_verify
from rlfactory_nb.rewards.samples import make_sample
from rlfactory_nb.train.metrics import reward_metrics

QWEN_MATH = (
    "<think>\nThe sum of the roots of x^2 - 5x + 6 is 5 and the product is 6, so the mean of the "
    "reciprocals is (1/2 + 1/3)/2. Maybe \\boxed{5}? No: 5/6 divided by 2.\n</think>\n\n"
    "The roots are $2$ and $3$, so the mean of their reciprocals is "
    "$\\frac{1}{2}\\left(\\frac{1}{2}+\\frac{1}{3}\\right) = \\boxed{\\dfrac{5}{12}}$."
)


@pytest.mark.parametrize(
    ("text", "gold", "score"),
    [
        (QWEN_MATH, "\\frac{5}{12}", 1.0),  # the boxed answer, not the draft inside reasoning
        (QWEN_MATH, "5", 0.0),
        ("<answer>0.416667</answer>", "5/12", 1.0),  # math-verify compares decimals to 6 places
        ("<answer>0.42</answer>", "5/12", 0.0),
        ("Area: $\\boxed{12\\pi \\text{ cm}^2}$", "12\\pi", 1.0),  # units off
        ("<answer>\\frac{\\sqrt{2}}{2}</answer>", "\\sqrt{2}/2", 1.0),
        ("So $x \\in \\boxed{(1, 3]}$", "(1,3]", 1.0),
        ("The answer is $\\boxed{1,000}$", "1000", 1.0),
        ("<answer>I could not solve it.</answer>", "7", 0.0),
    ],
)
def test_math_verify_compares_the_final_answer_as_mathematics(text, gold, score):
    assert math_verify(make_sample(text, ground_truth=gold)) == {"score": score, "timeout": 0.0, "refused": 0.0}


@pytest.mark.timeout(120)
def test_a_hanging_check_in_the_runner_is_stopped_scored_zero_and_counted(monkeypatch):
    """Through the reward runner, whose sync rewards run in threads (where signal-based timeouts fail).
    The answer bounds are off, so the tower reaches a worker, as an answer they miss would."""
    monkeypatch.setattr("rlfactory_nb.rewards.math.refusal", lambda answer: None)
    reward = functools.partial(math_verify, timeout_s=1.0)
    runner = RewardRunner({"math": reward}, on_error="fail", timeout_s=60)
    math_verify(make_sample("\\boxed{1}", ground_truth="1"))  # workers up before the clock starts
    samples = [
        make_sample("\\boxed{9^{9^{9^{9}}}}", ground_truth="5", id="hostile"),
        make_sample(QWEN_MATH, ground_truth="5/12", id="fine"),
    ]
    started = time.monotonic()
    hostile, fine = runner.score_sync(samples)
    assert time.monotonic() - started < 10
    assert (hostile.score, hostile.components) == (0.0, {"math": 0.0, "math/timeout": 1.0, "math/refused": 0.0})
    assert (fine.score, fine.components) == (1.0, {"math": 1.0, "math/timeout": 0.0, "math/refused": 0.0})
    assert runner.metrics["reward/failures"] == 0
    row = reward_metrics([hostile.score, fine.score], [hostile.components, fine.components])
    assert row["reward/math/timeout"] == 0.5  # the step's share of checks that ran out of time


def test_math_verify_works_outside_the_main_thread():
    results = []
    thread = threading.Thread(
        target=lambda: results.append(math_verify(make_sample("<answer>1/2</answer>", ground_truth="0.5")))
    )
    thread.start()
    thread.join()
    assert results == [{"score": 1.0, "timeout": 0.0, "refused": 0.0}]


GSM8K_SOLUTION = (
    "Janet's ducks lay 16 eggs per day. She eats three for breakfast and bakes muffins with four, so "
    "she uses 3 + 4 = <<3+4=7>>7 eggs.\nShe sells 16 - 7 = <<16-7=9>>9 eggs at $2 each.\n"
    "She makes 9 * 2 = $<<9*2=18>>18 every day at the farmers' market.\n#### 18"
)


@pytest.mark.parametrize(
    ("text", "strict", "flexible"),
    [
        ("16 - 3 - 4 = 9 eggs, 9 * 2 = 18.\n#### 18", 1.0, 1.0),
        ("She makes 9 * $2 = $18 every day.\n#### 18.", 1.0, 1.0),
        ("She makes 9 * $2 = $18 every day.\n#### $18", 0.0, 1.0),  # strict wants a number after ####
        ("She sells 9 eggs for $2 each, so she makes $18 a day.", 0.0, 1.0),  # no #### line
        ("#### 18\nWait, she also eats 2 more, so 7 * 2 = 14.", 1.0, 0.0),  # flexible: the last number
        ("She makes 18.0 dollars.\n#### 18.0", 0.0, 0.0),  # string match, as published scorers do
    ],
)
def test_gsm8k_strict_and_flexible_read_the_answer_as_verl_and_lm_eval_do(text, strict, flexible):
    sample = make_sample(f"<think>Let me add it up.</think>{text}", ground_truth=GSM8K_SOLUTION)
    assert gsm8k(sample) == strict
    assert gsm8k(sample, method="flexible") == flexible


def test_gsm8k_gold_may_be_the_bare_number_and_the_reasoning_is_not_read():
    sample = make_sample("<think>#### 1,234</think>The total is 1,234 apples.", ground_truth="1234")
    assert gsm8k(sample) == 0.0 and gsm8k(sample, method="flexible") == 1.0
    assert gsm8k_answer("It costs -$5.") is None and gsm8k_answer("It costs -5.", "flexible") == "-5"
    with pytest.raises(ValueError, match='"strict" or "flexible"'):
        gsm8k(sample, method="loose")
