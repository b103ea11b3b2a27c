"""Process-level layers: environment, no_new_privs, parent death, rlimits, namespaces.

Each function applies one layer and returns ``(active, detail)``; none raises for
an unavailable feature, because a worker must start and *say* what it lacks.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import signal
import socket
import threading
from typing import Final

__all__ = [
    "CLONE_NEWIPC",
    "CLONE_NEWNS",
    "LayerResult",
    "cap_malloc_arenas",
    "disable_huge_pages",
    "drop_capabilities",
    "errno_text",
    "libc",
    "parent_alive",
    "scrub_environment",
    "set_no_new_privs",
    "set_pdeathsig",
    "set_rlimits",
    "thread_count",
    "unshare_network",
]

LayerResult = tuple[bool, str]

PR_SET_PDEATHSIG = 1
PR_GET_PDEATHSIG = 2
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_GET_NO_NEW_PRIVS = 39
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
PR_SET_THP_DISABLE = 41
PR_GET_THP_DISABLE = 42
CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

libc = ctypes.CDLL(None, use_errno=True)
libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
libc.prctl.restype = ctypes.c_int
libc.syscall.restype = ctypes.c_long


def errno_text(prefix: str) -> str:
    err = ctypes.get_errno()
    return f"{prefix}: {errno.errorcode.get(err, err)} ({os.strerror(err)})"


def _prctl(option: int, arg2: int = 0) -> int:
    return int(libc.prctl(option, arg2, 0, 0, 0))


def thread_count() -> int:
    """Kernel's view of our threads: unshare(CLONE_NEWUSER) needs exactly one."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


ALLOCATOR_TUNING: Final = ("MIMALLOC_ARENA_RESERVE",)
"""Variables that survive the scrub: allocator tuning the supervisor set, never a secret. mimalloc
(the binding's allocator) reads its options lazily, at its first allocation, which comes after the
scrub: without this, its default 1 GiB reservation would count against the worker's RLIMIT_AS."""


def scrub_environment() -> LayerResult:
    """Clear ``os.environ`` and zero the exec-time environment block.

    ``os.environ.clear()`` unsets every variable in libc too, but the strings the
    kernel copied at exec stay on the stack and in ``/proc/self/environ``; zeroing
    that range means a compromised worker cannot read them back either.
    """
    count = len(os.environ)
    tuning = {name: os.environ[name] for name in ALLOCATOR_TUNING if name in os.environ}
    os.environ.clear()
    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        # Fields 50/51 (1-based) are env_start/env_end; fields[0] is field 3.
        start, end = int(fields[47]), int(fields[48])
        if 0 < start < end:
            ctypes.memset(start, 0, end - start)
        block = f"exec-time block zeroed ({end - start} bytes)"
    except (OSError, IndexError, ValueError) as exc:
        block = f"exec-time block not zeroed: {exc!r}"
    leaked = dict(os.environ)
    if leaked:
        return False, f"variables remain after clear: {sorted(leaked)}"
    os.environ.update(tuning)  # set again after the zeroing: these copies live in the heap, not the block
    kept = f"; kept {', '.join(sorted(tuning))}" if tuning else ""
    return True, f"cleared {count} variables; {block}{kept}"


def set_no_new_privs() -> LayerResult:
    """No setuid/file-capability gains on exec; also the precondition for Landlock and seccomp."""
    if _prctl(PR_SET_NO_NEW_PRIVS, 1) != 0:
        return False, errno_text("prctl(PR_SET_NO_NEW_PRIVS)")
    if _prctl(PR_GET_NO_NEW_PRIVS) != 1:
        return False, "PR_GET_NO_NEW_PRIVS does not read back 1"
    return True, "PR_SET_NO_NEW_PRIVS=1 (read back)"


def parent_alive(parent_pid: int) -> bool:
    """True while our parent is still ``parent_pid``.

    After the parent dies we are re-parented (to init or a subreaper), so
    ``getppid`` changes; unlike ``kill(pid, 0)`` this cannot be fooled by pid reuse
    and needs no permission that Landlock's signal scoping would deny.
    """
    return os.getppid() == parent_pid


def set_pdeathsig(parent_pid: int) -> LayerResult:
    """SIGKILL us when the forking thread dies, then close the fork/prctl race.

    If the parent died before prctl took effect we would never get the signal,
    so compare ``getppid`` afterwards and die now if it already changed.
    """
    if _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL)) != 0:
        return False, errno_text("prctl(PR_SET_PDEATHSIG)")
    if not parent_alive(parent_pid):
        os.kill(os.getpid(), signal.SIGKILL)
    value = ctypes.c_int(0)
    got = libc.prctl(PR_GET_PDEATHSIG, ctypes.addressof(value), 0, 0, 0)
    if got != 0 or value.value != signal.SIGKILL:
        return False, f"PR_GET_PDEATHSIG reads {value.value}, expected SIGKILL"
    return True, f"SIGKILL on death of the forking thread of pid {parent_pid}; getppid re-checked"


