"""Run a checker in a worker process that a timeout can stop.

Some checkers never return on hostile input: sympy comparing `9^(9^(9^9))` with a number, say. The
usual guard, `signal.alarm` (math-verify's own timeout), raises outside the main thread, and the
reward runner calls sync rewards in worker threads; a signal also cannot interrupt one long C call
such as big-integer exponentiation. A thread cannot be killed. A process can: `WorkerPool.call` sends
the call to an idle worker process, waits at most `timeout_s` for the reply, and on overrun kills
that worker (a fresh one replaces it on the next call) and raises `TimeoutError`.

Workers are plain `python -c` subprocesses, not `multiprocessing` ones, so they never re-run the
user's script or notebook as `__main__`. A call is one JSON line on the worker's stdin naming an
importable function and its JSON arguments; the reply is one JSON line on a private copy of the
worker's stdout (its fd 1 is pointed at stderr, so a library that prints cannot garble a reply).
Each call also caps the worker's CPU time (RLIMIT_CPU, the timeout plus a second), so a worker left
computing by a parent that crashed stops by itself. POSIX only: select on pipes, resource limits.

The pool is bounded (`max_workers` processes) and its callers may be abandoned: the reward runner's
timeout gives up on a sync reward's thread, which cannot be killed. Such a call used to stay queued
for a worker, and a hostile answer's worker computed on for its whole `timeout_s`, so the next
step's correct answers waited behind work nobody would read and scored 0 on the runner's timeout.
Now a call run under `_threads.in_thread` watches its `abandoned()` event: abandoned
while waiting for a worker, it leaves the queue; while its worker computes, the worker is killed
(and replaced by the next call that finds no idle worker, as after a timeout).
"""

from __future__ import annotations

import json
import math
import os
import queue
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlfactory_nb._threads import abandoned
from rlfactory_nb.code_names import load_object
from rlfactory_nb.errors import ConfigError, RewardTimeout, RewardWorkerError

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the folder that holds rlfactory_nb/
_WORKER_COMMAND = "from rlfactory_nb.rewards.isolated import serve; serve()"
_POLL_S = 0.05
"""how often a waiting call looks at its abandoned() event"""


class WorkerPool:
    """Up to `max_workers` worker processes, started on demand; `setup` (an importable function)
    runs once in each new worker, under `start_timeout_s`, e.g. to import a slow library."""

    def __init__(
        self, max_workers: int = 2, setup: Callable[[], Any] | None = None, start_timeout_s: float = 120.0
    ):
        if max_workers < 1 or start_timeout_s <= 0:
            raise ConfigError(f"need max_workers >= 1 and start_timeout_s > 0, got {max_workers}, {start_timeout_s}")
        self.setup = None if setup is None else function_name(setup)
        self.start_timeout_s = start_timeout_s
        self.started = 0
        """worker processes started so far, replacements of killed ones included"""
        self.max_workers = max_workers
        self._slots = threading.BoundedSemaphore(max_workers)
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        self._live: set[_Worker] = set()
        self._lock = threading.Lock()

    def call(self, function: Callable[..., Any], *args: Any, timeout_s: float) -> Any:
        """`function(*args)` in a worker process: its JSON result, or TimeoutError after `timeout_s`
        seconds of work (the worker is killed; waiting for a free worker does not count), or
        RuntimeError when it raised or its worker died; TimeoutError too when the caller stopped
        waiting (see the module docstring)."""
        request = {"function": function_name(function), "args": list(args), "cpu_s": timeout_s}
        cancel = abandoned()
        self._acquire(cancel)
        try:
            worker = self._take(cancel)
            try:
                reply = worker.request(request, timeout_s, cancel)
            except BaseException:
                self._discard(worker)
                raise
            self._idle.put(worker)
        finally:
            self._slots.release()
        if "error" in reply:
            raise RewardWorkerError(f"{request['function']} in a worker process raised {reply['error']}")
        return reply["result"]

    @property
    def live(self) -> int:
        """worker processes running now (busy, idle or starting)"""
        with self._lock:
            return len(self._live)

    def close(self) -> None:
        """Kill every worker; a later call starts new ones."""
        with self._lock:
            workers, self._live = self._live, set()
            self._idle = queue.SimpleQueue()  # killed: no call may take one
        for worker in workers:
            worker.kill()

    def _acquire(self, cancel: threading.Event | None) -> None:
        """A slot (one of `max_workers`); given up when `cancel` is set."""
        if cancel is None:
            self._slots.acquire()
            return
        while not self._slots.acquire(timeout=_POLL_S):
            if cancel.is_set():
                raise RewardTimeout("the caller stopped waiting before a worker was free")

    def _take(self, cancel: threading.Event | None = None) -> _Worker:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            return self._start(cancel)

    def _start(self, cancel: threading.Event | None = None) -> _Worker:
        worker = _Worker()
        with self._lock:
            self._live.add(worker)
            self.started += 1
        if self.setup is not None:
            try:
                worker.request({"function": self.setup, "args": [], "cpu_s": self.start_timeout_s}, self.start_timeout_s, cancel)
            except BaseException:
                self._discard(worker)
                raise
        return worker

    def _discard(self, worker: _Worker) -> None:
        worker.kill()
        with self._lock:
            self._live.discard(worker)


