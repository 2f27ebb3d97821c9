"""The text-game and TRL-style adapters against the real packages (textarena, skyrl-gym) and a class
written the TRL way: reset, tools, respond, reward, state and close, driven as the rollout loop does."""

from __future__ import annotations

import asyncio

import pytest

import rlfactory_nb as rf
from rlfactory_nb.data.objects import RunObjects
from rlfactory_nb.engines.testing import ScriptedEngine
from rlfactory_nb.envs import env_factory
from rlfactory_nb.envs.adapters import TRLEnvironment, skyrl_env, textarena_env, trl_env
from rlfactory_nb.envs.base import Reset
from rlfactory_nb.errors import ArgumentTypeError
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.types import ToolCall, Turn


def said(text: str) -> Turn:
    return Turn(text=text, answer=text)


# --- TextArena ---------------------------------------------------------------------------------


def test_textarena_guess_the_number_is_played_to_a_win_by_binary_search():
    pytest.importorskip("textarena")
    env = textarena_env("GuessTheNumber-v0")()
    opening = env.reset({"messages": []}, seed=7)
    assert isinstance(opening, Reset)
    assert "Guess The Number" in opening.messages[0]["content"]
    low, high = 1, 20
    response = None
    for _ in range(10):
        guess = (low + high) // 2
        response = env.respond(said(f"My guess is [{guess}]"))
        if response.done:
            break
        hint = response.messages[0]["content"]
        # only what the game said since the last move, not the whole history again
        assert "You are Player 0" not in hint
        if "higher" in hint:
            low = guess + 1
        else:
            assert "lower" in hint, hint
            high = guess - 1
    assert response is not None and response.done
    assert response.reward == 1.0 and env.reward() == 1.0
    assert env.state()["game_number"] == guess
    env.close()  # after the game ended: a second close of the game is not attempted


def test_textarena_episode_closed_early_has_no_reward_and_invalid_moves_are_answered():
    pytest.importorskip("textarena")
    env = textarena_env("GuessTheNumber-v0")()
    env.reset({"messages": []}, seed=1)
    response = env.respond(said("I refuse to guess"))
    assert not response.done
    assert response.messages[0]["role"] == "user"
    assert response.messages[0]["content"].startswith("[GAME] You attempted an invalid move")  # no echo of the move
    env.close()
    assert env.reward() is None  # the game had not ended: no winner, no reward


def test_textarena_same_seed_same_game():
    pytest.importorskip("textarena")
    targets = []
    for _ in range(2):
        env = textarena_env("GuessTheNumber-v0")()
        env.reset({"messages": []}, seed=11)
        targets.append(env.state()["game_number"])
        env.close()
    assert targets[0] == targets[1]


# --- SkyRL-gym ---------------------------------------------------------------------------------


def skyrl_row(answer: str) -> dict:
    return {
        "messages": [{"role": "user", "content": "Natalia sold 48 clips in April and half as many in May. Total?"}],
        "reward_spec": {"method": "rule", "ground_truth": answer},
        "extra_info": {"max_turns": 3},
    }


def test_skyrl_gsm8k_multi_turn_gives_turn_rewards_and_ends_when_correct():
    pytest.importorskip("skyrl_gym")
    env = skyrl_env("gsm8k_multi_turn")()
    opening = env.reset(skyrl_row("72"), seed=0)
    assert opening.replace_prompt and opening.messages[0]["content"].startswith("Natalia")
    wrong = env.respond(said("48 + 24 = 71\n#### 71"))
    assert not wrong.done
    assert wrong.messages and wrong.messages[0]["role"] == "user" and "####" in wrong.messages[0]["content"]
    assert 0 < wrong.reward < 0.2  # format credit only
    right = env.respond(said("48 + 24 = 72\n#### 72"))
    assert right.done
    assert right.reward == pytest.approx(1.0 + wrong.reward)  # summed over the turns
    assert env.state()["step_rewards"] == [pytest.approx(wrong.reward), 1.0]
    env.close()


def test_skyrl_single_turn_gsm8k_and_last_reward():
    pytest.importorskip("skyrl_gym")
    env = skyrl_env("gsm8k", reward_reduce="last")()
    env.reset(skyrl_row("72"), seed=0)
    response = env.respond(said("#### 72"))
    assert response.done and env.reward() == 1.0
    env.close()
    with pytest.raises(ValueError, match="reward_reduce"):
        skyrl_env("gsm8k", reward_reduce="mean")()


# --- TRL-style classes ---------------------------------------------------------------------------


class Counter:
    """Written the TRL way: no base class, reset(**kwargs), documented public methods are tools."""

    closed = 0

    def __init__(self):
        self.value = 0
        self.target = None

    def reset(self, target: int, **kwargs) -> str:
        self.value = 0
        self.target = target
        return f"Reach {target}."

    def increment(self, a: int) -> int:
        """Increment the counter.

        Args:
            a: how much to add
        """
        self.value += a
        return self.value

    def undocumented(self) -> None:
        self.value = -1

    @property
    def doubled(self) -> int:
        """Not a tool (a property), and never evaluated when tools are listed."""
        raise AssertionError("a property was read")

    def _private(self) -> str:
        """Not a tool."""
        return "no"

    def close(self) -> None:
        Counter.closed += 1


