"""The worker's sandbox: applied once, at the top of ``python -m worker``, before any script runs.

Call :func:`enter` while the process is still single-threaded and before any
``zmq.Context`` exists: ``unshare(CLONE_NEWUSER)`` refuses multi-threaded callers,
and Landlock/seccomp bind the calling thread (threads created later inherit them).
Order matters: secrets go first, then privileges, then resources, then the network;
libraries are loaded before the mount namespace and Landlock hide the files they
live in; capabilities (needed to build the mount namespace) are dropped after it;
seccomp comes last because it forbids ``unshare``, ``mount`` and ``pivot_root``.

The mount namespace is applied only when ``ipc_dir`` is given, because after the
pivot nothing else exists: pass the directory of the ``ipc://`` endpoint.

Every layer is feature-detected and reported as ``{"active": bool, "detail": str}``;
nothing raises because a kernel lacks a feature.
"""

from __future__ import annotations

import ctypes
import importlib
import math
import os
import resource
import signal
import site
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from worker.sandbox import _landlock, _mountns, _seccomp
from worker.sandbox._probe import SUCCEEDED, probe
from worker.sandbox._process import (
    LayerResult,
    cap_malloc_arenas,
    disable_huge_pages,
    drop_capabilities,
    parent_alive,
    scrub_environment,
    set_no_new_privs,
    set_pdeathsig,
    set_rlimits,
    thread_count,
    unshare_network,
)

__all__ = [
    "DEFAULT_PRELOAD",
    "LAYERS",
    "PER_THREAD_LAYERS",
    "SUCCEEDED",
    "SandboxConfig",
    "enter",
    "parent_alive",
    "probe",
    "read_paths",
    "rearm_cpu",
    "start_parent_watch",
]

#: Layers every report carries, in the order they are applied.
LAYERS: tuple[str, ...] = (
    "env",
    "no_new_privs",
    "pdeathsig",
    "rlimits",
    "netns",
    "preload",
    "mountns",
    "capabilities",
    "landlock",
    "seccomp",
)

#: Layers the kernel applies to the calling thread only (new threads inherit them).
PER_THREAD_LAYERS: frozenset[str] = frozenset(
    {"no_new_privs", "netns", "mountns", "capabilities", "landlock"}
)

#: Loaded before Landlock so their shared libraries (libzmq, libcrypto, the Rhai
#: extension) are mapped while the files are still readable.
DEFAULT_PRELOAD: tuple[str, ...] = (
    "rhai",
    "zmq",
    "msgpack",
    "proto",
    "contract",
    "json",
    "hashlib",
    "hmac",
    "base64",
    "binascii",
    "struct",
    "encodings.utf_8",
    "encodings.latin_1",
    "encodings.ascii",
    "encodings.idna",
    "unicodedata",
    "codecs",
    "datetime",
    "queue",
    "selectors",
    "traceback",
    "logging",
    "random",
    "re",
    "collections",
    "contextlib",
    "enum",
    "urllib.parse",
    "zlib",
)

Report = dict[str, dict[str, Any]]


@dataclass(frozen=True)
class SandboxConfig:
    """What the coordinator decides per worker; defaults suit a region-hook worker."""

    memory_bytes: int = 1 << 30
    cpu_seconds: int = 3600
    open_files: int = 64
    file_size: int = 1 << 20
    malloc_arenas: int = 2
    parent_pid: int | None = None
    probe: bool = False
    ipc_dir: str | None = None
    read_paths: tuple[str, ...] = ()
    preload: tuple[str, ...] = DEFAULT_PRELOAD
    disabled: frozenset[str] = field(default_factory=frozenset)
    probe_env: str = "RHAIPOOL_PROBE_SECRET"
    probe_port: int | None = None
    probe_unix_path: str | None = None
    probe_pid: int | None = None


_entered = False


