"""The episodes of one player (an rf.Agent, an rf.AgentProgram): the bounds they run under, their
counters, and the ones kept open after their trajectory ended for the reward functions.

A player owns one `Episodes`; each of its trajectories plays one `Episode` (rollout/episode.py)
made by `new()`. Training reads `metrics(reset=True)` once a step and closes the kept episodes once
their group is scored (`close`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rlfactory_nb.config import DEFAULTS
from rlfactory_nb.envs.base import EnvFactory, Environment, SharedEnvironment
from rlfactory_nb.errors import ConfigError
from rlfactory_nb.rollout.episode import Episode, EpisodeStats
from rlfactory_nb.tools.config import ToolSetSettings
from rlfactory_nb.types import Trajectory


@dataclass(frozen=True)
class EpisodeLimits:
    """The bounds every episode of a player (an Agent, a program) runs under."""

    max_turns: int = 4
    """assistant turns (an Agent) or model calls (a program) per episode (`rollout.max_turns`)"""
    max_new_tokens: int = 128
    """tokens per turn or call; a program's request may only lower it"""
    max_total_tokens: int = 1024
    """prompt + response tokens of an episode (of any one call, for a program)"""
    max_text_chars: int = ToolSetSettings.max_result_chars
    """characters of any one text entering from outside the model (rollout/guard.py `admitted`):
    a run's `tools.max_result_chars`"""
    timeout_s: float | None = DEFAULTS.rollout.env_timeout_s
    """seconds an episode may spend inside its steps (generation and environment); None: no bound"""
    max_open: int | None = None
    """episodes running at once; None: no bound beyond the rollout's own `max_in_flight`"""

    def __post_init__(self) -> None:
        if self.max_open is not None and self.max_open < 1:
            raise ConfigError(f"max_open_envs must be at least 1 (or None: no bound), got {self.max_open}")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise ConfigError(f"env_timeout_s must be positive (or None: no bound), got {self.timeout_s}")


class Episodes:
    """The episodes of one player: how each one's environment is made, the bounds, the counters, and
    the episodes kept open after their trajectory ended (`keep_open`), by trajectory id."""

    def __init__(self, factory: EnvFactory, limits: EpisodeLimits):
        self.factory = factory
        self.limits = limits
        self.stats = EpisodeStats()
        """episodes opened and closed, environment errors by kind, environment and user time"""
        self.kept: dict[str, Episode] = {}
        self._slots_by_loop: tuple[Any, asyncio.Semaphore] | None = None

    @property
    def shared(self) -> bool:
        """Whether one environment serves every episode (the ToolSet's)."""
        return isinstance(self.factory, SharedEnvironment)

    def new(self) -> Episode:
        """The next episode: made now when its environment is the shared one, else on `open`."""
        if isinstance(self.factory, SharedEnvironment):
            return Episode.made_now(self.factory.instance, self.stats)
        return Episode(self.factory, self.stats)

    def slots(self) -> asyncio.Semaphore | None:
        """The bound on running episodes, one per event loop (a semaphore belongs to its loop)."""
        if self.limits.max_open is None:
            return None
        loop = asyncio.get_running_loop()
        if self._slots_by_loop is None or self._slots_by_loop[0] is not loop:
            self._slots_by_loop = (loop, asyncio.Semaphore(self.limits.max_open))
        return self._slots_by_loop[1]

    def env_of(self, traj: Trajectory) -> Environment | None:
        """The still-open environment of a trajectory played with `keep_open` (else None)."""
        episode = self.kept.get(traj.id)
        return episode.instance if episode is not None else None

    async def close(self, trajectories: Iterable[Trajectory] | None = None) -> None:
        """Close the environments kept open for `trajectories` (None: all of them)."""
        ids = list(self.kept) if trajectories is None else [traj.id for traj in trajectories]
        episodes = [self.kept.pop(key) for key in ids if key in self.kept]
        await asyncio.gather(*(episode.close(self.limits.timeout_s) for episode in episodes))

    def metrics(self, reset: bool = False) -> dict[str, float]:
        """`env/...` counters since the last reset (a training step reads and resets them)."""
        metrics = self.stats.metrics()
        if reset:
            self.stats.reset()
        return metrics


class PlaysEpisodes:
    """What rf.Agent and rf.AgentProgram share as players: the `EpisodePlayer` methods answered by
    their `episodes` (an `Episodes`)."""

    episodes: Episodes

    def env_of(self, traj: Trajectory) -> Environment | None:
        """The still-open environment of an episode played with `keep_open` (else None)."""
        return self.episodes.env_of(traj)

    async def close_episodes(self, trajectories: Iterable[Trajectory] | None = None) -> None:
        """Close the environments kept open for `trajectories` (None: all of them)."""
        await self.episodes.close(trajectories)

    def episode_metrics(self, reset: bool = False) -> dict[str, float]:
        """`env/...` counters since the last reset (a training step reads and resets them)."""
        return self.episodes.metrics(reset)