def test_trl_class_unchanged_tools_reset_and_reward():
    factory = trl_env(Counter, reward=lambda counter: float(counter.value == counter.target))
    env = factory()
    assert [spec.name for spec in env.tool_specs()] == ["increment"]
    assert env.tool_specs()[0].input_schema["properties"]["a"] == {"type": "integer", "description": "how much to add"}
    row = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Count."}], "target": 5}
    opening = env.reset(row, seed=3)
    assert opening.replace_prompt
    assert opening.messages[-1] == {"role": "user", "content": "Count.\n\nReach 5."}
    assert row["messages"][-1]["content"] == "Count."  # the row is not changed
    results = asyncio.run(env.call_tools([ToolCall("increment", {"a": 2}), ToolCall("increment", {"a": 3})]))
    assert [r.content for r in results] == ["2", "5"]
    assert asyncio.run(env.call_tools([ToolCall("undocumented", {})]))[0].status == "unknown_tool"
    assert asyncio.run(env.call_tools([ToolCall("increment", {"b": 1})]))[0].status == "invalid_args"
    assert env.reward() == 1.0
    assert env.state() == {"value": 5, "target": 5}
    before = Counter.closed
    env.close()
    assert Counter.closed == before + 1


def test_trl_instances_are_separate_and_own_reward_method_is_not_a_tool():
    class Scored(Counter):
        def reward(self) -> float:
            """The score."""
            return float(self.value)

    factory = trl_env(Scored)
    first, second = factory(), factory()
    asyncio.run(first.call_tools([ToolCall("increment", {"a": 4})]))
    assert first.reward() == 4.0 and second.reward() == 0.0
    assert "reward" not in [s.name for s in first.tool_specs()]


def test_trl_reset_without_arguments_or_return():
    class Plain:
        def reset(self):
            self.started = True

    env = trl_env(Plain)()
    assert env.reset({"messages": [{"role": "user", "content": "hi"}], "other": 1}, seed=0) is None
    assert env.inner.started and env.tool_specs() == []
    with pytest.raises(TypeError, match="factory"):
        trl_env(Plain())


# --- TRL classes as TRL users write them, passed as env= unchanged ------------------------------


class IncrementEnv:
    """TRL's docs' example, as written there: reset() with no arguments, one documented tool."""

    def __init__(self):
        self._counter = 0

    def reset(self) -> None:
        self._counter = 0

    def increment(self, a: int) -> int:
        """
        Increment the integer by a specified value

        Args:
            a: The value to increment by

        Returns:
            The incremented integer.
        """
        self._counter += a
        return self._counter

    def get_reward(self) -> float:
        return float(self._counter == 3)


class Game2048Env:
    """After the 2048 game of TRL's GRPO example scripts (abridged): no __init__, reset(**kwargs) returns the
    board, one tool, private helpers, and a `get_reward` that owns the reward (async, as TRL allows)."""

    def reset(self, **kwargs) -> str:
        self.board = [[2, 2, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
        self.score = 0.0
        return self._render()

    def move(self, direction: str) -> str:
        """
        Play one move in 2048.

        Args:
            direction: One of "up", "down", "left", "right".

        Returns:
            Environment feedback after the move.
        """
        if direction.strip().lower() == "left" and self.board[0][:2] == [2, 2]:
            self.board[0] = [4, 0, 0, 0]
            self.score += 4
        return f"score={self.score}\n{self._render()}"

    async def get_reward(self) -> float:
        return self.score

    def _render(self) -> str:
        return "\n".join(" ".join(f"{v:3d}" for v in row) for row in self.board)


def test_a_trl_class_is_wrapped_with_trl_env_wherever_an_env_is_given():
    tokenizer = build_tokenizer()
    made = [
        env_factory(IncrementEnv)(),
        env_factory("tests.envs.test_adapters:IncrementEnv")(),  # a config's rollout.env
        RunObjects.of(env=IncrementEnv).env(),  # what train_sync, launch and evaluate are given
        rf.Agent(None, tokenizer=tokenizer, engine=ScriptedEngine(tokenizer, []), env=IncrementEnv).episodes.factory(),
    ]
    for env in made:
        assert isinstance(env, TRLEnvironment) and type(env.inner).__name__ == "IncrementEnv"
        assert [spec.name for spec in env.tool_specs()] == ["increment"]  # get_reward is TRL's, not a tool
    assert env_factory(Counter)().inner.__class__ is Counter
    assert env_factory(trl_env(Counter)) is not None  # already wrapped: kept as it is


def test_a_class_that_is_neither_an_environment_nor_trl_style_is_refused_naming_trl_env():
    class NoReset:
        def move(self, direction: str) -> str:
            """Move."""
            return direction

    class NeedsUrl(IncrementEnv):
        def __init__(self, url: str):
            self.url = url

    with pytest.raises(ArgumentTypeError, match=r"no reset\(\) method.*trl_env\(NoReset\)"):
        env_factory(NoReset)
    with pytest.raises(ArgumentTypeError, match=r"needs url.*trl_env\(lambda: NeedsUrl"):
        env_factory(NeedsUrl)
    with pytest.raises(ArgumentTypeError, match=r"not an instance.*env=IncrementEnv rather than env=IncrementEnv\(\)"):
        env_factory(IncrementEnv())


def test_trl_get_reward_is_the_episode_reward_sync_or_async():
    env = trl_env(IncrementEnv)()
    env.reset({"messages": []}, seed=0)
    assert env.reward() == 0.0
    asyncio.run(env.call_tools([ToolCall("increment", {"a": 3})]))
    assert env.reward() == 1.0
    game = trl_env(Game2048Env)()
    opening = game.reset({"messages": [{"role": "user", "content": "Play 2048."}]}, seed=0)
    assert opening.messages[-1]["content"].startswith("Play 2048.\n\n  2   2")
    assert [spec.name for spec in game.tool_specs()] == ["move"]
    [moved] = asyncio.run(game.call_tools([ToolCall("move", {"direction": "left"})]))
    assert moved.content.startswith("score=4.0")
    assert asyncio.run(game.reward()) == 4.0  # async get_reward: the episode awaits what reward() returns
    assert trl_env(IncrementEnv, reward=lambda inner: 0.5)().reward() == 0.5  # an explicit reward wins
