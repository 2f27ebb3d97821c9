"""The user's blocking code runs in bounded thread pools, one per kind, that hung calls cannot fill.

A sync `@rf.tool` function, a plain-function agent program, an environment's sync methods and a sync
reward are the user's code, and any of them may block (a database, a browser, a subprocess) or hang.
On the event loop they would stall every episode; on the loop's default executor (min(32, cpus + 4)
threads: 6 on a 2-core machine), a few hung tool calls filled it and a healthy tool and a healthy
program then both timed out behind them. So every such call goes through `in_thread(kind, ...)`:

- each kind has a pool of its own (`POOL_SIZES`), so hung tools cannot hold up programs, environments
  or rewards; at most `size` calls of a kind run at once, later ones wait in turn (the wait counts
  against the caller's own timeout);
- each call runs in a new daemon thread, named `<kind>:<function>`, with the caller's context
  variables copied;
- a thread cannot be killed. When the caller stops waiting (its timeout, any cancellation), the call
  is *abandoned*: its `abandoned()` event is set (work that waits inside it can give up: the reward
  worker pool does), its late result is dropped, and it gives its place back at once, so a hung call
  does not count against the kind's capacity;
- abandoned calls still running are bounded too, by `max_abandoned` (the kind's size): past it a new
  call of that kind fails at once with `HungCallsError` naming the kind, since that many hung calls
  mean broken code rather than slow code, and threads are not started without end.

Sizes: "tool" 256 (sync tool functions: a ToolSet's and an environment's `@rf.tool` methods), "env"
512 (an environment's factory and its sync reset, respond, reward and close), "program" 512
(plain-function agent programs: one thread for an episode's whole life), "reward" 256 (sync rewards,
a verified reward's sync tool call and check, a judge's score parser).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from rlfactory_nb.errors import HungCallsError

Kind = Literal["tool", "env", "program", "reward"]

POOL_SIZES: dict[Kind, int] = {"tool": 256, "env": 512, "program": 512, "reward": 256}
"""calls of each kind running at once; as many abandoned ones may run on besides (module docstring)"""

_ABANDONED: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar("rlfactory_nb_abandoned", default=None)


def abandoned() -> threading.Event | None:
    """The event set when the caller of the running `in_thread` work stopped waiting; None outside
    such work."""
    return _ABANDONED.get()


async def in_thread(kind: Kind, function: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """`function(*args, **kwargs)` in a thread of the `kind` pool, awaited (module docstring)."""
    return await POOLS[kind].run(function, *args, **kwargs)


@dataclass
class _Call:
    finished: bool = False
    abandoned: bool = False


class ThreadPool:
    """At most `size` calls in their own daemon threads at once, and at most `max_abandoned` calls
    whose callers gave up (module docstring). Shared by every event loop and thread of the process."""

    def __init__(self, kind: str, size: int, max_abandoned: int | None = None):
        self.kind, self.size = kind, size
        self.max_abandoned = size if max_abandoned is None else max_abandoned
        self.running = 0
        """places taken: calls whose callers wait for them"""
        self.abandoned = 0
        """calls whose callers stopped waiting, still running in their threads"""
        self._waiting: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()
        self._lock = threading.Lock()

    async def run(self, function: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        if self.abandoned >= self.max_abandoned:
            raise HungCallsError(
                f"{self.abandoned} {self.kind} calls are still running after their callers gave up on them "
                f"(timed out or cancelled), the most this pool lets run on ({self.max_abandoned}): a {self.kind} "
                "function hangs; fix it, or give it a timeout of its own, before more calls run"
            )
        await self._take_place()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        call, event, context = _Call(), threading.Event(), contextvars.copy_context()
        context.run(_ABANDONED.set, event)

        def settle(value: Any, error: BaseException | None) -> None:
            if not future.done():  # abandoned: the late result is dropped
                future.set_exception(error) if error is not None else future.set_result(value)

        def target() -> None:
            try:
                value, error = context.run(function, *args, **kwargs), None
            except BaseException as exc:  # noqa: BLE001  (handed to the awaiting task, which reports it)
                value, error = None, exc
            self._finished(call)
            try:
                loop.call_soon_threadsafe(settle, value, error)
            except RuntimeError:  # the loop closed while the function ran
                pass

        try:
            threading.Thread(target=target, name=f"{self.kind}:{_name_of(function)}", daemon=True).start()
        except BaseException:
            self._give_place()
            raise
        try:
            return await future
        except asyncio.CancelledError:
            event.set()
            self._abandon(call)
            raise

    def _finished(self, call: _Call) -> None:
        with self._lock:
            call.finished = True
            if call.abandoned:
                self.abandoned -= 1
                return
        self._give_place()

    def _abandon(self, call: _Call) -> None:
        with self._lock:
            if call.finished:
                return
            call.abandoned = True
            self.abandoned += 1
        self._give_place()

    async def _take_place(self) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self.running < self.size and not self._waiting:
                self.running += 1
                return
            turn: asyncio.Future[None] = loop.create_future()
            self._waiting.append((loop, turn))
        try:
            await turn
        except asyncio.CancelledError:
            with self._lock:
                queued = (loop, turn) in self._waiting
                if queued:
                    self._waiting.remove((loop, turn))
            if not queued and turn.done() and not turn.cancelled():
                self._give_place()  # handed a place just as its caller gave up: pass it on
            raise

    def _give_place(self) -> None:
        """Hand a place to the first caller waiting (on its own loop), or free it."""
        with self._lock:
            while self._waiting:
                loop, turn = self._waiting.popleft()
                try:
                    loop.call_soon_threadsafe(self._hand, turn)
                    return
                except RuntimeError:  # that caller's loop closed
                    continue
            self.running -= 1

    def _hand(self, turn: asyncio.Future[None]) -> None:
        if turn.done():  # its caller gave up meanwhile: the next one gets the place
            self._give_place()
        else:
            turn.set_result(None)


def _name_of(function: Callable[..., Any]) -> str:
    """The function's name, for its thread's (`tool:lookup`, `reward:math_verify`)."""
    while isinstance(function, functools.partial):
        function = function.func
    return getattr(function, "__qualname__", type(function).__name__)


POOLS: dict[Kind, ThreadPool] = {kind: ThreadPool(kind, size) for kind, size in POOL_SIZES.items()}