def set_rlimits(memory_bytes: int, cpu_seconds: int, open_files: int, file_size: int) -> LayerResult:
    """Lower the limits so the worker cannot raise them back (it loses CAP_SYS_RESOURCE).

    Soft = hard for all but CPU: there the soft limit is ``cpu_seconds`` (SIGXCPU, an
    exit reason the supervisor can name) and the hard limit one second later
    (SIGKILL), leaving room for :func:`worker.sandbox.rearm_cpu` to move the soft one.
    """
    wanted = {
        "AS": (resource.RLIMIT_AS, memory_bytes, memory_bytes),
        "CPU": (resource.RLIMIT_CPU, cpu_seconds, cpu_seconds + 1),
        "NOFILE": (resource.RLIMIT_NOFILE, open_files, open_files),
        "CORE": (resource.RLIMIT_CORE, 0, 0),
        "FSIZE": (resource.RLIMIT_FSIZE, file_size, file_size),
    }
    applied: list[str] = []
    failed: list[str] = []
    for name, (which, soft, hard) in wanted.items():
        current = resource.getrlimit(which)[1]
        if current != resource.RLIM_INFINITY:
            soft, hard = min(soft, current), min(hard, current)
        try:
            resource.setrlimit(which, (soft, hard))
        except (ValueError, OSError) as exc:
            failed.append(f"{name}: {exc}")
            continue
        if resource.getrlimit(which) != (soft, hard):
            failed.append(f"{name}: reads back {resource.getrlimit(which)}")
        else:
            applied.append(f"{name}={soft}" if soft == hard else f"{name}={soft}/{hard}")
    if failed:
        return False, "failed " + "; ".join(failed) + " (applied " + " ".join(applied) + ")"
    return True, "soft[/hard] " + " ".join(applied)


def cap_malloc_arenas(arenas: int) -> str:
    """Cap glibc malloc arenas: each reserves 64 MiB of address space.

    Measured here: without a cap, 19 threads that allocate exhaust a 1 GiB RLIMIT_AS
    through arena reservations alone; with 2 arenas, 40 threads use ~0.45 GiB.
    """
    m_arena_max = -8
    if libc.mallopt(m_arena_max, arenas) != 1:
        return "malloc arenas not capped (mallopt failed; not glibc?)"
    return f"malloc arenas capped at {arenas}"


def disable_huge_pages() -> str:
    """Turn transparent huge pages off for this process (inherited by its threads, kept over exec).

    mimalloc (the binding's allocator) marks its arena MADV_HUGEPAGE, and each thread allocates from
    a part of its own: with THP on, every thread that ran a script faulted in a 2 MiB page, so a
    provider call waiting on HTTP cost ~0.55 MiB of a worker's memory (measured: 36 of a 64-call
    worker's 57 MiB).  Without them a waiting call holds only the 4 KiB pages it touched.
    """
    if _prctl(PR_SET_THP_DISABLE, 1) != 0:
        return errno_text("transparent huge pages left on: prctl(PR_SET_THP_DISABLE)")
    return "transparent huge pages off"


def _netns_id() -> str:
    try:
        return os.readlink("/proc/self/ns/net")
    except OSError as exc:
        return f"unknown ({exc.strerror})"


def _loopback_unreachable() -> str | None:
    """None if 127.0.0.1 is unreachable (as in a fresh netns), else what happened."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect(("127.0.0.1", 9))
    except OSError as exc:
        if exc.errno == errno.ENETUNREACH:
            return None
        return f"unexpected {exc!r}"
    return "127.0.0.1 is routable"


def _ipcns_id() -> str:
    try:
        return os.readlink("/proc/self/ns/ipc")
    except OSError as exc:
        return f"unknown ({exc.strerror})"


def unshare_network() -> LayerResult:
    """Move into a new user namespace, an empty network namespace and a private IPC namespace.

    The user namespace is what makes this work without root; it also leaves us with
    no capability in the host's namespace. Nothing is brought up, not even ``lo``.
    The IPC namespace hides the host's System V shared memory, semaphores and message
    queues (and POSIX mqueues), which same-uid processes could otherwise read and write.
    Falls back to CLONE_NEWNET(|CLONE_NEWIPC) when we hold CAP_SYS_ADMIN but user
    namespaces are refused.
    """
    threads = thread_count()
    before, ipc_before = _netns_id(), _ipcns_id()
    attempts = (
        (CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWIPC, "unshare(CLONE_NEWUSER|CLONE_NEWNET|CLONE_NEWIPC)"),
        (CLONE_NEWNET | CLONE_NEWIPC, "unshare(CLONE_NEWNET|CLONE_NEWIPC) only"),
        (CLONE_NEWNET, "unshare(CLONE_NEWNET) only"),
    )
    refused: list[str] = []
    for flags, how in attempts:
        if libc.unshare(flags) == 0:
            break
        refused.append(errno_text(how))
        if len(refused) == 1 and threads > 1:
            refused[0] += f" [{threads} threads; needs a single-threaded process]"
    else:
        return False, "; ".join(refused)
    if refused:
        how += f" ({'; '.join(refused)})"
    after, ipc_after = _netns_id(), _ipcns_id()
    if after == before:
        return False, f"{how} returned 0 but the netns is unchanged ({after})"
    problem = _loopback_unreachable()
    if problem is not None:
        return False, f"{how}: new netns {after} but {problem}"
    ipc = f"ipc ns {ipc_before} -> {ipc_after}" if ipc_after != ipc_before else "ipc ns SHARED with the host"
    return True, f"{how}: netns {before} -> {after}, no interface up (127.0.0.1 unreachable); {ipc}"


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def drop_capabilities() -> str:
    """Drop every capability (bounding, ambient, effective, permitted, inheritable).

    After CLONE_NEWUSER we hold all capabilities *inside* the new namespace (enough
    to bring ``lo`` up or mount things there); root workers hold them outright.
    Verified with capget(2): ``/proc`` may be gone after the mount-namespace pivot.
    """
    for cap in range(64):  # EINVAL past the last cap, EPERM without CAP_SETPCAP: both harmless
        _prctl(PR_CAPBSET_DROP, cap)
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        return errno_text("capset(0)")
    check = (_CapData * 2)()
    if libc.capget(ctypes.byref(header), check) != 0:
        return errno_text("capget")
    left = [
        (c.effective, c.permitted, c.inheritable)
        for c in check
        if c.effective or c.permitted or c.inheritable
    ]
    if left:
        return f"capabilities remain: {left}"
    return "all capabilities dropped"
