"""The guessing game's `opening` row field (an exploring start) from hostile rows: every bad value is a
DatasetError naming the field, at once, and through the real loop the episode ends as a reset failure
that says so, while a good row beside it plays."""

from __future__ import annotations

import time

import pytest

import rlfactory_nb as rf
from rlfactory_nb.engines.testing import ScriptedEngine
from rlfactory_nb.errors import DatasetError
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.recipes.guess.env import Guess

PROMPT = [{"role": "user", "content": "I picked a number from 1 to 7. Guess it: answer with one number."}]


@pytest.mark.parametrize(
    "opening",
    ["4", "44", None, 4, [4.0], [True], ["4"], [[4]], [0], [8], [-1], [10**100], [1, 2, 3], list(range(10**6)), {"4": 4}],
    ids=["str", "digits", "none", "int", "float", "bool", "str-item", "nested", "below", "above", "negative", "huge", "too-many", "million", "dict"],
)
def test_a_bad_opening_is_a_dataset_error_naming_the_field(opening):
    started = time.perf_counter()
    with pytest.raises(DatasetError, match="opening"):
        Guess().reset({"low": 1, "high": 7, "draw_secret": True, "opening": opening}, seed=0)
    assert time.perf_counter() - started < 1.0


def test_an_opening_on_the_rows_fixed_secret_says_to_draw_it():
    with pytest.raises(DatasetError, match="draw_secret"):
        Guess().reset({"low": 1, "high": 7, "secret": 4, "opening": [4]}, seed=0)


async def test_through_the_loop_the_bad_rows_episode_fails_at_reset_and_the_good_one_plays():
    tokenizer = build_tokenizer()
    agent = rf.Agent(None, tokenizer=tokenizer, engine=ScriptedEngine(tokenizer, lambda prompt: "4"), env=Guess, max_turns=3)
    bad = await agent.rollout({"messages": PROMPT, "low": 1, "high": 7, "draw_secret": True, "opening": "4"})
    good = await agent.rollout({"messages": PROMPT, "low": 1, "high": 7, "secret": 4})
    assert bad.metadata["env_error"]["kind"] == "reset" and "opening" in bad.metadata["env_error"]["message"]
    assert not bad.turns
    assert good.metadata["env_reward"] == 1.0
