"""What a sandboxed snippet can hold beyond its address space, found by probing (issue #32): memory in
memfds and shared memory, disk bytes and files in its folder, threads, and a folder tree that broke or
stalled the cleanup. Each probe is bounded to a small multiple of the limit it checks, so a sandbox
without the limit cannot hurt the machine the tests run on. See docs/security.md."""

import asyncio
import os
import time
from pathlib import Path

import pytest

from rlfactory_nb.tools.servers import confine
from rlfactory_nb.tools.servers.python_sandbox import Limits, run_code

pytestmark = pytest.mark.timeout(120)
LIMITS = Limits(timeout_s=20, cpu_s=10, memory_mb=256, output_chars=2000, output_file_mb=1)
CONFINED = confine.prepare()
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox changes user only when started as root")
needs_seccomp = pytest.mark.skipif(not CONFINED.no_processes, reason="no seccomp filter for this architecture")
needs_private_folder = pytest.mark.skipif(
    not CONFINED.private_folder, reason="no mount namespace here: the folder is not a tmpfs of its own"
)


# -- memory the address-space limit does not see -------------------------------------------------------

MEMFD = (
    "import os\n"
    "held = 0\n"
    "try:\n"
    "    while held < 512:\n"  # twice the 256 MB limit, then stop: the probe must not hurt the host
    "        descriptor = os.memfd_create('hold')\n"
    "        os.write(descriptor, bytes(1024 * 1024))\n"
    "        held += 1\n"
    "except OSError as error:\n"
    "    print(type(error).__name__)\n"
    "print(held)\n"
)


@needs_seccomp
async def test_memfd_memory_is_refused():
    """Before: memfds (each within RLIMIT_FSIZE) held 512 MiB from a run limited to 256 MB."""
    report = await run_code(MEMFD, LIMITS)
    refused, held = report.stdout.split()
    assert refused == "PermissionError" and int(held) == 0, report.text()


SHARED = (
    "import ctypes, ctypes.util, errno, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "def checked(result):\n"
    "    if result < 0:\n"
    "        raise OSError(ctypes.get_errno(), 'refused')\n"
    "    return result\n"
    "try:\n"
    "    {attempt}\n"
    "    print('DONE')\n"
    "except OSError:\n"  # EPERM from seccomp or Landlock, EROFS from the read-only /dev/shm
    "    print('refused')\n"
)
SHARED_MEMORY = {
    # each creates a little and removes it at once: the point is whether creating is allowed at all
    "sysv shm": "libc.shmctl(checked(libc.shmget(0, 1 << 20, 0o1600)), 0, None)",
    "sysv message queue": "libc.msgctl(checked(libc.msgget(0, 0o1600)), 0, None)",
    "posix message queue": (
        "rt = ctypes.CDLL(ctypes.util.find_library('rt'), use_errno=True)\n"
        "    checked(rt.mq_open(b'/rlf-probe', os.O_CREAT | os.O_RDWR, 0o600, None)); rt.mq_unlink(b'/rlf-probe')"
    ),
    "posix shm": (
        "from multiprocessing import shared_memory\n"
        "    shared_memory.SharedMemory(create=True, size=1 << 20).unlink()"
    ),
    "/dev/shm file": "open('/dev/shm/rlf-probe', 'wb').write(bytes(1 << 20)); os.unlink('/dev/shm/rlf-probe')",
}


@needs_seccomp
@pytest.mark.parametrize("kind", list(SHARED_MEMORY))
async def test_shared_memory_that_outlives_the_run_is_refused(kind):
    """Before: SysV segments and message queues could be made (they outlive the process, holding memory
    until removed); /dev/shm and POSIX shm were refused by Landlock already."""
    report = await run_code(SHARED.format(attempt=SHARED_MEMORY[kind]), LIMITS)
    assert report.stdout == "refused\n", report.text()


DESCRIPTORS = (
    "import os\n"
    "opened = 0\n"
    "try:\n"
    "    while opened < 2048:\n"
    "        os.pipe()\n"  # each may pin a buffer in the kernel, outside RLIMIT_AS
    "        opened += 2\n"
    "except OSError as error:\n"
    "    print(type(error).__name__)\n"
    "print(opened)\n"
)


async def test_open_descriptors_are_capped():
    """Before: the server's own RLIMIT_NOFILE (20,000 here, a million in some containers), each
    descriptor able to pin a pipe's or socket's buffer; after: 256."""
    report = await run_code(DESCRIPTORS, LIMITS)
    error, opened = report.stdout.split()
    assert error == "OSError" and int(opened) <= 256, report.text()


# -- disk and files in the working folder --------------------------------------------------------------

WRITE_MB = (
    "import os\n"
    "written = 0\n"
    "try:\n"
    "    while written < {most}:\n"
    "        with open(f'f{{written}}', 'wb') as file:\n"
    "            file.write(bytes(1024 * 1024))\n"  # one RLIMIT_FSIZE (1 MB) a file
    "        written += 1\n"
    "except OSError as error:\n"
    "    print(type(error).__name__)\n"
    "print(written)\n"
)


