"""The number-guessing game as an OpenEnv MCP environment: a real OpenEnv server the project talks to.

This module runs in the OpenEnv venv (`.venv-openenv`, made by scripts/install_openenv.sh), never in
the project's: openenv 0.10 needs fastmcp 3 and so mcp<2, while the project needs mcp 2.3. It imports
only openenv and fastmcp, so `uvicorn examples.guess.openenv_server:app` serves it as a real user's
OpenEnv environment would be served (one environment per WebSocket session).

The game: a secret integer in [low, high] drawn from the reset seed; the tool `guess(number)` answers
"higher", "lower" or "correct". The observation carries `done` (correct, or out of guesses) and
`reward` (1.0 when correct, else 0.0 once the episode ends), which is what the client reads.

Environment variables read at import (the server is one process per configuration):
    GUESS_MAX_SESSIONS  concurrent WebSocket sessions before the server refuses one (default 64)
"""

from __future__ import annotations

import os
import random
from typing import Any
from uuid import uuid4

from fastmcp import FastMCP
from openenv.core.env_server import create_app
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field


class GuessState(State):
    """What `state` reports: the episode id, the step count, and the game's own fields."""

    low: int = 1
    high: int = 100
    guesses: list[int] = Field(default_factory=list)
    solved: bool = False


class GuessObservation(Observation):
    """A plain observation for actions that are not MCP calls (the game has none but reset)."""

    message: str = ""


class GuessEnvironment(MCPEnvironment):
    """Guess a secret number with the `guess` tool; one instance per WebSocket session."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, max_guesses: int = 8) -> None:
        mcp = FastMCP("guess")
        self._target = 0
        self._max_guesses = max_guesses
        self._state = GuessState(episode_id=str(uuid4()))

        @mcp.tool()
        def guess(number: int) -> str:
            """Guess the secret number; the answer is "higher", "lower" or "correct".

            Args:
                number: the guess
            """
            return self._answer(int(number))

        super().__init__(mcp)

    def _answer(self, number: int) -> str:
        self._state.guesses.append(number)
        if number == self._target:
            self._state.solved = True
            return "correct"
        return "higher" if number < self._target else "lower"

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, low: int = 1, high: int = 100,
        max_guesses: int = 8, **kwargs: Any,
    ) -> Observation:
        self._target = random.Random(seed).randint(int(low), int(high))
        self._max_guesses = int(max_guesses)
        self._state = GuessState(episode_id=episode_id or str(uuid4()), low=int(low), high=int(high))
        return GuessObservation(message=f"I picked a number between {low} and {high}. Guess it.")

    async def step_async(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        observation = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        return self._scored(action, observation)

    def step(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return self._scored(action, super().step(action, timeout_s=timeout_s, **kwargs))

    def _scored(self, action: Action, observation: Observation) -> Observation:
        """Reward and done ride on the observation, as OpenEnv clients expect."""
        if isinstance(action, CallToolAction) and isinstance(observation, CallToolObservation):
            self._state.step_count += 1
            out_of_guesses = len(self._state.guesses) >= self._max_guesses
            observation.done = self._state.solved or out_of_guesses
            observation.reward = 1.0 if self._state.solved else (0.0 if observation.done else None)
        return observation

    def _step_impl(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return GuessObservation(message="only the guess tool moves this game", reward=0.0)

    @property
    def state(self) -> GuessState:
        return self._state


app = create_app(
    GuessEnvironment,
    CallToolAction,
    CallToolObservation,
    env_name="guess",
    max_concurrent_envs=int(os.environ.get("GUESS_MAX_SESSIONS", "64")),
)
