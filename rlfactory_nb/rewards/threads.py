"""Synchronous reward work off the event loop, in a thread its caller may abandon.

A reward runs on the event loop that scores the whole step, under the reward runner's timeout; but a
timeout is a cancellation, and a cancellation cannot interrupt a synchronous call that holds the loop.
The NL2SQL reward ran the model's SQL that way (`LocalSql.call` inside an async reward): six slow
queries took 12 s one after another and the runner's 1 s timeout never fired. So synchronous work -
a sync reward function, a sync tool call or check inside a verified reward - runs in a daemon thread
of its own (`in_daemon_thread`), awaited; the loop stays free and the timeout fires on time.

A thread cannot be killed. When its caller stops waiting (the timeout, or any cancellation), the
thread's `abandoned()` event is set: work that waits inside it (a queue for a worker process, a
reply) reads the event and gives up, so an abandoned call does not stay queued behind the others
(`rewards/isolated.py`), and a worker process computing for nobody is stopped.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from typing import Any

_ABANDONED: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar("rlfactory_nb_abandoned", default=None)


def abandoned() -> threading.Event | None:
    """The event set when the caller of the running `in_daemon_thread` work stopped waiting; None
    outside such work."""
    return _ABANDONED.get()


async def in_daemon_thread(function: Callable[..., Any], *args: Any, name: str = "reward") -> Any:
    """`function(*args)` in a new daemon thread (the caller's context variables copied), awaited;
    cancelled, the thread's `abandoned()` event is set and its late result dropped."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()
    event = threading.Event()
    context.run(_ABANDONED.set, event)

    def settle(value: Any, error: BaseException | None) -> None:
        if not future.done():  # cancelled by a timeout: the late result is dropped
            future.set_exception(error) if error is not None else future.set_result(value)

    def target() -> None:
        try:
            value, error = context.run(function, *args), None
        except BaseException as exc:  # noqa: BLE001  (handed to the awaiting task, which reports it)
            value, error = None, exc
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:  # the loop closed while the function ran
            pass

    threading.Thread(target=target, name=f"reward:{name}", daemon=True).start()
    try:
        return await future
    except asyncio.CancelledError:
        event.set()
        raise
