"""A seccomp deny-list built with libseccomp through ctypes.

Default allow (CPython, libzmq and the Rhai extension make too many different
syscalls for a safe allow-list without a long soak); refuse with EPERM what a
network- and file-less worker never needs and what would widen an escape:
non-Unix sockets, new processes and exec, ptrace-like access to other processes,
namespaces and mounts, kernel keyrings/BPF/perf/io_uring, modules, reboot.

Workers run under the coordinator's uid, so every syscall whose permission check is
"same uid" reaches the coordinator and the other workers unless refused here: System V
IPC and POSIX message queues (shared memory of the host's IPC namespace), and anything
that names another process: rlimits (prlimit64), priority, scheduling, affinity, I/O
priority, and signals. Landlock scopes signals only from ABI 6, so signals are pinned to
our own pid here too.

Threads stay possible: ``clone`` is refused only without CLONE_THREAD, and
``clone3`` (whose flags live in memory a filter cannot read) returns ENOSYS, which
makes glibc fall back to ``clone``.
"""

from __future__ import annotations

import ctypes
import errno
import os

from worker.sandbox._process import LayerResult

__all__ = ["DENIED_SYSCALLS", "apply", "load"]

_ACT_ALLOW = 0x7FFF0000
_ACT_ERRNO = 0x00050000
_CMP_NE = 1
_CMP_EQ = 4
_CMP_MASKED_EQ = 7
_FLTATR_CTL_TSYNC = 4
_AF_UNIX = 1
_CLONE_THREAD = 0x00010000
_TIOCSTI = 0x5412
_PR_SET_PDEATHSIG = 1
_PRIO_PROCESS = 0
_SCHED_OTHER = 0
_F_SETOWN = 8
_F_SETOWN_EX = 15

DENIED_SYSCALLS: tuple[str, ...] = (
    "execve",
    "execveat",
    "fork",
    "vfork",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "kcmp",
    "process_madvise",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "unshare",
    "setns",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "init_module",
    "finit_module",
    "delete_module",
    "swapon",
    "swapoff",
    "acct",
    "quotactl",
    "quotactl_fd",
    "name_to_handle_at",
    "open_by_handle_at",
    "settimeofday",
    "clock_settime",
    "adjtimex",
    "clock_adjtime",
    "sethostname",
    "setdomainname",
    "iopl",
    "ioperm",
    "lookup_dcookie",
    "fanotify_init",
    "nfsservctl",
    "vhangup",
    # System V IPC and POSIX message queues: objects shared with every same-uid process.
    "shmget",
    "shmat",
    "shmdt",
    "shmctl",
    "msgget",
    "msgsnd",
    "msgrcv",
    "msgctl",
    "semget",
    "semop",
    "semtimedop",
    "semctl",
    "mq_open",
    "mq_unlink",
    "mq_timedsend",
    "mq_timedreceive",
    "mq_notify",
    "mq_getsetattr",
    # Only ever used to change another process (or a whole uid/process group).
    "ioprio_set",
    "tkill",
    "pidfd_send_signal",
)


#: Refused unless the pid argument is 0 (this process): same-uid checks let them reach others.
_SELF_ONLY: tuple[str, ...] = ("prlimit64", "sched_setaffinity", "sched_setparam", "sched_setattr")
#: Signals: refused unless the target (thread group) is this process.
_OWN_PID_ONLY: tuple[str, ...] = ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")


class _ArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


_loaded: tuple[ctypes.CDLL | None, str] | None = None


def load() -> tuple[ctypes.CDLL | None, str]:
    """Load libseccomp once; call before Landlock, which hides the library file."""
    global _loaded
    if _loaded is None:
        _loaded = _load()
    return _loaded


def _load() -> tuple[ctypes.CDLL | None, str]:
    try:
        lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    except OSError as exc:
        return None, f"libseccomp.so.2 not loadable ({exc}); Debian package: libseccomp2"
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(_ArgCmp),
    ]
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    return lib, "libseccomp.so.2"


def _errno_action(err: int) -> int:
    return _ACT_ERRNO | (err & 0xFFFF)