class _Worker:
    """One worker process and the bytes of a reply read so far."""

    def __init__(self) -> None:
        path = os.pathsep.join(filter(None, [_PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))
        self.process = subprocess.Popen(
            [sys.executable, "-c", _WORKER_COMMAND],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": path},
        )
        self._pending = b""

    def request(self, message: dict[str, Any], timeout_s: float, cancel: threading.Event | None = None) -> dict[str, Any]:
        try:
            self.process.stdin.write(json.dumps(message).encode() + b"\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            raise RewardWorkerError(f"the worker process exited (code {self.process.poll()})") from None
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._pending:
            self._pending += self._read(deadline, timeout_s, cancel)
        line, _, self._pending = self._pending.partition(b"\n")
        return json.loads(line)

    def _read(self, deadline: float, timeout_s: float, cancel: threading.Event | None) -> bytes:
        stdout = self.process.stdout.fileno()
        while True:
            if cancel is not None and cancel.is_set():
                raise RewardTimeout("the caller stopped waiting; the worker process was stopped")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RewardTimeout(f"no result within {timeout_s:g} s; the worker process was stopped")
            wait = remaining if cancel is None else min(remaining, _POLL_S)
            if select.select([stdout], [], [], wait)[0]:
                break
        chunk = os.read(stdout, 1 << 16)
        if not chunk:
            raise RewardWorkerError(f"the worker process exited (code {self.process.wait()})")
        return chunk

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        self.process.stdin.close()
        self.process.stdout.close()


def function_name(function: Callable[..., Any]) -> str:
    """`module:qualname`, what a worker imports; the function must be importable by that name.

    >>> import math
    >>> function_name(math.factorial)
    'math:factorial'
    """
    module, name = getattr(function, "__module__", None), getattr(function, "__qualname__", "")
    if not module or module == "__main__" or "<" in name:
        raise ConfigError(
            f"{function!r} cannot run in a worker process: it must be defined at the top level of an "
            "importable module (not in a notebook, a script's __main__ or another function)"
        )
    return f"{module}:{name}"


def serve() -> None:
    """The worker's loop: one reply line for each request line, until stdin closes."""
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # what the checked code prints goes to stderr, not into a reply
    for line in sys.stdin:
        request = json.loads(line)
        _limit_cpu(request["cpu_s"])
        try:
            function = load_object(request["function"], "worker request", "checker function")
            reply = json.dumps({"result": function(*request["args"])})
        except Exception as exc:  # noqa: BLE001  (reported to the caller, which raises it)
            reply = json.dumps({"error": f"{type(exc).__name__}: {exc}"})
        replies.write(reply + "\n")
        replies.flush()


def _limit_cpu(seconds: float) -> None:
    """Let this process use `seconds` more CPU time (and a second of slack), then be killed by SIGXCPU."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft, hard = math.ceil(usage.ru_utime + usage.ru_stime + seconds) + 1, resource.getrlimit(resource.RLIMIT_CPU)[1]
    resource.setrlimit(resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))
