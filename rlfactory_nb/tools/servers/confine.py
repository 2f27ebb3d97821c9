"""Kernel-enforced confinement for the python sandbox's child process (Linux only).

Resource limits (rlimits) bound time, memory and output, but not *where* code writes, what it may
reach, whether it starts processes, nor memory outside the address space (RLIMIT_NPROC is per user
and ignored for root, which containers often are). Four kernel features close that gap without a
container or any package:

* **A private folder** (root with CAP_SYS_ADMIN, probed once): the child enters a mount namespace of
  its own, makes every mount in it private (nothing propagates back to the server's), and mounts a
  tmpfs of fixed size and inode count (`size=`, `nr_inodes=`) on its working folder, and a read-only
  one on /dev/shm. The folder's files live only as long as the child: the namespace, and the tmpfs
  with it, goes when it exits.

* **Landlock** (Linux >= 5.13): after `restrict_self` the process and everything it execs may create,
  write, truncate, rename or delete files only beneath the sandbox's temporary folder (and write to
  /dev/null). Reading is not restricted. Where the kernel has Landlock ABI >= 4, TCP `connect` and
  `bind` are refused too; with ABI >= 6, signals to processes outside the sandbox (the server) and
  abstract unix sockets are refused.
* **Another user** (when the server runs as root): the child switches to uid/gid 65534 with no
  supplementary groups and keeps one capability, CAP_DAC_READ_SEARCH (as an ambient capability, so
  it survives exec): the interpreter may live where only root can enter (/root/.pyenv). Without the
  others it cannot read other processes' /proc/<pid>/environ or memory (ptrace checks: another uid,
  fewer capabilities), nor chmod, chown, utime or setxattr files it does not own, nor make a file
  immutable, nor open raw sockets. Run as an ordinary user, the child stays that user.
* **seccomp**: a small BPF filter makes every way to create a process fail with EPERM (`fork`,
  `vfork`, `clone` without CLONE_THREAD; `clone3` fails with ENOSYS so libc falls back to `clone`);
  threads are still allowed. It also refuses `socket` (any family: no TCP, MPTCP, UDP, ICMP, unix,
  netlink or packet sockets; `socketpair`, which asyncio uses, still works) unless the network is
  allowed, and `io_uring_setup` (io_uring can open sockets past seccomp), `open_by_handle_at`,
  `ptrace`, `process_vm_readv/writev`, `unshare` and `setns`; and every way to hold memory outside
  the address space (RLIMIT_AS) that files and rlimits do not bound: `memfd_create`, `memfd_secret`,
  SysV shared memory and message queues (`shmget`, `msgget`: they outlive the process), POSIX
  message queues (`mq_open`) and `bpf` maps.

Everything that allocates (the BPF program, the libc handle, packed structs) is prepared in the
parent; the child (between fork and exec, in `preexec_fn`) only makes system calls. Where a feature
is missing the confinement says so (`Confinement.describe`) and the sandbox runs with what is left.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import platform
import struct
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

# Landlock (include/uapi/linux/landlock.h); the syscall numbers are the same on x86_64 and aarch64.
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_FS_WRITE_FILE = 1 << 1
_FS_WRITES_V1 = sum(1 << bit for bit in (1, 4, 5, 6, 7, 8, 9, 10, 11, 12))
"""write_file, remove_dir, remove_file, make_char/dir/reg/sock/fifo/block/sym"""
_FS_REFER, _FS_TRUNCATE = 1 << 13, 1 << 14
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2

# A private folder: mount namespace and tmpfs (linux/sched.h, linux/mount.h)
_CLONE_NEWNS = 0x00020000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 1, 2, 4, 1 << 14, 1 << 18
_SHM = b"/dev/shm"

# Identity: uid/gid 65534 ("nobody"), keeping only CAP_DAC_READ_SEARCH (linux/capability.h, prctl.h)
SANDBOX_UID = 65534
_CAP_DAC_READ_SEARCH = 2
_PR_CAPBSET_DROP, _PR_SET_KEEPCAPS, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_RAISE = 24, 8, 47, 2
_CAP_HEADER = struct.pack("<Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
_CAP_DATA = struct.pack("<6I", *(1 << _CAP_DAC_READ_SEARCH,) * 3, 0, 0, 0)  # effective, permitted, inheritable

# seccomp BPF
_LD_ABS_W, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_CLONE_THREAD = 0x00010000
_X32_SYSCALL_BIT = 0x40000000
_DENIED = ("fork", "vfork", "io_uring_setup", "open_by_handle_at", "ptrace", "process_vm_readv",
           "process_vm_writev", "unshare", "setns",
           "memfd_create", "memfd_secret", "shmget", "msgget", "mq_open", "bpf")
# audit arch and system call numbers; aarch64 has no fork/vfork system calls
_ARCHES = {
    "x86_64": (0xC000003E, {
        "clone": 56, "clone3": 435, "fork": 57, "vfork": 58, "socket": 41, "io_uring_setup": 425,
        "open_by_handle_at": 304, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
        "unshare": 272, "setns": 308, "memfd_create": 319, "memfd_secret": 447, "shmget": 29, "msgget": 68,
        "mq_open": 240, "bpf": 321,
    }),
    "aarch64": (0xC00000B7, {
        "clone": 220, "clone3": 435, "socket": 198, "io_uring_setup": 425, "open_by_handle_at": 265,
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "unshare": 97, "setns": 268,
        "memfd_create": 279, "memfd_secret": 447, "shmget": 194, "msgget": 186, "mq_open": 180, "bpf": 280,
    }),
}


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


@dataclass(frozen=True)
class Confinement:
    """What the child will be confined by; build it with `prepare` in the parent, `apply` in the child."""

    landlock_abi: int
    """0 when the kernel has no Landlock"""
    network: bool
    """False: no sockets but socketpair (seccomp), and TCP connect/bind refused by Landlock ABI >= 4"""
    no_processes: bool
    """True when the seccomp filter is available for this machine's architecture"""
    uid: int | None
    """the user the child switches to (SANDBOX_UID when the server runs as root), None: stays"""
    private_folder: bool
    """True: the working folder is a tmpfs of the child's own (mount namespace); False: the host's"""
    last_capability: int
    """the kernel's highest capability number (/proc/sys/kernel/cap_last_cap)"""

    def describe(self) -> str:
        parts = []
        if self.landlock_abi:
            parts.append(f"writes only in the temporary folder (Landlock ABI {self.landlock_abi})")
        else:
            parts.append("writes NOT confined (no Landlock in this kernel)")
        if self.private_folder:
            parts.append("its folder is a tmpfs of its own, with a size and file count (mount namespace)")
        else:
            parts.append("its folder is on the host's file system: disk use NOT capped but per file (no mount namespace)")
        if self.uid is not None:
            parts.append(f"runs as uid {self.uid} with no capability but CAP_DAC_READ_SEARCH")
        else:
            parts.append("runs as the server's user (start the server as root to switch to another)")
        if self.no_processes:
            parts.append("no new processes" + ("" if self.network else ", no sockets") + ", no memfd or shared memory (seccomp)")
        else:
            parts.append("processes, sockets, memfd and shared memory NOT limited (no seccomp filter for this machine)")
        return ", ".join(parts)

    def apply(self, workdir: str, folder_options: bytes) -> None:
        """Confine the calling process. Runs in the child between fork and exec: system calls only.
        `folder_options` are the tmpfs mount options of a private folder (see `folder_options`)."""
        if self.private_folder:
            _mount_private_folder(workdir, folder_options)
        _check(_LIBC.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
        if self.landlock_abi:
            self._restrict_writes(workdir)
        if self.uid is not None:
            self._switch_user()
        if self.no_processes:
            program = _PROGRAMS[self.network]
            _check(_LIBC.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0), "prctl(SECCOMP)")

    def _restrict_writes(self, workdir: str) -> None:
        abi = self.landlock_abi
        writes = _FS_WRITES_V1 | (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
        net = 0 if self.network or abi < 4 else _NET_BIND_TCP | _NET_CONNECT_TCP
        scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if abi >= 6 else 0
        attr = struct.pack("<QQQ", writes, net, scoped)[: 24 if abi >= 6 else 16 if abi >= 4 else 8]
        ruleset = _LIBC.syscall(_SYS_CREATE_RULESET, attr, len(attr), 0)
        _check(ruleset, "landlock_create_ruleset")
        try:
            self._allow(ruleset, workdir, writes)
            self._allow(ruleset, os.devnull, _FS_WRITE_FILE)
            _check(_LIBC.syscall(_SYS_RESTRICT_SELF, ruleset, 0), "landlock_restrict_self")
        finally:
            os.close(ruleset)

    @staticmethod
    def _allow(ruleset: int, path: str, access: int) -> None:
        descriptor = os.open(path, os.O_PATH | os.O_CLOEXEC)
        try:
            rule = struct.pack("<Qi", access, descriptor)  # struct landlock_path_beneath_attr (packed)
            _check(_LIBC.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, rule, 0), f"landlock_add_rule {path}")
        finally:
            os.close(descriptor)

    def _switch_user(self) -> None:
        """Become `uid` with CAP_DAC_READ_SEARCH only: bounding set first (needs CAP_SETPCAP), then
        the ids (KEEPCAPS so the permitted set survives), then the sets and the ambient capability."""
        for capability in range(self.last_capability + 1):
            if capability != _CAP_DAC_READ_SEARCH:
                _check(_LIBC.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0), f"prctl(CAPBSET_DROP, {capability})")
        _check(_LIBC.prctl(_PR_SET_KEEPCAPS, 1, 0, 0, 0), "prctl(KEEPCAPS)")
        _check(_LIBC.setgroups(0, None), "setgroups")
        _check(_LIBC.setresgid(self.uid, self.uid, self.uid), "setresgid")
        _check(_LIBC.setresuid(self.uid, self.uid, self.uid), "setresuid")
        _check(_LIBC.capset(_CAP_HEADER, _CAP_DATA), "capset")
        _check(_LIBC.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_RAISE, _CAP_DAC_READ_SEARCH, 0, 0), "prctl(CAP_AMBIENT)")


