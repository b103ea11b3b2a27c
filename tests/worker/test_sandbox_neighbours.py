"""Attacks from a compromised worker on the processes beside it, proven in real sandboxed processes.

Workers run under the coordinator's uid, so every kernel check that is "same uid" lets
a worker reach the coordinator and its sibling workers unless the sandbox refuses it:
System V IPC (shared with the host's IPC namespace), another process's rlimits,
priority, scheduling class, CPU affinity and I/O priority, and signals (which Landlock
scopes only from ABI 6). Each test runs the attack inside a freshly sandboxed
interpreter, checks the victim from the host, and has a control run with the guarding
layers off that shows the attack landing, so each test can fail. No mocks.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from pool_support import run

from coordinator._core.pool import Pool
from worker.sandbox import SUCCEEDED

ROOT = Path(__file__).resolve().parents[2]
CROSS_PROCESS_PROBES = (
    "sysv_shm",
    "prlimit_other_process",
    "renice_other_process",
    "affinity_other_process",
    "ioprio_other_process",
    "signal_other_process",
)

# Runs inside the sandbox: argv = [ipc_dir, disabled layers (comma list), attack, victim pid or key].
_ATTACKER = textwrap.dedent(
    """
    import ctypes, json, os, signal, socket, sys
    from worker.sandbox import SandboxConfig, enter
    ipc_dir, disabled, attack, target = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    report = enter(SandboxConfig(ipc_dir=ipc_dir, disabled=frozenset(filter(None, disabled.split(",")))))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.shmat.restype = ctypes.c_void_p
    out = {"layers": {k: v["active"] for k, v in report.items()}}

    def rc(name, value):
        out[name] = "ok" if value >= 0 else os.strerror(ctypes.get_errno())

    if attack == "sysv":
        shm = libc.shmget(target, 0, 0)
        rc("shmget", shm)
        if shm >= 0:
            addr = libc.shmat(shm, None, 0)
            if addr not in (None, ctypes.c_void_p(-1).value):
                out["read"] = ctypes.string_at(addr, 24).decode("latin-1")
                ctypes.memmove(addr, b"WORKER", 6)
        rc("shmget_create", libc.shmget(0, 4096, 0o1000 | 0o600))
    elif attack == "sched":
        class Param(ctypes.Structure):
            _fields_ = [("priority", ctypes.c_int)]
        rc("setpriority", libc.setpriority(0, target, 19))
        rc("setpriority_pgrp", libc.setpriority(1, target, 19))  # the victim leads its own group
        rc("sched_setscheduler", libc.sched_setscheduler(target, 5, ctypes.byref(Param(0))))  # SCHED_IDLE
        rc("sched_setaffinity", libc.sched_setaffinity(target, 8, ctypes.byref(ctypes.c_uint64(1))))
        rc("ioprio_set", libc.syscall(251, 1, target, 3 << 13))  # IOPRIO_CLASS_IDLE
        limit = (ctypes.c_uint64 * 2)(5, 5)
        rc("prlimit", libc.prlimit(target, 7, ctypes.byref(limit), None))  # RLIMIT_NOFILE
    elif attack == "signal":
        rc("kill_group_null", libc.kill(0, 0))  # the coordinator's process group; null signal only
        rc("kill_all_null", libc.kill(-1, 0))
        rc("rt_sigqueueinfo", libc.syscall(129, target, 15, ctypes.byref((ctypes.c_int * 32)(15, 0, -1))))
        rc("tgkill", libc.syscall(234, target, target, 15))
        pidfd = libc.syscall(434, target, 0)
        rc("pidfd_send_signal", libc.syscall(424, pidfd, 15, None, 0) if pidfd >= 0 else -1)
        a, b = socket.socketpair()
        rc("f_setown", libc.fcntl(a.fileno(), 8, target))  # F_SETOWN, then SIGTERM on I/O
        libc.fcntl(a.fileno(), 10, 15)  # F_SETSIG
        libc.fcntl(a.fileno(), 4, os.O_ASYNC | os.O_RDWR)  # F_SETFL
        b.send(b"x")
        rc("kill", libc.kill(target, 15))
    print(json.dumps(out))
    """
)


def attack(ipc_dir: Path, kind: str, target: int, disabled: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run one attack in a freshly sandboxed interpreter; return what each attempt returned."""
    cmd = [sys.executable, "-c", _ATTACKER, str(ipc_dir), ",".join(disabled), kind, str(target)]
    done = subprocess.run(cmd, check=False, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


@pytest.fixture
def ipc_dir(tmp_path: Path) -> Path:
    path = tmp_path / "ipc"
    path.mkdir(mode=0o700)
    return path


@pytest.fixture
def shm_secret() -> Iterator[tuple[int, ctypes.c_void_p]]:
    """A host System V segment (mode 0600) holding a secret, as a same-uid process might keep one."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    key = 0x52480000 | (os.getpid() & 0xFFFF)
    shm = libc.shmget(key, 4096, 0o1000 | 0o2000 | 0o600)  # IPC_CREAT | IPC_EXCL
    assert shm >= 0, os.strerror(ctypes.get_errno())
    addr = libc.shmat(shm, None, 0)
    ctypes.memmove(addr, b"coordinator-secret-token", 24)
    try:
        yield key, addr
    finally:
        libc.shmdt(ctypes.c_void_p(addr))
        libc.shmctl(shm, 0, None)  # IPC_RMID


_CAPLESS = textwrap.dedent(
    """
    import ctypes, sys, time
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(64):
        libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    assert libc.capset(header, (ctypes.c_uint32 * 6)()) == 0
    print("ready", flush=True)
    time.sleep(60)
    """
)


@pytest.fixture
def victim() -> Iterator[psutil.Process]:
    """A same-uid process holding no capabilities: what a coordinator run by an ordinary user looks like.

    (A root coordinator keeps full capabilities, and commoncap then refuses renice/scheduling
    changes from a capability-less worker; an ordinary user's coordinator has no such shield.)
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", _CAPLESS], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    try:
        yield psutil.Process(proc.pid)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def _state(proc: psutil.Process) -> dict[str, Any]:
    return {
        "nice": proc.nice(),
        "policy": os.sched_getscheduler(proc.pid),
        "affinity": sorted(os.sched_getaffinity(proc.pid)),
        "ionice": tuple(proc.ionice()),
        "nofile": proc.rlimit(psutil.RLIMIT_NOFILE),
    }


def test_real_worker_probe_blocks_cross_process_access_and_sysv_ipc() -> None:
    """``python -m worker --probe`` aims each cross-process attempt at the coordinator
    (no-ops if let through)."""

    async def scenario() -> None:
        async with Pool(workers=1, spares=0, probe=True) as pool:
            (worker,) = pool.workers()
            assert worker.probe is not None
            missing = [name for name in CROSS_PROCESS_PROBES if name not in worker.probe]
            assert not missing, worker.probe
            landed = {k: v for k, v in worker.probe.items() if str(v).startswith(SUCCEEDED)}
            assert not landed, landed

    run(scenario())


def test_host_system_v_shared_memory_is_out_of_reach(
    ipc_dir: Path, shm_secret: tuple[int, ctypes.c_void_p]
) -> None:
    key, addr = shm_secret
    control = attack(ipc_dir, "sysv", key, disabled=("netns", "seccomp"))
    assert control["read"] == "coordinator-secret-token", control  # the attack works when unguarded
    ctypes.memmove(addr, b"coordinator-secret-token", 24)

    full = attack(ipc_dir, "sysv", key)
    assert full["layers"]["netns"] and full["layers"]["seccomp"], full
    assert "read" not in full and full["shmget"] != "ok" and full["shmget_create"] != "ok", full
    assert ctypes.string_at(addr, 24) == b"coordinator-secret-token"


@pytest.mark.parametrize("layer", ["netns", "seccomp"])
def test_each_of_ipc_namespace_and_seccomp_alone_hides_host_sysv_ipc(
    ipc_dir: Path, shm_secret: tuple[int, ctypes.c_void_p], layer: str
) -> None:
    """Two independent guards: a private IPC namespace (netns step) and the seccomp deny rules."""
    key, addr = shm_secret
    other = {"netns": "seccomp", "seccomp": "netns"}[layer]
    result = attack(ipc_dir, "sysv", key, disabled=(other,))
    assert result["layers"][layer], result
    assert "read" not in result and result["shmget"] != "ok", result
    assert ctypes.string_at(addr, 24) == b"coordinator-secret-token"


def test_worker_cannot_renice_idle_pin_or_limit_a_same_uid_process(
    ipc_dir: Path, victim: psutil.Process
) -> None:
    before = _state(victim)
    result = attack(ipc_dir, "sched", victim.pid)
    assert result["layers"]["seccomp"], result
    landed = {k: v for k, v in result.items() if v == "ok"}
    assert not landed, result
    assert _state(victim) == before


def test_control_unguarded_worker_does_renice_idle_pin_and_limit(
    ipc_dir: Path, victim: psutil.Process
) -> None:
    """Without seccomp the same attack lands on the capability-less victim: the test above can fail."""
    result = attack(ipc_dir, "sched", victim.pid, disabled=("seccomp",))
    assert result["layers"]["landlock"] and result["layers"]["capabilities"], result
    after = _state(victim)
    assert after["nice"] == 19 and after["policy"] == os.SCHED_IDLE and after["affinity"] == [0], after
    assert after["nofile"] == (5, 5), after


def test_prlimit_reaches_even_a_root_coordinator_without_seccomp(ipc_dir: Path) -> None:
    """prlimit has no capability-subset check:
    a worker could set a root coordinator's RLIMIT_CPU and kill it."""
    with subprocess.Popen(["sleep", "60"]) as sleeper:
        try:
            target = psutil.Process(sleeper.pid)
            control = attack(ipc_dir, "sched", sleeper.pid, disabled=("seccomp",))
            assert control["prlimit"] == "ok" and target.rlimit(psutil.RLIMIT_NOFILE) == (5, 5), control
        finally:
            sleeper.kill()
    with subprocess.Popen(["sleep", "60"]) as sleeper:
        try:
            target = psutil.Process(sleeper.pid)
            before = target.rlimit(psutil.RLIMIT_NOFILE)
            result = attack(ipc_dir, "sched", sleeper.pid)
            assert result["prlimit"] != "ok" and target.rlimit(psutil.RLIMIT_NOFILE) == before, result
        finally:
            sleeper.kill()


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "60"])


