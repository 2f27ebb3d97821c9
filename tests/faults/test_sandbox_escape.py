"""Escapes from the python sandbox found by probing it (issue #19): reading other processes'
environments, hanging or fooling the server through its own files, sockets other than TCP, changing
outside files' metadata with root's capabilities, no total memory cap, and an immutable file that
broke the cleanup. Each test plays the attack through the public API. See docs/security.md."""

import asyncio
import os
import socket
from pathlib import Path

import pytest

from rlfactory_nb.tools import ToolSet
from rlfactory_nb.tools.servers import confine
from rlfactory_nb.tools.servers.python_sandbox import Limits, run_code

pytestmark = pytest.mark.timeout(120)
LIMITS = Limits(timeout_s=5, cpu_s=2, memory_mb=256, output_chars=2000, output_file_mb=1)
CONFINED = confine.prepare()
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox changes user only when started as root")
needs_seccomp = pytest.mark.skipif(not CONFINED.no_processes, reason="no seccomp filter for this architecture")
REFUSED = "import os, socket\ntry:\n    {attempt}\n    print('DONE')\nexcept PermissionError:\n    print('refused')\n"


def attempts(*lines: str) -> str:
    """A snippet that runs each line and prints 'refused' where it raised PermissionError, else 'DONE'."""
    return "".join(REFUSED.format(attempt=line) for line in lines)


def sandbox_server(*args: str) -> dict:
    return {"name": "sandbox", "command": "python", "args": ["-m", "rlfactory_nb.tools.servers.python_sandbox", *args]}


# -- 2. other processes' environments ------------------------------------------------------------------

@needs_root
async def test_sandboxed_code_cannot_read_the_environment_of_the_processes_above_it():
    trainer = await asyncio.create_subprocess_exec(
        "sleep", "60", env={"PATH": "/usr/bin:/bin", "RLF_PLANTED_SECRET": "hunter2"}
    )
    try:
        report = await run_code(
            attempts(f"open('/proc/{trainer.pid}/environ').read()", "open(f'/proc/{os.getppid()}/environ').read()"),
            LIMITS,
        )
    finally:
        trainer.kill()
        await trainer.wait()
    assert report.stdout.split() == ["refused", "refused"], report.text()
    assert "hunter2" not in report.text()


# -- 3 and 4. the server never reads files the sandbox can replace -------------------------------------

PLANT = (
    "import os\n"
    "for name in ('.stdout', '.stderr'):\n"
    "    try: os.unlink(name)\n"
    "    except FileNotFoundError: pass\n"
    "    {plant}\n"
    "print('planted')\n"
)


async def test_a_fifo_in_place_of_the_output_file_does_not_hang_the_server():
    async with ToolSet.from_config({"servers": [sandbox_server("--timeout-s", "3")]}, cache=False, timeout_s=15) as tools:
        planted = await tools.call("run_python", {"code": PLANT.format(plant="os.mkfifo(name)")})
        after = await tools.call("run_python", {"code": "print(6 * 7)"})
    assert planted.ok and "planted" in planted.content, planted.content
    assert after.ok and "exit code 0" in after.content and "42" in after.content, after.content


async def test_a_symlink_in_place_of_the_output_file_does_not_leak_the_servers_environment():
    report = await run_code(PLANT.format(plant="os.symlink('/proc/self/environ', name)"), LIMITS)
    assert report.stdout == "planted\n" and report.stderr == "", report.text()
    assert "PATH=" not in report.text()


# -- 6. no network sockets ----------------------------------------------------------------------------

@pytest.fixture
def listeners(tmp_path):
    """A TCP listener, a UDP socket and a unix path listener in this process, for the sandbox to reach."""
    tcp = socket.create_server(("127.0.0.1", 0))
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(tmp_path / "listener.sock"))
    unix.listen()
    os.chmod(tmp_path, 0o755)
    os.chmod(tmp_path / "listener.sock", 0o777)
    yield {"tcp": tcp.getsockname()[1], "udp": udp.getsockname()[1], "unix": str(tmp_path / "listener.sock")}
    for sock in (tcp, udp, unix):
        sock.close()


SOCKETS = {
    "mptcp": "socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262).connect(('127.0.0.1', {tcp}))",
    "tcp6": "socket.socket(socket.AF_INET6, socket.SOCK_STREAM).connect(('::1', {tcp}))",
    "udp": "socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', {udp}))",
    "unix path": "socket.socket(socket.AF_UNIX).connect({unix!r})",
    "abstract unix": "socket.socket(socket.AF_UNIX).bind('\\0rlf-test')",
    "raw icmp": "socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)",
    "icmp datagram": "socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)",
    "netlink": "socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)",
    "packet": "socket.socket(socket.AF_PACKET, socket.SOCK_RAW)",
}