def prepare(network: bool = False) -> Confinement:
    """The confinement this machine supports (probed in the parent)."""
    uid = SANDBOX_UID if _can_switch_user() else None
    return Confinement(landlock_abi(), network, _PROGRAMS is not None, uid, _private_folders_work(), _last_capability())


def folder_options(size_mb: int, files: int, uid: int | None) -> bytes:
    """tmpfs options for a private folder of `size_mb` and `files` files and folders (its root
    included), owned by `uid` (the server's user when None). Prepared in the parent."""
    owner = os.getuid() if uid is None else uid
    return f"size={size_mb}m,nr_inodes={files + 1},mode=700,uid={owner},gid={owner}".encode()


def _mount_private_folder(workdir: str, options: bytes) -> None:
    """Enter a mount namespace of our own, keep its mounts from propagating back, mount a tmpfs on
    `workdir` (and move into it: the old cwd is the folder underneath) and a read-only one on /dev/shm."""
    _check(_LIBC.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(_LIBC.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "mount(/, private)")
    _check(_LIBC.mount(b"tmpfs", os.fsencode(workdir), b"tmpfs", _MS_NOSUID | _MS_NODEV, options), "mount(tmpfs)")
    os.chdir(workdir)
    if os.path.isdir(_SHM):
        _check(_LIBC.mount(b"tmpfs", _SHM, b"tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV, b"size=4k,nr_inodes=1"),
               "mount(/dev/shm)")


@functools.cache
def _private_folders_work() -> bool:
    """Whether `_mount_private_folder` works here (root with CAP_SYS_ADMIN, no seccomp or LSM
    refusing mounts): tried once, in a thread of its own, since a thread may enter a mount namespace
    without the rest of the process (the namespace goes when the thread ends)."""
    if _LIBC is None or os.geteuid() != 0:
        return False
    result: list[bool] = []

    def attempt(mountpoint: str) -> None:
        try:
            _mount_private_folder(mountpoint, folder_options(1, 1, None))
            result.append(True)
        except OSError:
            result.append(False)

    with tempfile.TemporaryDirectory(prefix="rlf-mount-probe-") as mountpoint:
        # the attempt's chdir stays in its thread: unshare(CLONE_NEWNS) gives it its own cwd too
        thread = threading.Thread(target=attempt, args=(mountpoint,), name="rlf-mount-probe")
        thread.start()
        thread.join()
    return result == [True]


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is missing or disabled."""
    if _LIBC is None:
        return 0
    version = _LIBC.syscall(_SYS_CREATE_RULESET, None, 0, _CREATE_RULESET_VERSION)
    return max(version, 0)


def _can_switch_user() -> bool:
    """Root with CAP_SETGID, CAP_SETUID and CAP_SETPCAP, in a user namespace (if any) that maps
    SANDBOX_UID and allows setgroups: not so in some rootless containers."""
    if _LIBC is None or os.geteuid() != 0:
        return False
    try:
        status = Path("/proc/self/status").read_text()
        effective = int(status.split("CapEff:")[1].split()[0], 16)
        maps = [Path(f"/proc/self/{name}_map").read_text().split() for name in ("uid", "gid")]
        setgroups = Path("/proc/self/setgroups").read_text().strip()
    except (OSError, IndexError, ValueError):
        return False
    needed = 1 << 6 | 1 << 7 | 1 << 8  # CAP_SETGID, CAP_SETUID, CAP_SETPCAP
    return effective & needed == needed and setgroups == "allow" and all(_maps(words, SANDBOX_UID) for words in maps)


def _maps(words: list[str], inside: int) -> bool:
    """Whether an id map (/proc/self/uid_map: lines of "inside outside count") covers `inside`."""
    numbers = [int(word) for word in words]
    return any(start <= inside < start + count for start, count in zip(numbers[::3], numbers[2::3]))


def _last_capability() -> int:
    try:
        return int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        return 40  # CAP_CHECKPOINT_RESTORE, the last one since Linux 5.9


def _filter(network: bool) -> _SockFprog:
    """The seccomp program described in the module docstring, for this architecture."""
    audit_arch, numbers = _ARCHES[platform.machine()]
    denied = [numbers[name] for name in _DENIED if name in numbers]
    if not network:
        denied.append(numbers["socket"])
    deny, no_sys, allow = ("deny", "enosys", "allow")
    # (code, k, jump-if-true label, jump-if-false label); None means "the next instruction"
    program: list[tuple[int, int, str | None, str | None] | str] = [
        (_LD_ABS_W, 4, None, None),  # seccomp_data.arch
        (_JEQ_K, audit_arch, None, deny),
        (_LD_ABS_W, 0, None, None),  # seccomp_data.nr
    ]
    if audit_arch == _ARCHES["x86_64"][0]:
        program.append((_JGE_K, _X32_SYSCALL_BIT, deny, None))
    program.append((_JEQ_K, numbers["clone3"], no_sys, None))
    program += [(_JEQ_K, number, deny, None) for number in denied]
    program += [
        (_JEQ_K, numbers["clone"], None, allow),
        (_LD_ABS_W, 16, None, None),  # low 32 bits of args[0] (clone flags), little-endian
        (_JSET_K, _CLONE_THREAD, allow, deny),
        allow, (_RET_K, _RET_ALLOW, None, None),
        deny, (_RET_K, _RET_ERRNO | errno.EPERM, None, None),
        no_sys, (_RET_K, _RET_ERRNO | errno.ENOSYS, None, None),
    ]
    return _assemble(program)


def _assemble(program: list) -> _SockFprog:
    labels, instructions = {}, []
    for item in program:
        if isinstance(item, str):
            labels[item] = len(instructions)
        else:
            instructions.append(item)

    def offset(label: str | None, index: int) -> int:
        return 0 if label is None else labels[label] - index - 1

    packed = b"".join(
        struct.pack("<HBBI", code, offset(true, i), offset(false, i), k)
        for i, (code, k, true, false) in enumerate(instructions)
    )
    buffer = ctypes.create_string_buffer(packed, len(packed))
    fprog = _SockFprog(len(instructions), ctypes.addressof(buffer))
    fprog._buffer = buffer  # keep the instructions alive as long as the program
    return fprog


def _check(result: int, what: str) -> None:
    if result < 0:
        number = ctypes.get_errno()
        raise OSError(number, f"sandbox confinement: {what} failed: {os.strerror(number)}")


def _load_libc() -> ctypes.CDLL | None:
    if platform.system() != "Linux":
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


_LIBC = _load_libc()
_PROGRAMS = (
    {network: _filter(network) for network in (False, True)}
    if _LIBC is not None and platform.machine() in _ARCHES
    else None
)
"""the seccomp programs, by `network`; None where there is no filter for this machine"""