@needs_private_folder
async def test_disk_bytes_in_the_folder_are_capped():
    """Before: 256 files of 1 MB each (4x the default 64 MB) were written, with no cap but the wall time."""
    most = 4 * Limits().disk_mb
    report = await run_code(WRITE_MB.format(most=most), LIMITS)
    error, written = report.stdout.split()
    assert error == "OSError" and int(written) <= Limits().disk_mb, report.text()


MAKE_FILES = (
    "import os\n"
    "made = 0\n"
    "try:\n"
    "    while made < {most}:\n"
    "        os.close(os.open(f'f{{made}}', os.O_CREAT | os.O_WRONLY))\n"
    "        made += 1\n"
    "except OSError as error:\n"
    "    print(type(error).__name__)\n"
    "print(made)\n"
)


@needs_private_folder
async def test_the_number_of_files_in_the_folder_is_capped():
    """Before: 4x the default cap of empty files were made."""
    most = 4 * Limits().files
    report = await run_code(MAKE_FILES.format(most=most), LIMITS)
    error, made = report.stdout.split()
    assert error == "OSError" and int(made) <= Limits().files, report.text()


# -- threads -------------------------------------------------------------------------------------------

THREADS = (
    "import threading, time\n"
    "threading.stack_size(64 * 1024)\n"
    "stop, started = threading.Event(), 0\n"
    "try:\n"
    "    while started < {most}:\n"
    "        threading.Thread(target=stop.wait, daemon=True).start()\n"
    "        started += 1\n"
    "except RuntimeError as error:\n"
    "    print('refused')\n"
    "stop.set()\n"
    "print(started)\n"
)


@needs_root
async def test_threads_are_capped():
    """Before: 4x the default cap of threads started (7,000 in the issue; eight such runs exhaust the
    host's PIDs). RLIMIT_NPROC counts every task of uid 65534 on the machine, so the cap is shared."""
    most = 4 * Limits().threads
    report = await run_code(THREADS.format(most=most), LIMITS)
    refused, started = report.stdout.split()
    assert refused == "refused" and int(started) < Limits().threads, report.text()


# -- cleanup -------------------------------------------------------------------------------------------

DEEP = (
    "import os\n"
    "for _ in range(3000):\n"
    "    os.mkdir('d')\n"
    "    os.chdir('d')\n"
    "open('leaf', 'w').write('x')\n"
    "print('built')\n"
)
FOLDERS = {"confined": LIMITS, "unconfined": Limits(timeout_s=20, confine=False)}


@pytest.mark.parametrize("confinement", list(FOLDERS))
async def test_a_deep_folder_chain_is_removed_and_the_output_kept(confinement, monkeypatch, tmp_path):
    """Before: the cleanup raised RecursionError, the model saw only a tool error and the folders stayed."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    report = await run_code(DEEP, FOLDERS[confinement])
    assert report.stdout == "built\n" and report.exit_code == 0, report.text()
    assert list(tmp_path.iterdir()) == []


async def test_cleanup_does_not_block_the_event_loop(monkeypatch, tmp_path):
    """Before: deleting the snippet's files ran on the event loop (125k files stalled it 2.8 s).
    Unconfined, so the files land on the host's disk and the server has to delete them."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    made = 30_000
    longest, stop = 0.0, asyncio.Event()

    async def heartbeat():
        nonlocal longest
        while not stop.is_set():
            before = time.perf_counter()
            await asyncio.sleep(0.005)
            longest = max(longest, time.perf_counter() - before)

    beating = asyncio.create_task(heartbeat())
    report = await run_code(MAKE_FILES.format(most=made), Limits(timeout_s=30, confine=False))
    stop.set()
    await beating
    assert report.stdout == f"{made}\n", report.text()
    assert list(tmp_path.iterdir()) == []
    assert longest < 0.1, f"the event loop stalled {longest:.2f} s"


def test_a_cancelled_run_is_killed_and_its_folder_removed(monkeypatch, tmp_path):
    """Before: the folder went, but the process slept on past its wall time (nothing killed it)."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))

    async def cancelled():
        run = asyncio.create_task(run_code("import time\ntime.sleep(30)", LIMITS))
        await asyncio.sleep(1)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        await asyncio.sleep(0.5)

    asyncio.run(cancelled())
    assert list(tmp_path.iterdir()) == []
    assert not [cmdline for cmdline in _command_lines() if str(tmp_path) in cmdline]


def _command_lines() -> list[str]:
    lines = []
    for entry in Path("/proc").iterdir():
        try:
            lines.append((entry / "cmdline").read_bytes().decode(errors="replace"))
        except OSError:  # not a process, or gone
            pass
    return lines
