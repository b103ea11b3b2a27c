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


def probe(
    env_name: str = "RHAIPOOL_PROBE_SECRET", tcp_port: int | None = None, unix_path: str | None = None
) -> dict[str, str]:
    """Try the forbidden things now; call only after :func:`worker.sandbox.enter`."""
    return {
        "open_etc_passwd": _open_etc_passwd(),
        "tcp_connect_loopback": _tcp_connect(tcp_port),
        "env_var": _env_var(env_name),
        "execve": _execve(),
        "unix_connect_outside_ipc_dir": _unix_connect(unix_path),
    }
