"""The test-only probe: try what the sandbox forbids and report each outcome.

Each value is the exception text when the attempt was refused, or a string starting
with ``"SUCCEEDED"`` when the sandbox let it through, so a test can assert that every
attempt failed for every layer the worker reports active.
"""

from __future__ import annotations

import ctypes
import os
import socket

__all__ = ["SUCCEEDED", "probe"]

SUCCEEDED = "SUCCEEDED"


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _open_etc_passwd() -> str:
    try:
        with open("/etc/passwd", "rb") as fh:
            fh.read(1)
    except OSError as exc:
        return _describe(exc)
    return SUCCEEDED


def _tcp_connect(port: int | None) -> str:
    target = ("127.0.0.1", port if port is not None else 1)
    try:
        with socket.create_connection(target, timeout=2.0):
            pass
    except OSError as exc:
        return _describe(exc)
    return SUCCEEDED


def _env_var(name: str) -> str:
    """Look everywhere a secret could survive: os.environ, libc's environ, the exec-time block."""
    if name in os.environ:
        return f"{SUCCEEDED} (os.environ)"
    getenv = ctypes.CDLL(None).getenv
    getenv.restype = ctypes.c_char_p
    if getenv(name.encode()) is not None:
        return f"{SUCCEEDED} (libc getenv)"
    try:
        with open("/proc/self/environ", "rb") as fh:
            block = fh.read()
    except OSError as exc:
        proc = f"/proc/self/environ unreadable ({exc.strerror})"
    else:
        if name.encode() + b"=" in block:
            return f"{SUCCEEDED} (/proc/self/environ)"
        proc = f"/proc/self/environ holds {len(block.strip(bytes(1)))} non-NUL bytes"
    return f"KeyError: {name!r} not in os.environ nor libc getenv; {proc}"


def _unix_connect(path: str | None) -> str:
    """A pathname socket outside the ipc directory: Landlock (ABI <= 7) does not stop this."""
    if path is None:
        return "not tried: no socket path given"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(2.0)
            sock.connect(path)
    except OSError as exc:
        return _describe(exc)
    return SUCCEEDED


def _execve() -> str:
    """Spawning is a seccomp matter (fork/exec denied); /bin/true is harmless if it runs."""
    try:
        pid = os.posix_spawn("/bin/true", ["/bin/true"], {})
    except OSError as exc:
        return _describe(exc)
    os.waitpid(pid, 0)
    return SUCCEEDED


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_IPC_PRIVATE, _IPC_CREAT, _IPC_RMID = 0, 0o1000, 0
_RLIMIT_CORE = 4
_SYS_IOPRIO_GET, _SYS_IOPRIO_SET = (252, 251) if os.uname().machine == "x86_64" else (31, 30)


class _Rlimit(ctypes.Structure):
    _fields_ = [("cur", ctypes.c_uint64), ("max", ctypes.c_uint64)]


def _rc(result: int, what: str) -> str:
    """SUCCEEDED for a non-negative return, else the errno text."""
    if result >= 0:
        return SUCCEEDED
    err = ctypes.get_errno()
    return f"OSError: {what}: [Errno {err}] {os.strerror(err)}"


def _sysv_shm() -> str:
    """System V shared memory is how a worker would reach same-uid segments of the host."""
    shm = _libc.shmget(_IPC_PRIVATE, 4096, _IPC_CREAT | 0o600)
    if shm >= 0:
        _libc.shmctl(shm, _IPC_RMID, None)
    return _rc(shm, "shmget")


def _prlimit_other(pid: int) -> str:
    """Read another process's RLIMIT_CORE and write the same value back: a no-op if allowed."""
    old = _Rlimit()
    if _libc.prlimit(pid, _RLIMIT_CORE, None, ctypes.byref(old)) != 0:
        return _rc(-1, f"prlimit({pid}) read")
    return _rc(_libc.prlimit(pid, _RLIMIT_CORE, ctypes.byref(old), None), f"prlimit({pid}) write")


def _renice_other(pid: int) -> str:
    """setpriority to the target's current nice value: a no-op if allowed."""
    ctypes.set_errno(0)
    nice = _libc.getpriority(0, pid)
    if nice == -1 and ctypes.get_errno():
        return _rc(-1, f"getpriority({pid})")
    return _rc(_libc.setpriority(0, pid, nice), f"setpriority({pid})")


def _affinity_other(pid: int) -> str:
    """sched_setaffinity to the target's current mask: a no-op if allowed."""
    mask = ctypes.create_string_buffer(128)
    if _libc.sched_getaffinity(pid, len(mask), mask) != 0:
        return _rc(-1, f"sched_getaffinity({pid})")
    return _rc(_libc.sched_setaffinity(pid, len(mask), mask), f"sched_setaffinity({pid})")


def _ioprio_other(pid: int) -> str:
    """ioprio_set to the target's current I/O priority: a no-op if allowed."""
    current = int(_libc.syscall(_SYS_IOPRIO_GET, 1, pid))
    return _rc(int(_libc.syscall(_SYS_IOPRIO_SET, 1, pid, max(current, 0))), f"ioprio_set({pid})")


def _signal_other(pid: int) -> str:
    """The null signal: proves permission to signal without delivering anything."""
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return _describe(exc)
    return SUCCEEDED


def probe(
    env_name: str = "RHAIPOOL_PROBE_SECRET",
    tcp_port: int | None = None,
    unix_path: str | None = None,
    target_pid: int | None = None,
) -> dict[str, str]:
    """Try the forbidden things now; call only after :func:`worker.sandbox.enter`.

    ``target_pid`` (default: our parent, the coordinator) is the other process the
    cross-process attempts aim at; each attempt is a no-op if it gets through.
    """
    pid = target_pid if target_pid is not None else os.getppid()
    return {
        "open_etc_passwd": _open_etc_passwd(),
        "tcp_connect_loopback": _tcp_connect(tcp_port),
        "env_var": _env_var(env_name),
        "execve": _execve(),
        "unix_connect_outside_ipc_dir": _unix_connect(unix_path),
        "sysv_shm": _sysv_shm(),
        "prlimit_other_process": _prlimit_other(pid),
        "renice_other_process": _renice_other(pid),
        "affinity_other_process": _affinity_other(pid),
        "ioprio_other_process": _ioprio_other(pid),
        "signal_other_process": _signal_other(pid),
    }
