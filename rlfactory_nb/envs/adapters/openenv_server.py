"""A local OpenEnv server: its app run by uvicorn in a child process, under the OpenEnv venv.

OpenEnv 0.10 and this project cannot share one venv (fastmcp 3 needs mcp<2; the project needs mcp 2.3),
so the server runs under another interpreter: `python=`, else $RLFACTORY_OPENENV_PYTHON, else
`.venv-openenv/bin/python` beside the project (scripts/install_openenv.sh makes it), else this one.

    with OpenEnvServer("examples.guess.openenv_server:app") as server:
        agent = rf.Agent(policy, env=openenv_env(server.url))

`shared_server(app)` starts one server per (app, interpreter, folder) in a process and stops it at
exit: what `openenv_env(app=...)` uses, so episodes made on a training worker share the worker's server.

The server runs in `cwd` (default: this checkout), which is also put first on its PYTHONPATH: an
environment outside the checkout (a clone of OpenEnv's `envs/echo_env`, say) is served with
`cwd=` the folder that holds its package. A server that cannot start says what failed: the app's
module not on that path, a module it imports missing from the interpreter, an interpreter without
uvicorn or openenv (not the OpenEnv venv), or an app attribute that is not there.
"""

from __future__ import annotations

import atexit
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Self

from rlfactory_nb.errors import ConfigError, ServerStartError, ServerUnavailable

_REPO_ROOT = Path(__file__).resolve().parents[3]


def openenv_python(python: str | None = None) -> str:
    """The interpreter that runs OpenEnv servers (see the module docstring for the order)."""
    if python:
        return python
    if os.environ.get("RLFACTORY_OPENENV_PYTHON"):
        return os.environ["RLFACTORY_OPENENV_PYTHON"]
    beside = _REPO_ROOT / ".venv-openenv" / "bin" / "python"
    return str(beside) if beside.exists() else sys.executable


class OpenEnvServer:
    """`uvicorn APP` on a free local port; `start()` returns once `/health` answers."""

    def __init__(
        self, app: str, *, python: str | None = None, cwd: str | Path | None = None,
        env: dict[str, str] | None = None, startup_timeout_s: float = 60.0,
    ):
        if ":" not in app:
            raise ConfigError(f"OpenEnvServer: app must be 'module:attribute', e.g. 'my_env.server:app', got {app!r}")
        self.app = app
        self.python = openenv_python(python)
        self.cwd = Path(cwd) if cwd is not None else _REPO_ROOT
        self.extra_env = dict(env or {})
        self.startup_timeout_s = startup_timeout_s
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None

    @property
    def url(self) -> str:
        if self.process is None:
            raise ServerUnavailable(f"OpenEnvServer {self.app}: not started; call start() first")
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        if self.process is not None:
            return self
        self.port = _free_port()
        log = self._log_file()
        env = {**os.environ, **self.extra_env, "PYTHONPATH": _pythonpath(self.cwd)}
        command = [self.python, "-m", "uvicorn", self.app, "--host", "127.0.0.1", "--port", str(self.port),
                   "--log-level", "warning", "--ws-max-size", str(64 * 2**20)]
        with log:  # the child holds its own copy of the handle
            try:
                self.process = subprocess.Popen(command, cwd=self.cwd, env=env, stdout=log, stderr=log)
            except OSError as error:  # no such interpreter or folder
                raise ServerStartError(f"OpenEnv server {self.app}: cannot run {self.python} in {self.cwd}: {error}") from error
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        if self._log_path is not None:
            self._log_path.unlink(missing_ok=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _wait_healthy(self) -> None:
        import httpx

        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                log = self._log_tail()
                raise ServerStartError(
                    f"OpenEnv server {self.app} exited with {self.process.returncode}: {self._diagnosis(log)}\n{log}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise ServerStartError(
            f"OpenEnv server {self.app} did not answer /health within {self.startup_timeout_s:g} s "
            f"(python {self.python}): {self._log_tail()}")

    def _log_file(self) -> Any:
        import tempfile

        handle = tempfile.NamedTemporaryFile(prefix="openenv-server-", suffix=".log", delete=False)  # noqa: SIM115 - closed in start()
        self._log_path = Path(handle.name)
        return handle

    def _log_tail(self) -> str:
        if self._log_path is None or not self._log_path.exists():
            return "(no log)"
        return self._log_path.read_text(errors="replace")[-2000:].strip()

    def _diagnosis(self, log: str) -> str:
        """What the server's log says failed, in one sentence that names the fix."""
        module, _, attribute = self.app.partition(":")
        if "No module named uvicorn" in log:
            return f"{self.python} has no uvicorn: it is not the OpenEnv venv (scripts/install_openenv.sh makes one; or pass python=)"
        missing = re.findall(r"No module named '([\w.]+)'", log)
        if missing:
            name = missing[-1]
            if module == name or module.startswith(f"{name}."):
                return (f"the app's module {module!r} is not on the server's path (cwd {self.cwd}, which is put first on "
                        f"its PYTHONPATH): pass cwd= the folder that holds {name.split('.')[0]!r}, or install it into {self.python}")
            if name.split(".")[0] in ("openenv", "fastmcp", "fastapi"):
                return f"{self.python} cannot import {name!r}: it is not the OpenEnv venv (scripts/install_openenv.sh makes one; or pass python=)"
            return (f"{module!r} imports {name!r}, which {self.python} cannot import: install it into that interpreter, "
                    f"or put it in the server's folder (cwd {self.cwd})")
        if f'Attribute "{attribute}" not found' in log:
            return f"module {module!r} has no attribute {attribute!r}: check app= ('module:attribute')"
        return "see its log below"


_SHARED: dict[tuple[str, str, str], OpenEnvServer] = {}
_SHARED_LOCK = threading.Lock()


def shared_server(app: str | None, python: str | None = None, cwd: str | Path | None = None) -> OpenEnvServer:
    """One started server per (app, interpreter, folder) in this process, stopped when the process exits."""
    if not app:
        raise ConfigError("openenv_env: app= names the server to start ('module:app')")
    key = (app, openenv_python(python), str(cwd or _REPO_ROOT))
    with _SHARED_LOCK:
        server = _SHARED.get(key)
        if server is None or server.process is None or server.process.poll() is not None:
            server = _SHARED[key] = OpenEnvServer(app, python=python, cwd=cwd).start()
            atexit.register(server.stop)
        return server


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _pythonpath(cwd: Path) -> str:
    existing = os.environ.get("PYTHONPATH", "")
    return f"{cwd}{os.pathsep}{existing}" if existing else str(cwd)
