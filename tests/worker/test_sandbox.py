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
from typing import Any

import pytest

from worker.sandbox import LAYERS, PER_THREAD_LAYERS, SUCCEEDED, parent_alive

ROOT = Path(__file__).resolve().parents[2]
SECRET_NAME = "RHAIPOOL_SECRET"
SECRET_VALUE = "hunter2-do-not-leak"
# Layers that these machines must provide (anchors §7): fail, do not skip, when absent.
REQUIRED = ("env", "no_new_privs", "pdeathsig", "rlimits", "netns", "mountns", "capabilities", "landlock")
BLOCKING_LAYERS = ("netns", "mountns", "landlock", "seccomp")


def _libseccomp_loads() -> bool:
    try:
        ctypes.CDLL("libseccomp.so.2")
    except OSError:
        return False
    return True


def _env() -> dict[str, str]:
    return {**os.environ, SECRET_NAME: SECRET_VALUE}


def run_cli(*args: str, timeout: float = 30.0) -> dict[str, dict[str, Any]]:
    """Run ``python -m worker.sandbox`` with a host secret set; return its JSON report."""
    cmd = [sys.executable, "-m", "worker.sandbox", "--probe-env", SECRET_NAME, *args]
    done = subprocess.run(
        cmd, check=False, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, dict[str, Any]] = json.loads(done.stdout.splitlines()[-1])
    return report