def _alive_after(proc: subprocess.Popen[bytes], seconds: float = 0.3) -> bool:
    time.sleep(seconds)
    return proc.poll() is None


@pytest.mark.parametrize("disabled", [(), ("landlock",)], ids=["full", "without-landlock"])
def test_worker_cannot_signal_another_process(ipc_dir: Path, disabled: tuple[str, ...]) -> None:
    """Landlock scopes signals only from ABI 6 (Linux 6.12); seccomp pins every signal path to our own pid."""
    sleeper = _sleeper()
    try:
        result = attack(ipc_dir, "signal", sleeper.pid, disabled=disabled)
        assert result["layers"]["seccomp"], result
        landed = {k: v for k, v in result.items() if v == "ok"}
        assert not landed, result
        assert _alive_after(sleeper), "the sandboxed worker killed a process beside it"
    finally:
        sleeper.kill()
        sleeper.wait()


def test_control_without_landlock_and_seccomp_a_worker_kills_its_neighbour(ipc_dir: Path) -> None:
    sleeper = _sleeper()
    try:
        result = attack(ipc_dir, "signal", sleeper.pid, disabled=("landlock", "seccomp"))
        assert any(result[k] == "ok" for k in ("rt_sigqueueinfo", "tgkill", "kill")), result
        assert not _alive_after(sleeper)
        assert sleeper.wait(timeout=5) == -signal.SIGTERM
    finally:
        sleeper.kill()
        sleeper.wait()
