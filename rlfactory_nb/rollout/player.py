"""`EpisodePlayer`: the contract of whatever plays an episode.

Two things play episodes: `rf.Agent` (rollout/agent.py: the built-in loop of generate, parse, the
environment's tools or answer) and `rf.AgentProgram` (programs/program.py: someone's agent against
an OpenAI-compatible endpoint). Everything that runs episodes (group rollouts, training's scoring,
the RewardLab, `rf.evaluate`, the RolloutStepper) takes an `EpisodePlayer` and needs nothing else:
both play in a `rollout/episode.Episode` under the same `RolloutSettings`, and both implement every
method here for real.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

from rlfactory_nb.envs.base import Environment
from rlfactory_nb.rollout.session import Prompt
from rlfactory_nb.seeds import SampleId
from rlfactory_nb.types import Trajectory, Turn


@runtime_checkable
class EpisodeRun(Protocol):
    """One episode in progress, one step at a time (an assistant turn, or a program's model call)."""

    done: bool

    @property
    def trajectory(self) -> Trajectory:
        """The episode so far."""
        ...

    async def step(self) -> Turn | None:
        """Advance one step; its turn, or None when nothing was generated."""
        ...

    async def run(self) -> Trajectory:
        """Play to the end; returns the trajectory."""
        ...

    async def close(self) -> None:
        """End the episode where it stands; its environment is closed unscored."""
        ...


@runtime_checkable
class EpisodePlayer(Protocol):
    """Whatever plays episodes (module docstring): rf.Agent and rf.AgentProgram."""

    tokenizer: Any
    max_turns: int
    """assistant turns (or a program's model calls) an episode may take"""

    def start(
        self, prompt: Prompt, metadata: dict[str, Any] | None = None, sample_id: SampleId | None = None, *,
        keep_open: bool = False,
    ) -> EpisodeRun:
        """An episode that advances one step per `await run.step()` (the RolloutStepper's view)."""
        ...

    async def rollout(
        self, prompt: Prompt, metadata: dict[str, Any] | None = None, sample_id: SampleId | None = None, *,
        keep_open: bool = False,
    ) -> Trajectory:
        """Play one episode from `prompt` (messages, or a dataset row) to its end; `sample_id` seeds
        its requests and its environment's reset; `keep_open` leaves its environment open for the
        reward functions (`env_of`) until `close_episodes`."""
        ...

    def env_of(self, traj: Trajectory) -> Environment | None:
        """The still-open environment of a trajectory played with `keep_open` (else None)."""
        ...

    async def close_episodes(self, trajectories: Iterable[Trajectory] | None = None) -> None:
        """Close the environments kept open for `trajectories` (None: all of them)."""
        ...

    def episode_metrics(self, reset: bool = False) -> dict[str, float]:
        """`env/...` counters since the last reset (a training step reads and resets them)."""
        ...
