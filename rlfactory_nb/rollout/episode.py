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
default ToolSet environment costs no thread hops. The default is one instance that declares itself
shared (envs/base.py `SharedEnvironment`): it is never made per episode, bounded, kept open or closed.

Both players of an episode (rf.Agent's loop, rollout/session.py, and an agent program,
programs/program.py) go through the same steps here: `reset` (the opening joins the prompt),
`call_tools`, `respond` (a user's or a game's answer), `end` (the environment's reward, then close, or
kept open for the reward functions in the player's `Episodes`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlfactory_nb._threads import in_thread
from rlfactory_nb.envs.base import EnvFactory, Environment, Response, SharedEnvironment, ToolSetEnvironment
from rlfactory_nb.errors import EpisodeError
from rlfactory_nb.rollout import env_returns
from rlfactory_nb.rollout.guard import admitted
from rlfactory_nb.tools import validate
from rlfactory_nb.tools.validate import cut_text
from rlfactory_nb.types import Message, ToolCall, ToolResult, ToolSpec, Trajectory, Turn


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
        """An episode over an instance that is already made (the shared ToolSet environment: nothing
        to make off the loop, nothing to bound)."""
        episode = cls(SharedEnvironment(instance), stats)
        episode.instance = instance
        stats.opened += 1
        return episode

    @property
    def shared(self) -> bool:
        """Whether the instance serves every episode (never reset, kept open or closed per episode)."""
        return isinstance(self.factory, SharedEnvironment)

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

    async def reset(self, row: dict[str, Any], seed: int, messages: list[Message], max_text_chars: int) -> None:
        """Make the instance and reset it with `row`; what `reset` returns joins `messages` (checked,
        guarded: rollout/env_returns.py, rollout/guard.py)."""
        await self.open()
        result = await self.call("reset", "reset", row, seed=seed) if self.overrides("reset") else None
        self.opening(result, messages, max_text_chars, row)

    def opening(self, result: Any, messages: list[Message], max_text_chars: int, row: dict[str, Any]) -> None:
        """Apply what `reset` returned to the prompt `messages`; a prompt still empty (a row without
        one, whose reset wrote none) is a failure of the reset."""
        try:
            reset = env_returns.opening(result)
        except EpisodeError as error:
            raise self.failed(error.kind, error) from None
        if reset is not None:
            added = admitted(reset.messages, max_text_chars)
            if reset.replace_prompt:
                messages[:] = added
            else:
                messages.extend(added)
        if not messages:
            columns = sorted(key for key in row if key != "messages")
            raise self.failed("reset", ValueError(f"the row has no prompt ('messages' or 'prompt') and reset() wrote none; the row's columns: {columns}"))

    def tool_specs(self) -> list[ToolSpec]:
        return list(self.instance.tool_specs()) if self.instance is not None else []

    async def call_tools(self, calls: list[ToolCall], max_text_chars: int) -> list[ToolResult]:
        """One checked result per call, from the episode's environment (a ToolSet runs them in
        parallel and cuts its results itself; others' are cut to `max_text_chars`)."""
        if self.closed or self._closing is not None:
            raise EpisodeError("tool", "the episode has ended: its environment is closed")
        results = list(await self.call("tool", "call_tools", list(calls)))
        if len(results) != len(calls) or not all(isinstance(r, ToolResult) for r in results):
            raise self.failed("tool", TypeError(f"call_tools returned {len(results)} results for {len(calls)} calls"))
        if not all(isinstance(r.content, str) for r in results):
            raise self.failed("tool", TypeError("call_tools returned a ToolResult whose content is not text"))
        if not isinstance(self.instance, ToolSetEnvironment):  # a ToolSet cut its results by the same rule
            results = [dataclasses.replace(r, content=cut_text(r.content, max_text_chars)) for r in results]
        return results

    async def respond(self, turn: Turn, max_text_chars: int, metadata: dict[str, Any]) -> Response | None:
        """The environment's answer to a turn without a call, checked, guarded and recorded on the
        turn (its replies, speaker, time, reward) and in the trajectory's `metadata` (`env_reward`,
        a user's tokens and seconds); None: it has none, and the episode ends."""
        if not self.overrides("respond"):
            return None
        started = time.perf_counter()
        response = await self.call("respond", "respond", turn)
        turn.env_s = time.perf_counter() - started
        if response is None:
            return None
        if not isinstance(response, Response):
            raise self.failed("respond", TypeError(f"respond returned {type(response).__name__}, not a Response"))
        try:
            replies = env_returns.messages(response.messages, "respond()'s Response.messages is", "respond")
            tokens, seconds = env_returns.user_counts(response.info)
        except EpisodeError as error:
            raise self.failed(error.kind, error) from None
        response = dataclasses.replace(response, messages=admitted(replies, max_text_chars))
        turn.replies = [dict(message) for message in response.messages]
        turn.speaker = response.speaker
        if response.reward is not None:
            turn.env_reward = response.reward
            metadata["env_reward"] = response.reward
        if tokens or seconds:
            self.stats.user_tokens += tokens
            self.stats.user_s += seconds
            metadata["user_tokens"] = metadata.get("user_tokens", 0) + tokens
            metadata["user_s"] = metadata.get("user_s", 0.0) + seconds
        return response

    async def end(self, traj: Trajectory, *, score: bool = True, keep: dict[str, Episode] | None = None,
                  timeout_s: float | None = None) -> None:
        """Take the environment's reward into `traj.metadata["env_reward"]` (`score`), then close the
        instance, or keep it in `keep` (by trajectory id) for the reward functions; a failure is
        recorded in the trajectory (`env_error`, finish reason "error")."""
        if self.instance is None or self.closed:
            self.release_slot()
            return
        if score and self.error is None and self.overrides("reward"):
            try:
                value = await asyncio.wait_for(self.call("reward", "reward"), timeout_s)
                if value is not None:
                    traj.metadata["env_reward"] = value
            except (EpisodeError, TimeoutError) as error:
                traj.metadata["env_error"] = env_error_record(self.failed("reward", error))
                traj.finish_reason = "error"
            except BaseException:
                await self.close(timeout_s)
                raise
        if score and keep is not None and self.error is None and not self.shared:
            self.release_slot()  # a kept episode no longer runs; the slot bounds running ones
            keep[traj.id] = self
            return
        await self.close(timeout_s)
        if self.error is not None and "env_error" not in traj.metadata:
            traj.metadata["env_error"] = env_error_record(self.error)
            traj.finish_reason = "error"

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