def _rules(pid: int) -> list[tuple[str, int, list[tuple[int, int, int, int]]]]:
    """(syscall, errno, [(arg, op, a, b)]) — an empty list means always; several comparisons AND.

    ``pid`` is ours: the only process a worker may signal or re-limit (no fork, no pid namespace
    change, so it stays valid). Zero means "self" for prlimit/setpriority/sched_*, but "my process
    group" (the coordinator's) for kill, so kill must name our pid.
    """
    rules: list[tuple[str, int, list[tuple[int, int, int, int]]]] = [
        (name, errno.EPERM, []) for name in DENIED_SYSCALLS
    ]
    rules += [(name, errno.EPERM, [(0, _CMP_NE, 0, 0)]) for name in _SELF_ONLY]
    rules += [(name, errno.EPERM, [(0, _CMP_NE, pid, 0)]) for name in _OWN_PID_ONLY]
    rules += [
        ("setpriority", errno.EPERM, [(0, _CMP_NE, _PRIO_PROCESS, 0)]),  # PRIO_PGRP/PRIO_USER
        ("setpriority", errno.EPERM, [(1, _CMP_NE, 0, 0)]),
        # libzmq's I/O threads call pthread_setschedparam(self, current policy): keep SCHED_OTHER by tid.
        ("sched_setscheduler", errno.EPERM, [(0, _CMP_NE, 0, 0), (1, _CMP_NE, _SCHED_OTHER, 0)]),
        ("fcntl", errno.EPERM, [(1, _CMP_EQ, _F_SETOWN, 0), (2, _CMP_NE, pid, 0)]),
        ("fcntl", errno.EPERM, [(1, _CMP_EQ, _F_SETOWN_EX, 0)]),
    ]
    rules += [
        ("socket", errno.EPERM, [(0, _CMP_NE, _AF_UNIX, 0)]),
        ("socketpair", errno.EPERM, [(0, _CMP_NE, _AF_UNIX, 0)]),
        ("clone", errno.EPERM, [(0, _CMP_MASKED_EQ, _CLONE_THREAD, 0)]),
        ("clone3", errno.ENOSYS, []),
        ("ioctl", errno.EPERM, [(1, _CMP_MASKED_EQ, 0xFFFFFFFF, _TIOCSTI)]),
        ("prctl", errno.EPERM, [(0, _CMP_EQ, _PR_SET_PDEATHSIG, 0)]),
    ]
    return rules


def apply() -> LayerResult:
    """Install the filter for every thread of the process (TSYNC); report what was denied."""
    lib, why = load()
    if lib is None:
        return False, why
    ctx = lib.seccomp_init(_ACT_ALLOW)
    if not ctx:
        return False, "seccomp_init failed"
    try:
        tsync = lib.seccomp_attr_set(ctx, _FLTATR_CTL_TSYNC, 1) == 0
        added: list[str] = []
        unknown: list[str] = []
        for name, err, cmps in _rules(os.getpid()):
            nr = lib.seccomp_syscall_resolve_name(name.encode())
            if nr < 0:
                unknown.append(name)
                continue
            array = (_ArgCmp * max(1, len(cmps)))(*[_ArgCmp(*c) for c in cmps])
            rc = lib.seccomp_rule_add_array(ctx, _errno_action(err), nr, len(cmps), array)
            if rc != 0:
                return False, f"seccomp_rule_add({name}): {os.strerror(-rc)}"
            added.append(name)
        rc = lib.seccomp_load(ctx)
        if rc != 0:
            return False, f"seccomp_load: {os.strerror(-rc)}"
    finally:
        lib.seccomp_release(ctx)
    detail = (
        f"{why}: default allow, {len(added)} rules; EPERM for non-AF_UNIX sockets, process creation "
        f"(fork/vfork/clone without CLONE_THREAD), exec, ptrace/process_vm_*, mount/unshare/setns, "
        f"keyctl/bpf/perf/io_uring, modules/kexec/reboot, TIOCSTI, prctl(PR_SET_PDEATHSIG), "
        f"System V IPC and mq_*, other processes' rlimits/priority/scheduling/affinity/ioprio, "
        f"signals and F_SETOWN to any pid but ours ({os.getpid()}); "
        f"clone3 -> ENOSYS; tsync={'on' if tsync else 'off'}; foreign-arch syscalls kill (libseccomp default)"
    )
    if unknown:
        detail += f"; unknown on this arch: {unknown}"
    return True, detail
