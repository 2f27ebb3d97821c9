"""Python sandbox MCP server: runs a snippet in a fresh subprocess under resource limits.

Each call gets a new interpreter (`python -I`, isolated: no user site, no PYTHON* variables) in a
temporary working directory that is deleted afterwards (sandbox_folder.py: iteratively, in a worker
thread; the run's report is made first and returned whatever the removal meets), with:
  * a wall-clock limit (the whole process group is killed when it passes),
  * RLIMIT_CPU (CPU seconds) and RLIMIT_AS (address space, i.e. memory),
  * a total memory budget across the runs in flight: a run waits until its RLIMIT_AS (and its
    folder, when that is a tmpfs) fits,
  * RLIMIT_NOFILE, which with seccomp's refusals (no memfd, no shared memory) bounds the memory a run
    holds outside its address space: socket and pipe buffers,
  * when the server is root, RLIMIT_NPROC for uid 65534, which caps threads (it counts every task of
    that user on the machine, so concurrent runs share it), and a private tmpfs as the working folder
    with a size and an inode count (confine.py),
  * stdout and stderr read through pipes, capped: the server never opens a file the snippet could
    have replaced (a fifo would block its event loop, a symlink would make it read for the snippet),
    and a snippet that prints forever is killed once it has printed `output_file_mb`,
  * RLIMIT_FSIZE on the files it writes,
  * on Linux, kernel confinement (confine.py): files may be written only inside the temporary
    directory (Landlock), another user with no capability but reading when the server is root, no
    new processes, no sockets, no memfd or shared memory (seccomp; threads are fine).

This contains accidents and runaway code from a model being trained; it is NOT a hardened boundary
(the code can still read files the server's user can read, and without Landlock it can write them).
The server logs at start which confinement this kernel gives. Run hostile workloads in a container.

    python -m rlfactory_nb.tools.servers.python_sandbox --timeout-s 5 --cpu-s 5 --memory-mb 512
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import os
import resource
import signal
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from mcp.server.mcpserver import MCPServer

from rlfactory_nb.tools.servers import confine, sandbox_folder

_CHUNK = 1 << 16
_OPEN_FILES = 256
"""RLIMIT_NOFILE: every descriptor may pin a socket's or pipe's buffer (~200 KB), outside RLIMIT_AS"""


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
    """largest file the code may write (RLIMIT_FSIZE); also the most it may print on stdout or on
    stderr before it is killed"""
    disk_mb: int = 64
    """size of the working folder's tmpfs (memory, so it counts in `total_memory_mb`); only where the
    folder is private (root with CAP_SYS_ADMIN), else only `output_file_mb` a file bounds the disk"""
    files: int = 4096
    """files and folders the working folder may hold (the tmpfs's nr_inodes), where it is private"""
    threads: int = 512
    """RLIMIT_NPROC for uid 65534 when the server is root: tasks (threads) of that user on the whole
    machine, shared by every run in flight of every server (a crowded machine's runs may find fewer)"""
    total_memory_mb: int = 4096
    """memory_mb (plus disk_mb for a tmpfs folder) summed over the runs of one server in flight; a
    run waits until its share fits (4 GB: seven runs at the default 512 + 64 MB, a sixth of a 24 GB
    machine)"""
    confine: bool = True
    """kernel confinement (confine.py): writes only in the temp dir, another user when root, no new
    processes, no sockets"""
    network: bool = False
    """allow sockets (only matters when `confine` is on and the kernel supports it)"""

    def __post_init__(self) -> None:
        if self.total_memory_mb < self.memory_mb + self.disk_mb:
            raise ValueError(
                f"total_memory_mb ({self.total_memory_mb}) must hold at least one run's memory_mb and disk_mb"
                f" ({self.memory_mb} + {self.disk_mb})"
            )


@dataclass(frozen=True)
class RunReport:
    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    output_exceeded: bool = False
    """killed for printing more than `Limits.output_file_mb`"""
    not_started: str = ""
    """why the process could not start (the sandbox user's threads are at RLIMIT_NPROC); "" when it did"""

    def text(self) -> str:
        """What the model reads."""
        if self.not_started:
            status = f"not started: {self.not_started}"
        elif self.timed_out:
            status = "killed: wall-time limit exceeded"
        elif self.output_exceeded:
            status = "killed: output limit exceeded"
        elif self.exit_code is not None and self.exit_code < 0:
            status = f"killed by signal {_signal_name(-self.exit_code)}"
        else:
            status = f"exit code {self.exit_code}"
        return f"{status}\n--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}".rstrip() + "\n"


class MemoryBudget:
    """Memory promised to the runs in flight (their RLIMIT_AS and tmpfs folder): a run waits until its
    share fits in the total, so concurrent calls cannot add up to more than `total_mb`. One per server
    (event loop)."""

    def __init__(self, total_mb: int):
        self.total_mb = total_mb
        self.reserved_mb = 0
        self._changed = asyncio.Condition()

    @asynccontextmanager
    async def reserve(self, memory_mb: int) -> AsyncIterator[None]:
        async with self._changed:
            await self._changed.wait_for(lambda: self.reserved_mb + memory_mb <= self.total_mb)
            self.reserved_mb += memory_mb
        try:
            yield
        finally:
            async with self._changed:
                self.reserved_mb -= memory_mb
                self._changed.notify_all()


@dataclass
class _Output:
    """What one pipe carried: the first `keep` bytes and how many there were in all."""

    keep: int
    data: bytearray = field(default_factory=bytearray)
    total: int = 0

    async def drain(self, descriptor: int, limit: int) -> bool:
        """Read a non-blocking pipe to its end; True as soon as more than `limit` bytes came."""
        loop = asyncio.get_running_loop()
        while True:
            readable = loop.create_future()
            loop.add_reader(descriptor, readable.set_result, None)
            try:
                await readable
            finally:
                loop.remove_reader(descriptor)
            try:
                chunk = os.read(descriptor, _CHUNK)
            except BlockingIOError:
                continue
            if not chunk:
                return False
            self.data += chunk[: max(self.keep - len(self.data), 0)]
            self.total += len(chunk)
            if self.total > limit:
                return True

    def text(self, max_chars: int) -> str:
        text = self.data.decode("utf-8", errors="replace")
        if len(text) > max_chars or self.total > len(self.data):
            return f"{text[:max_chars]}\n[... output truncated: {self.total} bytes in all]"
        return text


async def run_code(code: str, limits: Limits = Limits(), budget: MemoryBudget | None = None) -> RunReport:
    """Run `code` in a limited subprocess and report what happened. With a `budget`, wait first until
    this run's memory fits in it (the server shares one among its calls)."""
    budget = budget or MemoryBudget(limits.total_memory_mb)
    confinement = confine.prepare(limits.network) if limits.confine else None
    in_memory = confinement is not None and confinement.private_folder
    async with budget.reserve(limits.memory_mb + (limits.disk_mb if in_memory else 0)):
        folder = tempfile.mkdtemp(prefix="rlf-sandbox-")
        try:
            return await _run_in(folder, code, limits, confinement)
        finally:
            # in a thread: the folder may hold whatever tree the snippet made (a thread runs to its
            # end, so a cancelled call's folder is removed all the same)
            await asyncio.to_thread(sandbox_folder.remove, folder)


async def _run_in(folder: str, code: str, limits: Limits, confinement: confine.Confinement | None) -> RunReport:
    """Run `code` from `folder`/main.py with `folder`/work as the working directory (the server's
    script stays outside what the snippet may write, and outside its tmpfs when it has one)."""
    script = Path(folder) / "main.py"
    script.write_text(code, encoding="utf-8")
    workdir = str(Path(folder) / "work")
    os.mkdir(workdir, 0o700)
    uid = confinement.uid if confinement is not None else None
    if uid is not None:
        os.chown(workdir, uid, uid)
    options = confine.folder_options(limits.disk_mb, limits.files, uid)
    # Our own pipes, not asyncio's: its Process.wait() would also wait for pipes a killed snippet's
    # escaped children might hold, and for output we stopped reading.
    (out_read, out_write), (err_read, err_write) = os.pipe(), os.pipe()
    try:
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-I",
                str(script),
                cwd=workdir,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out_write,
                stderr=err_write,
                env=_minimal_env(workdir),
                preexec_fn=lambda: _apply_limits(limits, confinement, workdir, options),
                start_new_session=True,
            )
        except BlockingIOError as error:  # EAGAIN from exec: uid 65534 already has `threads` tasks
            if error.errno != errno.EAGAIN or uid is None:
                raise
            return RunReport(None, "", "", not_started=f"the sandbox's user has {limits.threads} threads running"
                             " (RLIMIT_NPROC, shared by all runs); try again when other runs end")
        finally:
            os.close(out_write)
            os.close(err_write)
        keep = limits.output_chars * 4 + 4  # at most 4 bytes per character in UTF-8
        out, err = _Output(keep), _Output(keep)
        timed_out, exceeded = await _supervise(process, {out_read: out, err_read: err}, limits)
    finally:
        os.close(out_read)
        os.close(err_read)
    return RunReport(
        exit_code=process.returncode,
        stdout=out.text(limits.output_chars),
        stderr=err.text(limits.output_chars),
        timed_out=timed_out,
        output_exceeded=exceeded,
    )