def _under(path: str, roots: list[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def read_paths(extra: tuple[str, ...] = ()) -> list[str]:
    """Directories Python must keep reading: the prefixes, site-packages, and loaded packages.

    Packages outside the prefixes (this project, editable installs) are granted one
    package directory at a time rather than the whole checkout, which may hold config
    files with secrets.
    """
    roots = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    roots += [p for p in site.getsitepackages() if os.path.isdir(p)]
    roots = [os.path.realpath(p) for p in roots]
    for name, module in list(sys.modules.items()):
        origin = getattr(module, "__file__", None)
        if not origin or not os.path.isabs(origin) or _under(os.path.realpath(origin), roots):
            continue
        top = os.path.realpath(origin)  # walk up to the top-level package's directory
        for _ in range(name.count(".") + (os.path.basename(top) == "__init__.py")):
            top = os.path.dirname(top)
        roots.append(top)
    roots += [os.path.realpath(p) for p in extra]
    unique = list(dict.fromkeys(roots))
    return [p for p in unique if not _under(p, [q for q in unique if q != p])]


def _preload(modules: tuple[str, ...]) -> LayerResult:
    """Import now what the worker would import lazily; map the native libraries we dlopen later."""
    loaded: list[str] = []
    missing: list[str] = []
    for lib in ("libgcc_s.so.1",):  # glibc dlopens it for pthread_exit/unwinding; Rust panics need it
        try:
            ctypes.CDLL(lib)
        except OSError as exc:
            missing.append(f"{lib} ({exc})")
    _seccomp.load()
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 -- an absent/broken module must not stop the worker
            missing.append(f"{name} ({type(exc).__name__}: {exc})")
        else:
            loaded.append(name)
    detail = f"imported {len(loaded)} modules"
    if missing:
        return False, f"{detail}; missing: {'; '.join(missing)}"
    return True, detail


def _apply_landlock(paths: list[str], ipc_dir: str | None) -> LayerResult:
    active, detail = _landlock.apply(paths, ipc_dir)
    if active:
        sys.dont_write_bytecode = True  # writes are denied; don't try for every lazy import
    return active, detail


def _recheck_pdeathsig(report: Report, parent: int) -> None:
    """Credentials changed (userns, capset); re-arm so the setting provably survives."""
    if report["pdeathsig"]["active"]:
        active, detail = set_pdeathsig(parent)
        detail += "; re-armed after namespace/capability changes"
        report["pdeathsig"] = {"active": active, "detail": detail}


def enter(config: SandboxConfig) -> Report:
    """Apply every layer, in order, to this process; return the per-layer report.

    With ``config.probe`` the report also holds ``"probe"``: the outcome of trying
    what the sandbox forbids. May be called once per process.
    """
    global _entered
    if _entered:
        raise RuntimeError("worker.sandbox.enter() may be called only once per process")
    _entered = True
    parent = config.parent_pid if config.parent_pid is not None else os.getppid()
    others = thread_count() - 1
    uid, gid = os.getuid(), os.getgid()  # before CLONE_NEWUSER hides them
    report: Report = {}

    def run(name: str, apply: Callable[[], LayerResult]) -> None:
        if name in config.disabled:
            report[name] = {"active": False, "detail": "disabled by configuration"}
            return
        try:
            active, detail = apply()
        except Exception as exc:  # noqa: BLE001 -- a failing layer is reported, never fatal
            active, detail = False, f"unexpected {type(exc).__name__}: {exc}"
        if active and others > 0 and name in PER_THREAD_LAYERS:
            active = False
            detail += f"; PARTIAL: calling thread only, {others} earlier thread(s) escape it"
        report[name] = {"active": active, "detail": detail}

    run("env", scrub_environment)
    run("no_new_privs", set_no_new_privs)
    run("pdeathsig", lambda: set_pdeathsig(parent))
    run("rlimits", lambda: _rlimits(config))
    run("netns", unshare_network)
    run("preload", lambda: _preload(config.preload))
    paths = read_paths(config.read_paths)  # after the pre-import: its packages are included
    run("mountns", lambda: _mountns.apply(paths, config.ipc_dir, uid, gid))
    run("capabilities", lambda: _caps_result(drop_capabilities()))
    _recheck_pdeathsig(report, parent)
    run("landlock", lambda: _apply_landlock(paths, config.ipc_dir))
    run("seccomp", _seccomp.apply)
    if config.probe:
        report["probe"] = probe(config.probe_env, config.probe_port, config.probe_unix_path, config.probe_pid)
    return report


def _rlimits(config: SandboxConfig) -> LayerResult:
    active, detail = set_rlimits(config.memory_bytes, config.cpu_seconds, config.open_files, config.file_size)
    return active, f"{detail}; {cap_malloc_arenas(config.malloc_arenas)}; {disable_huge_pages()}"


def _caps_result(text: str) -> LayerResult:
    return text == "all capabilities dropped", text


def start_parent_watch(
    parent_pid: int, interval: float = 0.2, on_orphan: Callable[[], None] | None = None
) -> threading.Thread:
    """Poll :func:`parent_alive` in a daemon thread; SIGKILL ourselves when the parent is gone.

    PDEATHSIG is tied to the *thread* that forked us and can be lost in races, so the
    worker also checks; start this *after* :func:`enter` (threads block unshare).
    """

    def watch() -> None:
        while parent_alive(parent_pid):
            time.sleep(interval)
        (on_orphan or _die)()

    thread = threading.Thread(target=watch, name="rhaipool-parent-watch", daemon=True)
    thread.start()
    return thread


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def rearm_cpu(budget_seconds: float) -> int:
    """Set RLIMIT_CPU's soft limit to CPU used so far + ``budget_seconds`` (capped by the hard limit).

    RLIMIT_CPU counts the whole process lifetime, so a per-job budget must be re-armed
    before each job; SIGXCPU at the soft limit kills the worker.
    """
    usage = resource.getrusage(resource.RUSAGE_SELF)
    _soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = math.ceil(usage.ru_utime + usage.ru_stime + budget_seconds)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    return soft