@needs_seccomp
@pytest.mark.parametrize("kind", list(SOCKETS))
async def test_the_sandbox_can_open_no_network_socket(kind, listeners):
    report = await run_code(attempts(SOCKETS[kind].format(**listeners)), LIMITS)
    assert report.stdout == "refused\n", report.text()


@needs_seccomp
async def test_asyncio_still_works_in_the_sandbox():
    code = "import asyncio\nasync def main(): return 42\nprint(asyncio.run(main()))"
    report = await run_code(code, LIMITS)
    assert report.stdout == "42\n", report.text()


# -- 7 and 15. no capabilities: outside files keep their metadata; no immutable files -------------------

FS_IOC_SETFLAGS, FS_IMMUTABLE_FL = 0x40086602, 0x10
MAKE_IMMUTABLE = (
    "import fcntl, os, struct\n"
    "open('stuck', 'w').write('x')\n"
    "descriptor = os.open('stuck', os.O_RDONLY)\n"
    "try:\n"
    f"    fcntl.ioctl(descriptor, {FS_IOC_SETFLAGS:#x}, struct.pack('i', {FS_IMMUTABLE_FL:#x}))\n"
    "    print('immutable')\n"
    "except PermissionError:\n"
    "    print('refused')\n"
    "print(os.getcwd())\n"
)


@needs_root
async def test_the_sandbox_cannot_change_the_metadata_of_outside_files(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    before = victim.stat()
    report = await run_code(
        attempts(
            f"os.chmod({str(victim)!r}, 0o777)",
            f"os.chown({str(victim)!r}, 65534, 65534)",
            f"os.utime({str(victim)!r}, (0, 0))",
            f"os.utime({str(victim)!r})",
            f"os.setxattr({str(victim)!r}, 'trusted.x', b'1')",
            f"os.setxattr({str(victim)!r}, 'user.x', b'1')",
        ),
        LIMITS,
    )
    assert report.stdout.split() == ["refused"] * 6, report.text()
    after = victim.stat()
    assert (after.st_mode, after.st_uid, after.st_mtime_ns) == (before.st_mode, before.st_uid, before.st_mtime_ns)


@needs_root
async def test_the_sandbox_keeps_no_capability_but_reading():
    code = "print(*[line.split()[1] for line in open('/proc/self/status') if line.startswith(('CapEff', 'CapBnd'))])"
    report = await run_code(code, LIMITS)
    read_search = 1 << 2  # CAP_DAC_READ_SEARCH: the interpreter may live in a folder only root can enter
    assert [int(mask, 16) & ~read_search for mask in report.stdout.split()] == [0, 0], report.text()


@needs_root
async def test_the_sandbox_cannot_make_a_file_immutable():
    report = await run_code(MAKE_IMMUTABLE, LIMITS)
    answer, workdir = report.stdout.split()
    assert answer == "refused", report.text()
    assert not Path(workdir).exists()


@needs_root
async def test_an_immutable_file_made_without_confinement_is_still_cleaned_up():
    report = await run_code(MAKE_IMMUTABLE, Limits(timeout_s=5, confine=False))
    answer, workdir = report.stdout.split()
    assert answer == "immutable" and report.exit_code == 0, report.text()
    assert not Path(workdir).exists()


# -- 8. a total memory budget -------------------------------------------------------------------------

async def test_concurrent_runs_stay_within_the_total_memory_budget():
    """2048 MB a run under the default 4096 MB budget: at most two of six run at once, the rest wait."""
    code = "import time\nx = bytearray(100 * 1024**2)\nstart = time.time(); time.sleep(1)\nprint(start, time.time())"
    server = sandbox_server("--memory-mb", "2048", "--timeout-s", "5")
    async with ToolSet.from_config({"servers": [server]}, cache=False, timeout_s=30) as tools:
        results = await tools.call_many([("run_python", {"code": code})] * 6)
    assert all(result.ok and "exit code 0" in result.content for result in results), results
    spans = [[float(value) for value in result.content.split("--- stdout ---")[1].split()[:2]] for result in results]
    most_at_once = max(sum(start <= moment < end for start, end in spans) for moment, _ in spans)
    assert most_at_once <= 2, spans


def test_the_budget_must_hold_one_run():
    with pytest.raises(ValueError, match="total_memory_mb"):
        Limits(memory_mb=1024, total_memory_mb=512)