def run_child(code: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter that imports the sandbox API itself."""
    cmd = [sys.executable, "-c", textwrap.dedent(code)]
    return subprocess.run(
        cmd, check=False, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def ipc_dir(tmp_path: Path) -> Path:
    """The worker's private 0700 directory (what the supervisor passes on the command line)."""
    path = tmp_path / "ipc"
    path.mkdir(mode=0o700)
    return path


@pytest.fixture
def unix_listener(tmp_path: Path) -> Iterator[str]:
    """A pathname Unix socket *outside* the ipc directory, which the host can reach."""
    path = str(tmp_path / "outside.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(path)
        server.listen(8)
        yield path


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


def test_control_without_layers_every_probe_succeeds(
    listener: int, unix_listener: str, ipc_dir: Path
) -> None:
    """The probe can see success: with the blocking layers off, every attempt gets through."""
    off = [f"--disable={name}" for name in ("env", *BLOCKING_LAYERS)]
    report = run_cli(
        "--probe", f"--probe-port={listener}", f"--probe-unix={unix_listener}", f"--ipc-dir={ipc_dir}", *off
    )
    probe = report["probe"]
    assert probe["unix_connect_outside_ipc_dir"] == SUCCEEDED
    assert probe["open_etc_passwd"] == SUCCEEDED
    assert probe["tcp_connect_loopback"] == SUCCEEDED
    assert str(probe["env_var"]).startswith(SUCCEEDED)
    assert probe["execve"] == SUCCEEDED


def test_full_sandbox_reports_every_layer_and_blocks_every_probe(
    listener: int, unix_listener: str, ipc_dir: Path
) -> None:
    report = run_cli(
        "--probe", f"--probe-port={listener}", f"--probe-unix={unix_listener}", f"--ipc-dir={ipc_dir}"
    )
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
    return [f"--disable={other}" for other in BLOCKING_LAYERS if other != layer]


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


def test_seccomp_alone_refuses_inet_sockets_and_exec(listener: int) -> None:
    assert _libseccomp_loads(), "libseccomp.so.2 is missing: deploy/quickstart installs Debian's libseccomp2"
    report = run_cli("--probe", f"--probe-port={listener}", *_only("seccomp"))
    assert report["seccomp"]["active"], report["seccomp"]["detail"]
    assert f"Errno {errno.EPERM}" in report["probe"]["tcp_connect_loopback"]
    assert f"Errno {errno.EPERM}" in report["probe"]["execve"]


def test_mount_namespace_alone_hides_every_path_but_imports_and_ipc_dir(
    unix_listener: str, ipc_dir: Path
) -> None:
    """Closes Landlock's gap: up to ABI 7 it does not mediate connect(2) to pathname Unix sockets."""
    report = run_cli("--probe", f"--probe-unix={unix_listener}", f"--ipc-dir={ipc_dir}", *_only("mountns"))
    assert report["mountns"]["active"], report["mountns"]["detail"]
    probe = report["probe"]
    assert f"Errno {errno.ENOENT}" in probe["unix_connect_outside_ipc_dir"]
    assert f"Errno {errno.ENOENT}" in probe["open_etc_passwd"]


def test_mount_namespace_needs_the_ipc_dir() -> None:
    """Without an ipc_dir the worker could not reach its endpoint after the pivot: report, don't apply."""
    report = run_cli()
    assert not report["mountns"]["active"]
    assert "ipc_dir" in report["mountns"]["detail"]


def test_environment_scrub_alone_hides_host_variable() -> None:
    report = run_cli("--probe", *[f"--disable={n}" for n in BLOCKING_LAYERS])
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
        status = open("/proc/self/status")  # opened before Landlock; read at the end
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
        # VmHWM: this image's peak (ru_maxrss would also count the pre-exec copy of the forking parent)
        status.seek(0)
        print("maxrss_kib", next(line.split()[1] for line in status if line.startswith("VmHWM:")))
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


def test_rhai_and_threads_run_inside_the_full_sandbox(ipc_dir: Path) -> None:
    """The point of the pre-import: the engine, its threads and lazy stdlib imports still work."""
    done = run_child(
        f"""
        import json, threading
        from worker.sandbox import SandboxConfig, enter
        report = enter(SandboxConfig(ipc_dir={str(ipc_dir)!r}))
        import rhai, decimal, fractions  # decimal/fractions: lazy stdlib imports after the sandbox
        engine = rhai.Engine(max_operations=100_000, max_string_size=1_000_000, max_array_size=10_000,
                             max_map_size=10_000, max_variables=1_000, max_functions=100, max_call_levels=32,
                             max_expr_depth=64, max_function_expr_depth=32)
        script = engine.compile("fn main(x) {{ let s = 0; for i in 0..x {{ s += i; }} s }}", name="t.rhai")
        results = []
        threads = [threading.Thread(target=lambda: results.append(script.call("main", 100, timeout=5)))
                   for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(json.dumps({{"results": results, "layers": {{k: v["active"] for k, v in report.items()}}}}))
        """
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["results"] == [4950] * 4
    assert all(out["layers"][name] for name in (*REQUIRED, "preload")), out["layers"]


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
    assert done.returncode == -signal.SIGXCPU, done.returncode  # a nameable exit reason, not SIGKILL


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
    assert "limits" in done.stdout and ", 121)" in done.stdout, done.stdout  # hard cap untouched
    assert done.returncode == -signal.SIGXCPU, done.returncode


def test_threads_fit_under_the_address_space_limit() -> None:
    """Capped malloc arenas: without the cap 19 allocating threads exhausted 1 GiB here."""
    done = run_child(
        """
        import threading
        from worker.sandbox import SandboxConfig, enter
        enter(SandboxConfig(memory_bytes=1 << 30))
        import zmq
        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        release = threading.Event()
        def work():
            keep = [bytearray(1000) for _ in range(1000)]
            release.wait()
        threads = [threading.Thread(target=work) for _ in range(40)]
        try:
            for t in threads:
                t.start()
            print("started", len(threads))
        finally:
            release.set()
            for t in threads:
                if t.is_alive():
                    t.join()
            sock.close()
            ctx.term()
        """
    )
    assert done.returncode == 0, done.stderr
    assert "started 40" in done.stdout


def test_enter_in_a_threaded_process_degrades_and_says_why() -> None:
    """Never crash: a late call reports per-thread layers as partial (inactive) and says why."""
    done = run_child(
        """
        import json, threading
        from worker.sandbox import SandboxConfig, enter
        stop = threading.Event()
        early = threading.Thread(target=stop.wait)
        early.start()
        report = enter(SandboxConfig())
        stop.set()
        early.join()
        print(json.dumps(report))
        """
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    for name in PER_THREAD_LAYERS:
        assert not report[name]["active"], (name, report[name])
    assert "threads" in report["netns"]["detail"]  # unshare(CLONE_NEWUSER) refused: EINVAL
    assert "PARTIAL" in report["landlock"]["detail"]
    assert report["seccomp"]["active"] == _libseccomp_loads()  # TSYNC covers every thread
    assert report["rlimits"]["active"] and report["env"]["active"]  # process-wide


def test_parent_alive_follows_getppid() -> None:
    assert parent_alive(os.getppid())
    assert not parent_alive(os.getpid())


def _anon_huge_kib(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("AnonHugePages:"))


def test_concurrent_script_calls_get_no_transparent_huge_pages() -> None:
    """Each thread's first allocations in the binding's allocator (mimalloc) land in its own part of
    an arena that mimalloc marks MADV_HUGEPAGE: with THP on, every waiting provider call then held
    a 2 MiB huge page (~0.55 MiB per in-flight call measured, 36 MiB of a 64-call worker).  The
    sandbox turns THP off for the worker, so those calls hold only the 4 KiB pages they touch."""
    code = """
        import json, sys, threading
        from worker.sandbox import SandboxConfig, enter
        report = enter(SandboxConfig())
        import rhai
        from worker.sandbox._process import PR_GET_THP_DISABLE, libc
        engine = rhai.Engine(max_operations=100_000, max_string_size=1_000_000, max_array_size=10_000,
                             max_map_size=10_000, max_variables=1_000, max_functions=100, max_call_levels=32,
                             max_expr_depth=64, max_function_expr_depth=32)
        inside = threading.Barrier(33, timeout=30)
        release = threading.Event()
        def wait(x):
            inside.wait()
            release.wait(30)
            return x
        engine.register_fn("host_wait", wait)
        script = engine.compile("fn f(n) { let m = #{a: [n, `${n}`]}; host_wait(m) }", name="t.rhai")
        threads = [threading.Thread(target=script.call, args=("f", i), kwargs={"timeout": 30})
                   for i in range(32)]
        for t in threads:
            t.start()
        inside.wait()
        print(json.dumps({"thp_disabled": libc.prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0),
                          "rlimits": report["rlimits"]}), flush=True)
        sys.stdin.readline()  # the test reads our memory meanwhile
        release.set()
        for t in threads:
            t.join()
        """
    env = {**_env(), "MIMALLOC_ARENA_RESERVE": "64MiB"}  # as the supervisor starts workers
    cmd = [sys.executable, "-c", textwrap.dedent(code)]
    with subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as child:
        assert child.stdout is not None and child.stdin is not None
        line = child.stdout.readline()
        huge_kib = _anon_huge_kib(child.pid) if line else -1
        _, err = child.communicate("go\n", timeout=60)
    assert line and child.returncode == 0, err
    report = json.loads(line)
    assert report["thp_disabled"] == 1, report
    assert "transparent huge pages off" in report["rlimits"]["detail"], report
    assert huge_kib == 0, huge_kib
