"""examples/guess: the number-guessing game where the environment answers "Higher." or "Lower.", the
rows built offline, and the warm-start's teacher games; whole episodes through the real loop with a
ScriptedEngine over the tiny preset's real tokenizer."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

import rlfactory_nb as rf
from rlfactory_nb.engines.testing import ScriptedEngine
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.recipes.guess.data import EXPLORE_SHARE, SPLITS, WIDTH, drawn, exploring, rows
from rlfactory_nb.recipes.guess.env import MAX_GUESSES, Guess, NarrowingGuess
from rlfactory_nb.recipes.guess.preset import teacher_game
from rlfactory_nb.types import Turn

DATA = Path(__file__).resolve().parents[2] / "examples" / "guess" / "data"


def said(text: str) -> Turn:
    return Turn(text=text, answer=text)


def test_the_shipped_rows_are_what_the_seeds_build():
    for split, (seed, count) in SPLITS.items():
        shipped = [json.loads(line) for line in (DATA / f"{split}.jsonl").read_text().splitlines()]
        assert shipped == rows(seed, count)
        assert all(r["low"] <= r["secret"] <= r["high"] == r["low"] + WIDTH - 1 <= 9 for r in shipped)
    ranges = [json.loads(line) for line in (DATA / "train_ranges.jsonl").read_text().splitlines()]
    assert ranges == [drawn(row) for row in rows(*SPLITS["train"])]
    assert all(row["draw_secret"] and "ground_truth" not in row for row in ranges)
    explore = [json.loads(line) for line in (DATA / "train_explore.jsonl").read_text().splitlines()]
    assert explore == exploring(ranges, EXPLORE_SHARE)
    openings = [row for row in explore if "opening" in row]
    assert 0.25 < len(openings) / len(explore) < 0.42  # a third, drawn
    assert all(row["low"] <= row["opening"][0] <= row["high"] for row in openings)
    assert {row["opening"][0] - row["low"] for row in openings} == set(range(WIDTH))  # every opening


def test_an_exploring_start_plays_the_rows_opening_before_the_first_turn():
    env = Guess()
    secrets = set()
    for seed in range(40):
        start = env.reset({"low": 2, "high": 8, "secret": 2, "draw_secret": True, "opening": [5]}, seed=seed)
        hint = "Higher." if env.secret > 5 else "Lower."
        assert start.messages == [{"role": "assistant", "content": "5"}, {"role": "user", "content": hint}]
        assert env.state() == {"range": [2, 8], "guesses": [5], "hints": [hint[:-1].lower()], "solved": False}
        secrets.add(env.secret)
    assert secrets == {2, 3, 4, 6, 7, 8}  # never the opening: the game is still on
    env.reset({"low": 2, "high": 8, "draw_secret": True, "opening": [5]}, seed=0)
    assert env.allowed == ((6, 8) if env.secret > 5 else (2, 4))
    assert env.respond(said(str(env.secret))).done and env.reward() == pytest.approx(0.9)  # found on the 2nd guess
    assert env.reset({"low": 1, "high": 7}, seed=3) is None
    with pytest.raises(ValueError, match="opening"):
        env.reset({"low": 1, "high": 7, "secret": 4, "opening": [4]}, seed=0)


def test_the_game_answers_higher_lower_and_pays_for_few_guesses():
    env = Guess(max_guesses=4)
    env.reset({"low": 10, "high": 17, "secret": 13}, seed=0)
    assert env.respond(said("I say 11")).messages[0]["content"] == "Higher."
    assert env.respond(said("maybe 15?")).messages[0]["content"] == "Lower."
    nothing = env.respond(said("no idea"))
    assert nothing.messages[0]["content"] == "Answer with one number from 10 to 17." and not nothing.done
    found = env.respond(said("13"))
    assert found.done and found.reward == env.reward() == pytest.approx(0.7)
    assert env.state() == {"range": [10, 17], "guesses": [11, 15, None, 13], "hints": ["higher", "lower", "none"], "solved": True}


def test_a_game_ends_when_the_guesses_run_out_and_the_seed_draws_the_secret():
    env = Guess()
    assert MAX_GUESSES == 3  # bisection over seven numbers needs three
    env.reset({"low": 1, "high": 7, "secret": 7}, seed=0)
    responses = [env.respond(said("1")) for _ in range(MAX_GUESSES)]
    assert [r.done for r in responses] == [False] * (MAX_GUESSES - 1) + [True]
    assert responses[-1].messages[0]["content"] == "Out of guesses: it was 7."
    assert env.reward() == pytest.approx(0.067)  # a lost game: 0.2 x the one guess of three that kept to the hints
    env.reset({"low": 1, "high": 7, "secret": 7}, seed=0)
    for guess in ("4", "6", "9"):
        env.respond(said(guess))
    assert env.reward() == pytest.approx(0.133)  # 9 is out of the range the hints left
    secrets = set()
    for seed in range(20):
        env.reset({"low": 1, "high": 7}, seed=seed)
        secrets.add(env.secret)
    assert len(secrets) > 3 and secrets <= set(range(1, 8))
    asked = set()  # a row that keeps a secret for other players but asks for a drawn one
    for seed in range(20):
        env.reset({"low": 1, "high": 7, "secret": 7, "draw_secret": True}, seed=seed)
        asked.add(env.secret)
    assert asked == secrets


def test_the_narrowing_game_pays_each_guess_for_what_it_rules_out_and_scores_as_the_game():
    env = NarrowingGuess()
    env.reset({"low": 2, "high": 8, "secret": 7}, seed=0)
    assert env.respond(said("4")).reward == 0.214  # 0.5 x 3/7: whatever the reply, 5-8 could be left
    assert env.respond(said("9")).reward == 0.0  # outside what the hints allow: rules nothing out
    last = env.respond(said("7"))
    assert last.done and last.reward == env.reward() == pytest.approx(0.8)  # the score is the game's
    plain = Guess()
    plain.reset({"low": 2, "high": 8, "secret": 7}, seed=0)
    assert plain.respond(said("5")).reward is None


def test_the_teacher_keeps_to_the_hints():
    rng = random.Random(0)
    for row in rows(5, 200):
        game = teacher_game(rng, row)
        low, high = row["low"], row["high"]
        guesses = [int(m["content"]) for m in game if m["role"] == "assistant"]
        hints = [m["content"] for m in game[1:] if m["role"] == "user"]
        for guess, hint in zip(guesses, hints, strict=False):
            assert low <= guess <= high
            low, high = (guess + 1, high) if hint == "Higher." else (low, guess - 1)
        assert len(guesses) <= MAX_GUESSES and game[-1]["role"] == "assistant"


async def test_a_bisecting_player_through_the_loop_is_paid_and_hints_are_masked():
    tokenizer = build_tokenizer()

    def bisect(prompt: str) -> str:
        low, high = map(int, re.search(r"from (\d+) to (\d+)", prompt).groups())
        for guess, hint in re.findall(r"(\d+)<\|im_end\|>\s*<\|im_start\|>user\n(Higher|Lower)\.", prompt):
            low, high = (int(guess) + 1, high) if hint == "Higher" else (low, int(guess) - 1)
        return str((low + high) // 2)

    agent = rf.Agent(None, tokenizer=tokenizer, engine=ScriptedEngine(tokenizer, bisect), env=Guess, max_turns=3)
    heldout = rows(*SPLITS["heldout"])[:16]
    trajectories = [await agent.rollout(row) for row in heldout]
    rewards = [t.metadata["env_reward"] for t in trajectories]
    assert all(r >= 0.8 for r in rewards)  # bisection over 7 numbers needs at most 3 guesses
    assert any(r < 1.0 for r in rewards)
    trained = tokenizer.decode([i for t in trajectories for i, m in zip(t.response_ids, t.loss_mask, strict=True) if m])
    assert "Higher" not in trained and "Lower" not in trained

    middle = heldout[0]["low"] + WIDTH // 2
    opened = await agent.rollout({**heldout[0], "draw_secret": True, "opening": [middle]})
    prompt = tokenizer.decode(opened.prompt_ids)
    assert prompt.endswith(opened.metadata["env_state"]["hints"][0].capitalize() + ".<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert opened.metadata["env_state"]["guesses"] == [middle]  # the state the first turn starts from
    assert len(opened.turns) <= MAX_GUESSES - 1 and opened.metadata["env_reward"] >= 0.8  # bisection still finds it
