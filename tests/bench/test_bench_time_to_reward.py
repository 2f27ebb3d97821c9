"""bench/time_to_reward.py and its trainers (bench/_race.py): the guessing game as a TRL
environment plays by the game's rules and reward, the tiny-calculator's tool spec and chat text reach
TRL unchanged, the section's ratio counts a run that missed the target as a bound, and (slow) one
tiny run of each trainer writes its curve."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import time_to_reward
from bench._race import GuessGame, guess_reward

HAS_TRL = importlib.util.find_spec("trl") is not None
needs_trl = pytest.mark.skipif(not HAS_TRL, reason="TRL is not installed (the bench extra)")


def _game(secret: int, low: int = 1) -> GuessGame:
    game = GuessGame()
    game.reset(messages=[], low=low, high=low + 6, secret=secret)
    return game


def test_the_guess_tool_gives_the_games_hints_and_reward():
    game = _game(5)
    assert game.guess(4) == "Higher."
    assert game.guess(6) == "Lower."
    # the third guess is the completion's final answer, played when the game is still on
    completion = [{"role": "assistant", "content": "5"}]
    assert guess_reward([completion], environments=[game]) == [pytest.approx(0.8)]
    assert game.guess(5) == "The game is over."


def test_the_trl_game_plays_each_rows_own_secret_on_the_examples_draw_secret_rows():
    """TRL gives the row, no episode seed: a row that asks our loop to draw (the example's
    train_ranges.jsonl) still plays its own secret there, not one drawn from seed 0 for every row."""
    for secret in range(1, 8):
        game = GuessGame()
        game.reset(messages=[], low=1, high=7, secret=secret, draw_secret=True)
        assert game.game.secret == secret


def test_a_final_answer_after_the_game_ended_is_not_played_again():
    game = _game(3, low=3)
    assert game.guess(3) == "Correct!"
    assert guess_reward([[{"role": "assistant", "content": "9"}]], environments=[game]) == [1.0]


def test_a_model_that_never_calls_the_tool_plays_one_guess():
    lost, won = _game(7), _game(2)
    rewards = guess_reward([[{"role": "assistant", "content": "4"}], [{"role": "assistant", "content": "2"}]], environments=[lost, won])
    assert rewards == [pytest.approx(0.2), 1.0]  # a lost game keeps the hint credit (in range: 0.2)


@needs_trl
def test_trl_renders_the_presets_tool_spec_and_chat_text_unchanged():
    from bench._race import calculator_tool, trl_tokenizer
    from rlfactory_nb.models.policy import Policy
    from rlfactory_nb.models.presets.calculator import CALCULATOR_TOOL

    ours = Policy.load("tiny-calculator", device="cpu", log=lambda _: None).tokenizer
    theirs = trl_tokenizer(Policy.load("tiny-calculator", device="cpu", log=lambda _: None))
    tool_call = {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "123+456"}}}
    conversation = [
        {"role": "user", "content": "What is 123+456?"},
        {"role": "assistant", "content": "", "tool_calls": [tool_call]},
        {"role": "tool", "name": "calculator", "content": "579"},
    ]
    for messages in (conversation[:1], conversation):
        expected = ours.apply_chat_template(messages, tools=[CALCULATOR_TOOL], tokenize=False, add_generation_prompt=True, enable_thinking=False)
        got = theirs.apply_chat_template(messages, tools=[calculator_tool()], tokenize=False, add_generation_prompt=True, enable_thinking=False)
        assert got == expected
    assert calculator_tool()(expression="12*(3+4)") == "84"


def _record(trainer: str, seed: int, reached: float | None, train_s: float) -> dict:
    curve = [{"step": 0, "train_s": 0.0, "greedy": 0.5, "sampled": 0.4, "eval_s": 3.0}]
    if reached is not None:
        curve.append({"step": 8, "train_s": reached, "greedy": 0.95, "sampled": 0.8, "eval_s": 3.0})
    return {"task": "calculator", "trainer": trainer, "seed": seed, "target": 0.9, "cap_s": 300.0,
            "reached_s": reached, "train_s": train_s, "steps": 8, "curve": curve, "seconds_by_key": {}}


def test_the_ratio_is_a_bound_when_trl_misses_the_target():
    records = [_record("ours", 0, 100.0, 100.0), _record("trl", 0, None, 300.0),
               _record("ours", 1, 140.0, 140.0), _record("trl", 1, 250.0, 250.0)]
    text = time_to_reward.ratio_text(records, "calculator")
    assert text.startswith("ours / TRL <= 0.44")
    both = [_record("ours", 0, 100.0, 100.0), _record("trl", 0, 400.0, 400.0)]
    assert time_to_reward.ratio_text(both, "calculator").startswith("ours / TRL = 0.25")
    assert "not reached by 300 s (best 0.500)" in time_to_reward.reached_text(_record("trl", 0, None, 300.0))


@pytest.mark.slow
@needs_trl
@pytest.mark.parametrize("trainer", ["ours", "trl"])
def test_one_tiny_run_of_each_trainer_writes_its_curve(trainer, tmp_path):
    import asyncio

    from bench import _race

    if trainer == "ours":
        record = asyncio.run(_race.run_ours("guess", 0, 0.0, 1, str(tmp_path), target=2.0))
    else:
        record = _race.run_trl("guess", 0, 0.0, 1, str(tmp_path), target=2.0)
    assert record["steps"] == 1 and record["reached_s"] is None
    assert [point["step"] for point in record["curve"]] == [0, 1]
    assert 0.0 < record["curve"][0]["greedy"] <= 1.0 and record["train_s"] > 0
