"""One way to run a coroutine from synchronous code, in a plain script or inside a running kernel.

Every sync twin in the package (`start_sync`, `call_sync`, ...) goes through `run_sync`, so there
is exactly one place that knows the two situations:

* No loop is running (a script, a test, the CLI): the coroutine runs on a long-lived loop kept
  per thread. It is *not* `asyncio.run`, which would close its loop on return and with it every
  long-lived task a previous call started (an MCP session is owned by such a task).
* A loop is already running (a Jupyter cell, or sync code called from async code): the loop is
  made re-entrant with nest-asyncio, applied lazily the first time it is needed, and the coroutine
  runs on that same loop, where the kernel's own `await` calls put their tasks too.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_thread_state = threading.local()


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to completion and return its result, whether or not a loop is already running."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return _thread_loop().run_until_complete(coro)
    _make_reentrant(loop)
    return loop.run_until_complete(coro)


async def maybe_await(value: Any) -> None:
    """Await `value` if a callback returned a coroutine or future (callbacks may be sync or async)."""
    if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
        await value


def _thread_loop() -> asyncio.AbstractEventLoop:
    """The loop that sync calls made from this thread share, created on first use."""
    loop = getattr(_thread_state, "loop", None)
    if loop is None or loop.is_closed():
        loop = asyncio.new_event_loop()
        _thread_state.loop = loop
    return loop


def _make_reentrant(loop: asyncio.AbstractEventLoop) -> None:
    # Imported here: nest-asyncio patches asyncio, which plain scripts never need.
    # Applying twice is harmless: nest-asyncio marks what it has patched.
    import nest_asyncio

    nest_asyncio.apply(loop)
