"""Kernel-enforced confinement for the python sandbox's child process (Linux only).

Resource limits (rlimits) bound time, memory and output, but not *where* code writes nor whether it
starts processes (RLIMIT_NPROC is per user and ignored for root, which containers often are). Two
kernel features close that gap without root, a container or any package:

* **Landlock** (Linux >= 5.13): after `restrict_self` the process and everything it execs may create,
  write, truncate, rename or delete files only beneath the sandbox's temporary folder (and write to
  /dev/null). Reading is not restricted. Where the kernel has Landlock ABI >= 4, TCP `connect` and
  `bind` are refused too; with ABI >= 6, signals to processes outside the sandbox (the server) and
  abstract unix sockets are refused.
* **seccomp**: a small BPF filter makes every way to create a process fail with EPERM (`fork`,
  `vfork`, `clone` without CLONE_THREAD; `clone3` fails with ENOSYS so libc falls back to `clone`).
  Threads are still allowed.

Everything that allocates (the BPF program, the libc handle) is prepared in the parent; the child
(between fork and exec, in `preexec_fn`) only makes system calls. Where a feature is missing the
confinement says so (`Confinement.describe`) and the sandbox runs with rlimits only: these contain
accidents and runaway code from a model, they are not a boundary against a determined attacker.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from dataclasses import dataclass

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

# seccomp BPF
_LD_ABS_W, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_CLONE_THREAD = 0x00010000
_X32_SYSCALL_BIT = 0x40000000
# (audit arch, clone, clone3, fork, vfork); aarch64 has no fork/vfork system calls
_ARCHES = {
    "x86_64": (0xC000003E, 56, 435, 57, 58),
    "aarch64": (0xC00000B7, 220, 435, None, None),
}


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


@dataclass(frozen=True)
class Confinement:
    """What the child will be confined by; build it with `prepare` in the parent, `apply` in the child."""

    landlock_abi: int
    """0 when the kernel has no Landlock"""
    network: bool
    """False: TCP connect/bind refused (needs landlock_abi >= 4)"""
    no_processes: bool
    """True when the seccomp filter is available for this machine's architecture"""

    def describe(self) -> str:
        parts = []
        if self.landlock_abi:
            parts.append(f"writes only in the temporary folder (Landlock ABI {self.landlock_abi})")
            if not self.network and self.landlock_abi >= 4:
                parts.append("no TCP connections")
        else:
            parts.append("writes NOT confined (no Landlock in this kernel)")
        parts.append("no new processes (seccomp)" if self.no_processes else "processes NOT limited")
        return ", ".join(parts)

    def apply(self, workdir: str) -> None:
        """Confine the calling process. Runs in the child between fork and exec: system calls only."""
        _check(_LIBC.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
        if self.landlock_abi:
            self._restrict_writes(workdir)
        if self.no_processes:
            _check(
                _LIBC.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(_PROGRAM), 0, 0),
                "prctl(SECCOMP)",
            )

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


def prepare(network: bool = False) -> Confinement:
    """The confinement this machine supports (probed once, in the parent)."""
    return Confinement(landlock_abi(), network, _PROGRAM is not None)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is missing or disabled."""
    if _LIBC is None:
        return 0
    version = _LIBC.syscall(_SYS_CREATE_RULESET, None, 0, _CREATE_RULESET_VERSION)
    return max(version, 0)


def _no_process_filter() -> _SockFprog | None:
    """The seccomp program described in the module docstring, for this architecture (or None)."""
    arch = _ARCHES.get(platform.machine())
    if arch is None or _LIBC is None:
        return None
    audit_arch, clone, clone3, fork, vfork = arch
    deny, no_sys, allow = ("deny", "enosys", "allow")
    # (code, k, jump-if-true label, jump-if-false label); None means "the next instruction"
    program: list[tuple[int, int, str | None, str | None] | str] = [
        (_LD_ABS_W, 4, None, None),  # seccomp_data.arch
        (_JEQ_K, audit_arch, None, deny),
        (_LD_ABS_W, 0, None, None),  # seccomp_data.nr
    ]
    if audit_arch == _ARCHES["x86_64"][0]:
        program.append((_JGE_K, _X32_SYSCALL_BIT, deny, None))
    program.append((_JEQ_K, clone3, no_sys, None))
    program += [(_JEQ_K, number, deny, None) for number in (fork, vfork) if number is not None]
    program += [
        (_JEQ_K, clone, None, allow),
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
_PROGRAM = _no_process_filter()
