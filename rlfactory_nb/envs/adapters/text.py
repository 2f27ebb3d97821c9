"""Text environments, where the model's whole answer is the action: TextArena games and SkyRL-gym.

Both have a `step(text) -> observation, reward, done` contract (TextArena splits it over `step`,
`get_observation` and `close`; SkyRL-gym returns one dict). The model answers without a tool call,
the loop calls `respond(turn)`, and the adapter steps the game with the answer and says back what the
game observed, as the environment's turn (a masked delta, like a tool result):

    agent = rf.Agent(policy, env=textarena_env("GuessTheNumber-v0"))
    agent = rf.Agent(policy, env=skyrl_env("gsm8k_multi_turn"))

Both packages are optional extras (`pip install 'rlfactory-nb[envs]'`); each is imported when an
episode starts, so that this module imports without them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Literal

from rlfactory_nb.envs.base import EnvFactory, Environment, Reset, Response
from rlfactory_nb.errors import ConfigError
from rlfactory_nb.types import Turn

RewardReduce = Literal["sum", "last"]


def textarena_env(env_id: str, *, action: Callable[[Turn], str] | None = None) -> EnvFactory:
    """An Environment factory over a single-player TextArena game (`textarena.make(env_id)`).

    `action(turn)` picks the text sent to the game (default: the answer outside reasoning)."""
    return functools.partial(TextArenaEnvironment, env_id, action)


def skyrl_env(
    env_id: str, *, env_config: Any = None, reward_reduce: RewardReduce = "sum",
    action: Callable[[Turn], str] | None = None,
) -> EnvFactory:
    """An Environment factory over a SkyRL-gym text environment (`skyrl_gym.make(env_id, ...)`).

    The dataset row is the SkyRL row (`messages` or `prompt`, `reward_spec`, `extra_info`, ...) and is
    passed as the environment's `extras`. Step rewards combine by `reward_reduce` ("sum" or "last").
    `action(turn)` picks the text sent (default: the whole generated text, as SkyRL sends it)."""
    return functools.partial(SkyRLEnvironment, env_id, env_config, reward_reduce, action)


def answer_text(turn: Turn) -> str:
    """The turn's answer outside reasoning (its whole text when no family read it)."""
    return turn.answer if turn.answer is not None else turn.text


class TextArenaEnvironment(Environment):
    """One TextArena game per episode, played by the model as player 0."""

    def __init__(self, env_id: str, action: Callable[[Turn], str] | None = None):
        import textarena  # the optional extra, imported where the game is made

        self.env_id = env_id
        self.game = textarena.make(env_id)
        self._action = action or answer_text
        self._seen = ""
        self._rewards: dict[int, float] | None = None
        self._closed = False

    def reset(self, row: dict[str, Any], *, seed: int) -> Reset:
        self.game.reset(num_players=1, seed=seed)
        return Reset(messages=[{"role": "user", "content": self._new_observation()}])

    def respond(self, turn: Turn) -> Response:
        done, _info = self.game.step(self._action(turn))
        said = self._new_observation()
        if not done:
            return Response([{"role": "user", "content": said}])
        self._finish()
        reward = self.reward()
        messages = [{"role": "user", "content": said}] if said else []
        return Response(messages, done=True, reward=reward)  # type: ignore[arg-type]

    def reward(self) -> float | None:
        if self._rewards is None:
            return None
        return float(self._rewards.get(0, 0.0))

    def state(self) -> dict[str, Any] | None:
        game_state = getattr(getattr(self.game, "state", None), "game_state", None)
        return dict(game_state) if isinstance(game_state, dict) else None

    def close(self) -> None:
        if not self._closed:
            self._finish()

    def _finish(self) -> None:
        self._closed = True
        rewards, _game_info = self.game.close()
        self._rewards = {int(k): float(v) for k, v in rewards.items()} if rewards else None

    def _new_observation(self) -> str:
        """What the game said since the model's last turn. TextArena's LLM wrapper repeats the whole
        history in each observation, and echoes the model's move; the model already holds both in its
        context, so only the game's new words are sent."""
        _player, observation = self.game.get_observation()
        text = observation if isinstance(observation, str) else str(observation)
        new = text.removeprefix(self._seen).strip()
        self._seen = text
        own_move, game_marker, after = new.partition("[GAME]")
        if own_move.startswith("[Player]") and game_marker:  # the wrapper echoes the model's move first
            new = game_marker + after
        return new.strip()


class SkyRLEnvironment(Environment):
    """One SkyRL-gym environment per episode; `init` gives the prompt, `step` answers each turn."""

    def __init__(
        self, env_id: str, env_config: Any = None, reward_reduce: RewardReduce = "sum",
        action: Callable[[Turn], str] | None = None,
    ):
        if reward_reduce not in ("sum", "last"):
            raise ConfigError(f"skyrl_env: reward_reduce must be 'sum' or 'last', got {reward_reduce!r}")
        self.env_id = env_id
        self.env_config = env_config
        self.reward_reduce = reward_reduce
        self._action = action or (lambda turn: turn.text)
        self.env: Any = None
        self.step_rewards: list[float] = []

    def reset(self, row: dict[str, Any], *, seed: int) -> Reset:
        import skyrl_gym  # the optional extra, imported where the environment is made

        extras = {"extra_info": {}, **row}
        self.env = skyrl_gym.make(self.env_id, env_config=self.env_config, extras=extras)
        prompt, _metadata = self.env.init(list(row.get("messages") or row.get("prompt") or []))
        return Reset(messages=list(prompt), replace_prompt=True)

    def respond(self, turn: Turn) -> Response:
        out = self.env.step(self._action(turn))
        reward = float(out["reward"])
        self.step_rewards.append(reward)
        messages = [{"role": m.get("role", "user"), "content": str(m["content"])} for m in out["observations"]]
        return Response(messages, done=bool(out["done"]), reward=self.reward())  # type: ignore[arg-type]

    def reward(self) -> float | None:
        if not self.step_rewards:
            return None
        return sum(self.step_rewards) if self.reward_reduce == "sum" else self.step_rewards[-1]

    def state(self) -> dict[str, Any] | None:
        return {"turns": getattr(self.env, "turns", 0), "step_rewards": list(self.step_rewards)}

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