async def _supervise(
    process: asyncio.subprocess.Process, outputs: dict[int, _Output], limits: Limits
) -> tuple[bool, bool]:
    """Wait for the process while reading its output (pipe read ends to records); kill its whole
    group (children too) when the wall time passes or it prints too much.
    Returns (timed out, output exceeded)."""
    limit = limits.output_file_mb * 1024 * 1024
    for descriptor in outputs:
        os.set_blocking(descriptor, False)
    drains = [asyncio.create_task(output.drain(descriptor, limit)) for descriptor, output in outputs.items()]
    exited = asyncio.create_task(process.wait())
    deadline = asyncio.get_running_loop().time() + limits.timeout_s
    pending, timed_out, exceeded = {exited, *drains}, False, False
    try:
        while not exited.done() and not exceeded:
            done, pending = await asyncio.wait(
                pending, timeout=deadline - asyncio.get_running_loop().time(), return_when=asyncio.FIRST_COMPLETED
            )
            timed_out = not done
            exceeded = any(task.result() for task in done if task is not exited)
            if timed_out:
                break
    except asyncio.CancelledError:  # the call was cancelled: its process must not outlive it
        _kill_group(process.pid)
        for task in (exited, *drains):
            task.cancel()
        raise
    if timed_out or exceeded:
        _kill_group(process.pid)
    await exited
    await asyncio.wait(drains, timeout=1.0)  # the rest of the output, unless an escaped child holds a pipe
    for task in drains:
        task.cancel()
    await asyncio.gather(*drains, return_exceptions=True)
    return timed_out, exceeded


