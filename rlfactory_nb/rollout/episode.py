"""One environment instance through one trajectory: made, reset, called, closed, and every failure
recorded as data.

The agent loop (rollout/agent.py) owns the tokens; this module owns the instance. What it promises:
- the instance is made off the event loop (a class whose `__init__` opens a database or starts a
  browser does not stall the other trajectories), and sync methods run in a thread of the "env"
  pool (rlfactory_nb/_threads.py: a hung method, once its episode gave up on it, holds no place);
- an environment that raises (in its factory, `reset`, a tool, `respond`, `reward` or `close`) or
  runs past the episode timeout ends its episode with a named `EpisodeError` kind, counted in
  `EpisodeStats`; the caller records it in the trajectory and the batch goes on;
- `close` runs exactly once, however the episode ended (finished, failed, timed out, cancelled);
- at most `max_open` episodes run at once, so 256 trajectories of an environment that holds a
  process each cannot start 256 processes.

Methods the environment does not override (the base class's defaults) are not called at all, so the
default ToolSet environment costs no thread hops.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlfactory_nb._threads import in_thread
from rlfactory_nb.envs.base import EnvFactory, Environment, ToolSetEnvironment
from rlfactory_nb.errors import EpisodeError
from rlfactory_nb.tools import validate
from rlfactory_nb.types import Trajectory


@dataclass
class EpisodeStats:
    """Counters over every episode of one Agent, read (and reset) once per training step."""

    opened: int = 0
    closed: int = 0
    errors: Counter = field(default_factory=Counter)
    """EpisodeError kind -> episodes that failed that way"""
    env_s: float = 0.0
    """seconds spent inside the environment's methods"""
    user_tokens: int = 0
    """tokens a simulated user wrote (its `Response.info["user_tokens"]`)"""
    user_s: float = 0.0
    """seconds a simulated user took to answer"""

    @property
    def open_now(self) -> int:
        return self.opened - self.closed

    def metrics(self) -> dict[str, float]:
        """`env/...` metrics: episodes opened and closed, open now, errors by kind, time, user tokens."""
        row = {
            "env/episodes_opened": float(self.opened),
            "env/episodes_closed": float(self.closed),
            "env/open_now": float(self.open_now),
            "env/errors": float(sum(self.errors.values())),
            "env/time_s": self.env_s,
            "env/user_tokens": float(self.user_tokens),
            "env/user_latency_s": self.user_s,
        }
        row.update({f"env/errors/{kind}": float(count) for kind, count in sorted(self.errors.items())})
        return row

    def reset(self) -> None:
        """Zero the per-step counters; `open_now` keeps counting episodes still open."""
        still_open = self.open_now
        self.opened, self.closed = still_open, 0
        self.errors, self.env_s, self.user_tokens, self.user_s = Counter(), 0.0, 0, 0.0


@dataclass(frozen=True)
class EpisodeLimits:
    """The bounds every episode of an Agent runs under."""

    timeout_s: float | None = None
    """seconds an episode may spend inside its steps (generation and environment); None: no bound"""
    max_open: int | None = None
    """episodes running at once; None: no bound beyond the rollout's own `max_in_flight`"""


