"""Python sandbox MCP server: runs a snippet in a fresh subprocess under resource limits.

Each call gets a new interpreter (`python -I`, isolated: no user site, no PYTHON* variables) in a
temporary working directory that is deleted afterwards, with:
  * a wall-clock limit (the whole process group is killed when it passes),
  * RLIMIT_CPU (CPU seconds) and RLIMIT_AS (address space, i.e. memory),
  * RLIMIT_FSIZE on its output files: stdout and stderr go to files in the temp dir, so a snippet that
    prints forever is stopped at the cap instead of filling the server's memory,
  * on Linux, kernel confinement (confine.py): files may be written only inside the temporary
    directory (Landlock), no new processes can be started (seccomp; threads are fine), and where the
    kernel allows, no TCP connections. RLIMIT_NPROC is not used: it is per user and root ignores it.

This contains accidents and runaway code from a model being trained; it is NOT a hardened boundary
(the code can still read files the server's user can read, and without Landlock it can write them).
The server logs at start which confinement this kernel gives. Run hostile workloads in a container.

    python -m rlfactory_nb.tools.servers.python_sandbox --timeout-s 5 --cpu-s 5 --memory-mb 512
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import signal
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mcp.server.mcpserver import MCPServer

from rlfactory_nb.tools.servers import confine


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 10.0
    """wall-clock seconds before the process group is killed"""
    cpu_s: int = 10
    """CPU seconds (RLIMIT_CPU)"""
    memory_mb: int = 512
    """address-space limit (RLIMIT_AS); the interpreter itself needs about 30 MB"""
    output_chars: int = 4000
    """characters of stdout and of stderr reported back"""
    output_file_mb: int = 8
    """largest file the code may write (RLIMIT_FSIZE), including its stdout and stderr"""
    confine: bool = True
    """kernel confinement (confine.py): writes only in the temp dir, no new processes, no TCP"""
    network: bool = False
    """allow TCP connections (only matters when `confine` is on and the kernel supports it)"""


@dataclass(frozen=True)
class RunReport:
    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool = False

    def text(self) -> str:
        """What the model reads."""
        if self.timed_out:
            status = "killed: wall-time limit exceeded"
        elif self.exit_code is not None and self.exit_code < 0:
            status = f"killed by signal {_signal_name(-self.exit_code)}"
        else:
            status = f"exit code {self.exit_code}"
        return f"{status}\n--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}".rstrip() + "\n"


async def run_code(code: str, limits: Limits = Limits()) -> RunReport:
    """Run `code` in a limited subprocess and report what happened."""
    confinement = confine.prepare(limits.network) if limits.confine else None
    with tempfile.TemporaryDirectory(prefix="rlf-sandbox-") as workdir:
        script = Path(workdir) / "main.py"
        script.write_text(code, encoding="utf-8")
        out_path, err_path = Path(workdir) / ".stdout", Path(workdir) / ".stderr"
        with out_path.open("wb") as out, err_path.open("wb") as err:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-I",
                str(script),
                cwd=workdir,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=_minimal_env(workdir),
                preexec_fn=lambda: _apply_limits(limits, confinement, workdir),
                start_new_session=True,
            )
            timed_out = await _wait(process, limits.timeout_s)
        return RunReport(
            exit_code=process.returncode,
            stdout=_read_capped(out_path, limits.output_chars),
            stderr=_read_capped(err_path, limits.output_chars),
            timed_out=timed_out,
        )


async def _wait(process: asyncio.subprocess.Process, timeout_s: float) -> bool:
    """Wait for the process; on timeout kill its whole group (children too). True if it timed out."""
    try:
        await asyncio.wait_for(process.wait(), timeout_s)
        return False
    except TimeoutError:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        await process.wait()
        return True


def _apply_limits(limits: Limits, confinement: confine.Confinement | None, workdir: str) -> None:
    """Runs in the child between fork and exec."""
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))
    memory = limits.memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    size = limits.output_file_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if confinement is not None:
        confinement.apply(workdir)


def _minimal_env(workdir: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": workdir,
        "TMPDIR": workdir,  # tempfile writes where the confinement allows
        "LANG": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
    }


def _read_capped(path: Path, max_chars: int) -> str:
    with path.open("rb") as file:
        data = file.read(max_chars * 4 + 4)  # at most 4 bytes per character in UTF-8
        total = path.stat().st_size
    text = data.decode("utf-8", errors="replace")
    if len(text) > max_chars or total > len(data):
        return f"{text[:max_chars]}\n[... output truncated: {total} bytes in all]"
    return text


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def build_server(limits: Limits = Limits()) -> MCPServer:
    server = MCPServer("python_sandbox", log_level="WARNING")

    @server.tool(name="run_python")
    async def run_python(code: str) -> str:
        """Run a Python 3 program in a fresh sandboxed process and return its exit status, stdout and
        stderr. Print what you want to see. Limits: wall time, CPU time, memory and output size."""
        return (await run_code(code, limits)).text()

    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run Python snippets under limits, as an MCP server (stdio)")
    defaults = Limits()
    parser.add_argument("--timeout-s", type=float, default=defaults.timeout_s)
    parser.add_argument("--cpu-s", type=int, default=defaults.cpu_s)
    parser.add_argument("--memory-mb", type=int, default=defaults.memory_mb)
    parser.add_argument("--output-chars", type=int, default=defaults.output_chars)
    parser.add_argument("--output-file-mb", type=int, default=defaults.output_file_mb)
    parser.add_argument("--no-confine", action="store_true", help="rlimits only: no Landlock, no seccomp")
    parser.add_argument("--network", action="store_true", help="allow TCP connections from the code")
    args = parser.parse_args(argv)
    limits = Limits(
        args.timeout_s, args.cpu_s, args.memory_mb, args.output_chars, args.output_file_mb,
        confine=not args.no_confine, network=args.network,
    )
    confinement = confine.prepare(limits.network).describe() if limits.confine else "off (--no-confine)"
    print(f"python_sandbox: confinement: {confinement}", file=sys.stderr, flush=True)
    build_server(limits).run("stdio")


if __name__ == "__main__":
    main()