def _apply_limits(limits: Limits, confinement: confine.Confinement | None, workdir: str, options: bytes) -> None:
    """Runs in the child between fork and exec."""
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))
    memory = limits.memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    size = limits.output_file_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (_OPEN_FILES, _OPEN_FILES))
    if confinement is not None and confinement.uid is not None:
        # before the switch: the kernel checks it there (and exec fails when the user is over it);
        # only for uid 65534: for the server's own user it would count the trainer's threads too
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.threads, limits.threads))
    if confinement is not None:
        confinement.apply(workdir, options)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _minimal_env(workdir: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": workdir,
        "TMPDIR": workdir,  # tempfile writes where the confinement allows
        "LANG": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
    }


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def build_server(limits: Limits = Limits()) -> MCPServer:
    server = MCPServer("python_sandbox", log_level="WARNING")
    budget = MemoryBudget(limits.total_memory_mb)

    @server.tool(name="run_python")
    async def run_python(code: str) -> str:
        """Run a Python 3 program in a fresh sandboxed process and return its exit status, stdout and
        stderr. Print what you want to see. Limits: wall time, CPU time, memory, threads, output size,
        and the size and file count of its working folder."""
        return (await run_code(code, limits, budget)).text()

    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run Python snippets under limits, as an MCP server (stdio)")
    defaults = Limits()
    parser.add_argument("--timeout-s", type=float, default=defaults.timeout_s)
    parser.add_argument("--cpu-s", type=int, default=defaults.cpu_s)
    parser.add_argument("--memory-mb", type=int, default=defaults.memory_mb)
    parser.add_argument("--output-chars", type=int, default=defaults.output_chars)
    parser.add_argument("--output-file-mb", type=int, default=defaults.output_file_mb)
    parser.add_argument("--disk-mb", type=int, default=defaults.disk_mb, help="size of the folder's tmpfs (when root)")
    parser.add_argument("--files", type=int, default=defaults.files, help="files in the folder's tmpfs (when root)")
    parser.add_argument(
        "--threads", type=int, default=defaults.threads,
        help="RLIMIT_NPROC of uid 65534 (when root): threads of all runs on the machine together",
    )
    parser.add_argument(
        "--total-memory-mb", type=int, default=defaults.total_memory_mb,
        help="memory of all runs in flight together; more calls wait",
    )
    parser.add_argument("--no-confine", action="store_true", help="rlimits only: no Landlock, no seccomp, same user")
    parser.add_argument("--network", action="store_true", help="allow sockets (TCP, UDP, ...) from the code")
    args = parser.parse_args(argv)
    limits = Limits(
        args.timeout_s, args.cpu_s, args.memory_mb, args.output_chars, args.output_file_mb,
        disk_mb=args.disk_mb, files=args.files, threads=args.threads, total_memory_mb=args.total_memory_mb,
        confine=not args.no_confine, network=args.network,
    )
    confinement = confine.prepare(limits.network).describe() if limits.confine else "off (--no-confine)"
    print(f"python_sandbox: confinement: {confinement}", file=sys.stderr, flush=True)
    build_server(limits).run("stdio")


if __name__ == "__main__":
    main()