class Episode:
    """One Environment instance's life; see the module docstring."""

    def __init__(self, factory: EnvFactory, stats: EpisodeStats):
        self.factory = factory
        self.stats = stats
        self.instance: Environment | None = None
        self.error: EpisodeError | None = None
        self._slots: asyncio.Semaphore | None = None
        self._holds_slot = False
        self._closing: asyncio.Task | None = None

    @classmethod
    def made_now(cls, instance: Environment, stats: EpisodeStats) -> Episode:
        """An episode over an instance that is already made (the ToolSet environment: nothing to
        make off the loop, nothing to bound)."""
        episode = cls(lambda: instance, stats)
        episode.instance = instance
        stats.opened += 1
        return episode

    async def take_slot(self, slots: asyncio.Semaphore | None) -> None:
        """Wait for one of `slots` (the bound on running episodes); the wait is not the episode's time."""
        if slots is not None and not self._holds_slot:
            await slots.acquire()
            self._slots, self._holds_slot = slots, True

    async def open(self) -> Environment:
        """Make the instance off the event loop (EpisodeError "create" if the factory raises)."""
        if self.instance is not None:
            return self.instance
        started = time.perf_counter()
        try:
            self.instance = await in_thread("env", self._make)
        except Exception as error:
            self.release_slot()
            raise self.failed("create", error) from error
        finally:
            self.stats.env_s += time.perf_counter() - started
        if not isinstance(self.instance, Environment):
            made, self.instance = self.instance, None
            self.release_slot()
            raise self.failed("create", TypeError(
                f"the env factory returned {type(made).__name__}, not an Environment: subclass rf.Environment, or, "
                f"for a TRL-style class, pass the class itself (env={type(made).__name__}) or wrap the factory "
                "with trl_env (env=trl_env(factory))"
            ))
        self.stats.opened += 1
        return self.instance

    def _make(self) -> Environment:
        """The factory's instance, with the tool argument check ready (in this worker thread, not on
        the loop: importing jsonschema on the first tool call stalled every episode for 1.4 s)."""
        instance = self.factory()
        validate.warm()
        return instance

    def overrides(self, name: str) -> bool:
        """Whether the instance has its own `name` (the base class's default is not worth a call)."""
        method = getattr(type(self.instance), name, None)
        return method is not None and method is not getattr(Environment, name, None)

    async def call(self, kind: str, name: str, *args: Any, **kwargs: Any) -> Any:
        """The instance's `name(*args)`, awaited or run in a worker thread; a raise becomes
        EpisodeError(kind) (recorded on the episode), timed into `stats.env_s`."""
        method: Callable[..., Any] = getattr(self.instance, name)
        started = time.perf_counter()
        try:
            if inspect.iscoroutinefunction(method):
                return await method(*args, **kwargs)
            if isinstance(self.instance, ToolSetEnvironment):
                return method(*args, **kwargs)
            value = await in_thread("env", method, *args, **kwargs)
            return await value if inspect.isawaitable(value) else value
        except asyncio.CancelledError:
            raise
        except EpisodeError as error:  # an adapter names its own failure (a server gone, a refused session)
            raise self.failed(error.kind, error)
        except Exception as error:
            raise self.failed(kind, error) from error
        finally:
            self.stats.env_s += time.perf_counter() - started

    def failed(self, kind: str, error: BaseException) -> EpisodeError:
        """Record the episode's (first) failure and count it."""
        named = error if isinstance(error, EpisodeError) else EpisodeError(kind, f"{type(error).__name__}: {error}")
        if named is not error:
            named.__cause__ = error
        if self.error is None:
            self.error = named
            self.stats.errors[named.kind] += 1
        return named

    def state(self) -> dict[str, Any] | None:
        """The instance's `state()` made JSON-safe (shown by the views, saved with the trajectory);
        None when it has none or it raised (a view must not end an episode)."""
        if self.instance is None or not self.overrides("state"):
            return None
        try:
            state = self.instance.state()
            return None if state is None else json.loads(json.dumps(state, default=str))
        except Exception:  # noqa: BLE001 - a broken view of the state is not the episode's failure
            return None

    async def close(self, timeout_s: float | None = None) -> None:
        """Close the instance once (concurrent and later calls wait for the same close). A close that
        raises or passes `timeout_s` is recorded (kind "close") but never raised: the episode is
        over either way. Survives the caller's cancellation: the close runs to its end."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close(timeout_s))
        await asyncio.shield(self._closing)

    async def _close(self, timeout_s: float | None) -> None:
        try:
            if self.instance is None:
                return
            try:
                if self.overrides("close"):
                    await asyncio.wait_for(self.call("close", "close"), timeout_s)
            except TimeoutError:
                self.failed("close", TimeoutError(f"close() took over {timeout_s} s"))
            except EpisodeError:
                pass  # recorded by `call`
            self.stats.closed += 1
        finally:
            self.release_slot()

    def release_slot(self) -> None:
        if self._holds_slot and self._slots is not None:
            self._holds_slot = False
            self._slots.release()

    @property
    def closed(self) -> bool:
        return self._closing is not None and self._closing.done()


def failed_before_start(traj: Trajectory) -> bool:
    """Whether `traj`'s environment failed before the model's first token (it could not be made or
    reset: a server at capacity, a missing corpus). Nothing the policy did: such a trajectory has no
    sampled token to train and no reward that measures the policy (train/selection.py leaves its
    group out)."""
    return "env_error" in traj.metadata and not traj.response_ids


def env_error_record(error: EpisodeError) -> dict[str, str]:
    """What a trajectory keeps of its episode's failure (`metadata["env_error"]`)."""
    cause = error.__cause__
    return {"kind": error.kind, "error": type(cause).__name__ if cause else "EpisodeError", "message": str(error)}
