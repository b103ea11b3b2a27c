"""Sandbox layers proven in real processes: each probe attempt fails for each active layer.

Every test starts a fresh interpreter (the sandbox is irreversible), applies the
sandbox through the public API or ``python -m worker.sandbox``, and inspects what
the sandboxed process could and could not do. No mocks.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.sandbox import LAYERS, SUCCEEDED, parent_alive

ROOT = Path(__file__).resolve().parents[2]
SECRET_NAME = "RHAIPOOL_SECRET"
SECRET_VALUE = "hunter2-do-not-leak"
# Layers that these machines must provide (anchors §7): fail, do not skip, when absent.
REQUIRED = ("env", "no_new_privs", "pdeathsig", "rlimits", "netns", "capabilities", "landlock")
OPTIONAL_NET_LAYERS = ("netns", "landlock", "seccomp")


def _libseccomp_loads() -> bool:
    try:
        ctypes.CDLL("libseccomp.so.2")
    except OSError:
        return False
    return True


def _env() -> dict[str, str]:
    return {**os.environ, SECRET_NAME: SECRET_VALUE}


def run_cli(*args: str, timeout: float = 30.0) -> dict[str, dict[str, object]]:
    """Run ``python -m worker.sandbox`` with a host secret set; return its JSON report."""
    cmd = [sys.executable, "-m", "worker.sandbox", "--probe-env", SECRET_NAME, *args]
    done = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def run_child(code: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter that imports the sandbox API itself."""
    cmd = [sys.executable, "-c", textwrap.dedent(code)]
    return subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def listener() -> Iterator[int]:
    """A real TCP server on 127.0.0.1 that the host *can* reach."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass  # the host reaches it, so a failure in the worker is the sandbox's doing
        yield port


def test_control_without_layers_every_probe_succeeds(listener: int) -> None:
    """The probe can see success: with the blocking layers off, every attempt gets through."""
    off = [f"--disable={name}" for name in ("env", "landlock", "seccomp", "netns")]
    report = run_cli("--probe", f"--probe-port={listener}", *off)
    probe = report["probe"]
    assert probe["open_etc_passwd"] == SUCCEEDED
    assert probe["tcp_connect_loopback"] == SUCCEEDED
    assert str(probe["env_var"]).startswith(SUCCEEDED)
    assert probe["execve"] == SUCCEEDED


def test_full_sandbox_reports_every_layer_and_blocks_every_probe(listener: int) -> None:
    report = run_cli("--probe", f"--probe-port={listener}")
    assert set(LAYERS) <= set(report)
    for name in LAYERS:
        assert isinstance(report[name]["active"], bool) and report[name]["detail"], name
    inactive = {name: report[name]["detail"] for name in REQUIRED if not report[name]["active"]}
    assert not inactive, f"layers required on these machines are inactive: {inactive}"
    if _libseccomp_loads():
        assert report["seccomp"]["active"], report["seccomp"]["detail"]
    probe = report["probe"]
    assert not any(str(v).startswith(SUCCEEDED) for v in probe.values()), probe
    assert SECRET_VALUE not in json.dumps(report)


def _only(layer: str) -> list[str]:
    return [f"--disable={other}" for other in OPTIONAL_NET_LAYERS if other != layer]


def test_landlock_alone_denies_etc_passwd_exec_and_tcp(listener: int) -> None:
    report = run_cli("--probe", f"--probe-port={listener}", *_only("landlock"))
    assert report["landlock"]["active"], report["landlock"]["detail"]
    probe = report["probe"]
    assert "Errno 13" in probe["open_etc_passwd"]  # EACCES from Landlock, not ENOENT
    assert "Errno 13" in probe["tcp_connect_loopback"]  # ABI >= 4 handles TCP connect
    assert "Errno 13" in probe["execve"]


def test_network_namespace_alone_makes_loopback_unreachable(listener: int) -> None:
    report = run_cli("--probe", f"--probe-port={listener}", *_only("netns"))
    assert report["netns"]["active"], report["netns"]["detail"]
    assert f"Errno {errno.ENETUNREACH}" in report["probe"]["tcp_connect_loopback"]
    assert report["probe"]["open_etc_passwd"] == SUCCEEDED  # only the network layer is on


@pytest.mark.skipif(not _libseccomp_loads(), reason="libseccomp.so.2 not installed (Debian: libseccomp2)")
def test_seccomp_alone_refuses_inet_sockets_and_exec(listener: int) -> None:
    report = run_cli("--probe", f"--probe-port={listener}", *_only("seccomp"))
    assert report["seccomp"]["active"], report["seccomp"]["detail"]
    assert f"Errno {errno.EPERM}" in report["probe"]["tcp_connect_loopback"]
    assert f"Errno {errno.EPERM}" in report["probe"]["execve"]


def test_environment_scrub_alone_hides_host_variable() -> None:
    report = run_cli("--probe", *[f"--disable={n}" for n in OPTIONAL_NET_LAYERS])
    assert report["env"]["active"], report["env"]["detail"]
    env_probe = report["probe"]["env_var"]
    assert env_probe.startswith("KeyError"), env_probe
    assert "0 non-NUL bytes" in env_probe  # /proc/self/environ readable here, and empty


def test_memory_limit_raises_memory_error_and_cannot_be_raised() -> None:
    done = run_child(
        """
        import resource
        from worker.sandbox import SandboxConfig, enter
        limit = 384 << 20
        report = enter(SandboxConfig(memory_bytes=limit))
        assert report["rlimits"]["active"], report
        try:
            big = bytearray(2 * limit)
        except MemoryError:
            print("one-shot: MemoryError")
        chunks = []
        try:
            while True:
                chunks.append(bytearray(16 << 20))
        except MemoryError:
            print("gradual: MemoryError after", len(chunks) * 16, "MiB")
        chunks.clear()
        try:
            resource.setrlimit(resource.RLIMIT_AS, (2 * limit, 2 * limit))
        except (ValueError, OSError) as exc:
            print("raise refused:", type(exc).__name__)
        print("maxrss_kib", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        """
    )
    assert done.returncode == 0, done.stderr
    assert "one-shot: MemoryError" in done.stdout
    assert "gradual: MemoryError" in done.stdout
    assert "raise refused" in done.stdout
    maxrss_kib = int(done.stdout.split("maxrss_kib")[1])
    assert maxrss_kib * 1024 <= 384 << 20


def test_rhai_memory_bomb_aborts_on_the_address_space_limit() -> None:
    """Rust aborts on allocation failure: the worker dies (SIGABRT, no core) instead of the machine."""
    pytest.importorskip("rhai")
    done = run_child(
        """
        from worker.sandbox import SandboxConfig, enter
        enter(SandboxConfig(memory_bytes=512 << 20))
        import rhai
        engine = rhai.Engine(max_operations=10_000_000, max_string_size=4_000_000_000,
                             max_array_size=1_000_000, max_map_size=1_000, max_variables=100,
                             max_functions=10, max_call_levels=8, max_expr_depth=64,
                             max_function_expr_depth=64)
        script = engine.compile('fn main() { let s = "xxxxxxxxxxxxxxxx"; loop { s += s; } }', name="b.rhai")
        print("calling", flush=True)
        script.call("main", timeout=30)
        print("survived")
        """
    )
    assert "calling" in done.stdout
    assert "survived" not in done.stdout
    assert done.returncode == -signal.SIGABRT, (done.returncode, done.stderr)
    assert "memory allocation" in done.stderr


def test_core_file_size_and_open_file_limits(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    done = run_child(
        f"""
        import os, resource
        from worker.sandbox import SandboxConfig, enter
        fd = os.open({str(target)!r}, os.O_WRONLY | os.O_CREAT, 0o600)  # opened before Landlock
        report = enter(SandboxConfig(file_size=4096, open_files=32))
        assert report["rlimits"]["active"], report
        print("core", resource.getrlimit(resource.RLIMIT_CORE))
        try:
            resource.setrlimit(resource.RLIMIT_CORE, (1 << 20, 1 << 20))
        except (ValueError, OSError):
            print("core raise refused")
        try:
            os.write(fd, b"x" * 8192)
            os.write(fd, b"x" * 8192)
        except OSError as exc:
            print("fsize errno", exc.errno)
        opened = []
        try:
            while True:
                opened.extend(os.pipe())
        except OSError as exc:
            print("nofile errno", exc.errno, "max fd", max(opened))
        """
    )
    assert done.returncode == 0, done.stderr
    assert "core (0, 0)" in done.stdout
    assert "core raise refused" in done.stdout
    assert f"fsize errno {errno.EFBIG}" in done.stdout
    assert target.stat().st_size <= 4096
    assert f"nofile errno {errno.EMFILE}" in done.stdout
    assert int(done.stdout.split("max fd")[1]) < 32


def test_cpu_hard_limit_kills_a_busy_worker() -> None:
    done = run_child(
        """
        from worker.sandbox import SandboxConfig, enter
        enter(SandboxConfig(cpu_seconds=1))
        while True:
            pass
        """
    )
    assert done.returncode in (-signal.SIGXCPU, -signal.SIGKILL), done.returncode


def test_rearm_cpu_sets_a_per_job_budget_below_the_hard_cap() -> None:
    done = run_child(
        """
        import resource
        from worker.sandbox import SandboxConfig, enter, rearm_cpu
        enter(SandboxConfig(cpu_seconds=120))
        soft = rearm_cpu(1)
        print("limits", soft, resource.getrlimit(resource.RLIMIT_CPU), flush=True)
        while True:
            pass
        """
    )
    assert "limits" in done.stdout and ", 120)" in done.stdout, done.stdout
    assert done.returncode == -signal.SIGXCPU, done.returncode


def test_parent_alive_follows_getppid() -> None:
    assert parent_alive(os.getppid())
    assert not parent_alive(os.getpid())
