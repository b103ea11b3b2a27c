"""Sandboxed workers die with their parent, and zmq ``ipc://`` still works inside the sandbox.

Real process trees: a parent interpreter spawns ``python -m worker.sandbox --hold``
(from its main thread or from another thread), the test SIGKILLs the parent and
watches the child with psutil.
"""

from __future__ import annotations

import json
import os
import select
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
import zmq

ROOT = Path(__file__).resolve().parents[2]
Tree = tuple[subprocess.Popen[bytes], psutil.Process, dict[str, dict[str, Any]]]

PARENT = textwrap.dedent(
    """
    import os, subprocess, sys, threading, time
    mode, extra = sys.argv[1], sys.argv[2:]
    cmd = [sys.executable, "-m", "worker.sandbox", "--hold", "60", "--parent-pid", str(os.getpid()), *extra]

    def spawn():
        piped = mode == "thread-exits"
        child = subprocess.Popen(cmd, stdout=subprocess.PIPE if piped else None)
        print("CHILD", child.pid, flush=True)
        if piped:  # relay the report, then let this (spawning) thread end
            sys.stdout.write(child.stdout.readline().decode())
            sys.stdout.flush()
        elif mode == "thread":
            threading.Event().wait()

    if mode == "main":
        spawn()
    else:
        threading.Thread(target=spawn, daemon=True).start()
    while True:
        time.sleep(1)
    """
)


def _read_until_report(stream: int, timeout: float = 20.0) -> tuple[int, dict[str, dict[str, Any]]]:
    """Read the parent's stdout until it has printed the child pid and the child's JSON report."""
    buffer = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([stream], [], [], 0.1)
        if ready:
            chunk = os.read(stream, 65536)
            if not chunk:
                break
            buffer += chunk
        lines = buffer[: buffer.rfind(b"\n") + 1].decode().splitlines()  # complete lines only
        pids = [int(line.split()[1]) for line in lines if line.startswith("CHILD ")]
        reports = [json.loads(line) for line in lines if line.startswith("{")]
        if pids and reports:
            return pids[0], reports[0]
    raise AssertionError(f"no child pid and report within {timeout}s: {buffer!r}")


def _gone(proc: psutil.Process) -> bool:
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _seconds_until_gone(proc: psutil.Process, limit: float = 5.0) -> float:
    start = time.monotonic()
    while not _gone(proc) and time.monotonic() - start < limit:
        time.sleep(0.01)
    return time.monotonic() - start


@pytest.fixture
def parent_tree(request: pytest.FixtureRequest) -> Iterator[Tree]:
    """Start PARENT with ``request.param = (mode, child args)``; clean up whatever survives."""
    mode, extra = request.param
    parent = subprocess.Popen([sys.executable, "-c", PARENT, mode, *extra], cwd=ROOT, stdout=subprocess.PIPE)
    child: psutil.Process | None = None
    try:
        assert parent.stdout is not None
        pid, report = _read_until_report(parent.stdout.fileno())
        child = psutil.Process(pid)
        yield parent, child, report
    finally:
        for proc in (parent,):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        if child is not None and not _gone(child):
            child.kill()
        if parent.stdout is not None:
            parent.stdout.close()


WATCH_OFF = ["--watch-interval", "0"]
NO_PDEATHSIG = ["--disable", "pdeathsig", "--watch-interval", "0.1"]


@pytest.mark.parametrize(
    "parent_tree",
    [
        pytest.param(("main", WATCH_OFF), id="pdeathsig-main-thread"),
        pytest.param(("thread", WATCH_OFF), id="pdeathsig-spawned-from-live-thread"),
        pytest.param(("main", NO_PDEATHSIG), id="liveness-watch-main-thread"),
        pytest.param(("thread", NO_PDEATHSIG), id="liveness-watch-spawned-from-thread"),
    ],
    indirect=True,
)
def test_worker_is_gone_within_one_second_of_parent_sigkill(parent_tree: Tree) -> None:
    """Each mechanism alone (PDEATHSIG, the liveness watch) is enough."""
    parent, child, report = parent_tree
    assert report["netns"]["active"] and report["landlock"]["active"]  # the sandbox really is up
    assert not _gone(child)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    elapsed = _seconds_until_gone(child)
    assert _gone(child), "worker outlived its parent"
    assert elapsed < 1.0, f"worker took {elapsed:.2f}s to die"


@pytest.mark.parametrize(
    "parent_tree", [pytest.param(("thread-exits", WATCH_OFF), id="thread-exits")], indirect=True
)
def test_pitfall_pdeathsig_fires_when_the_spawning_thread_exits(parent_tree: Tree) -> None:
    """PDEATHSIG follows the forking *thread*: the coordinator must spawn from a long-lived thread."""
    parent, child, _report = parent_tree
    elapsed = _seconds_until_gone(child)
    assert parent.poll() is None, "the parent itself is still alive"
    assert _gone(child) and elapsed < 1.0


def test_worker_whose_parent_is_already_gone_kills_itself_at_once() -> None:
    """The fork/prctl race: a parent that died before PDEATHSIG was set is caught by the re-check."""
    not_my_parent = os.getpid()  # the child's real parent is this process's subprocess, not us
    done = subprocess.run(
        [sys.executable, "-m", "worker.sandbox", "--parent-pid", str(not_my_parent + 10**6)],
        check=False,
        cwd=ROOT,
        capture_output=True,
        timeout=30,
    )
    assert done.returncode == -signal.SIGKILL
    assert done.stdout == b""


CHILD_ZMQ = textwrap.dedent(
    """
    import json, os, sys
    from worker.sandbox import SandboxConfig, enter, start_parent_watch
    endpoint, ipc_dir = sys.argv[1], sys.argv[2]
    report = enter(SandboxConfig(ipc_dir=ipc_dir, parent_pid=os.getppid()))
    start_parent_watch(os.getppid())
    import zmq
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.connect(endpoint)
    sock.send_multipart([b"hello", json.dumps(report).encode()])
    assert sock.poll(15000), "no reply from the first ROUTER"
    print("got", sock.recv_multipart()[0].decode(), flush=True)
    for n in range(150):  # the ROUTER restarts: keep pinging until the new one answers
        sock.send_multipart([b"ping", str(n).encode()])
        if sock.poll(200):
            print("got", sock.recv_multipart()[0].decode(), flush=True)
            break
    sock.close(linger=0)
    ctx.term()
    """
)


def test_zmq_ipc_connect_and_reconnect_work_inside_the_sandbox(tmp_path: Path) -> None:
    ipc_dir = tmp_path / "ipc"
    ipc_dir.mkdir(mode=0o700)
    endpoint = f"ipc://{ipc_dir}/worker.sock"
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.bind(endpoint)
    cmd = [sys.executable, "-c", CHILD_ZMQ, endpoint, str(ipc_dir)]
    with subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as child:
        try:
            assert router.poll(20000), "sandboxed worker never connected"
            ident, kind, payload = router.recv_multipart()
            report = json.loads(payload)
            assert kind == b"hello"
            for layer in ("netns", "mountns", "landlock", "seccomp", "rlimits", "no_new_privs"):
                assert report[layer]["active"], (layer, report[layer]["detail"])
            router.send_multipart([ident, b"r1"])
            router.close(linger=2000)
            router = ctx.socket(zmq.ROUTER)
            router.bind(endpoint)  # a restarted coordinator socket on the same path
            assert router.poll(20000), "sandboxed worker never reconnected"
            ident, kind, _n = router.recv_multipart()
            assert kind == b"ping"
            router.send_multipart([ident, b"r2"])
            out, err = child.communicate(timeout=20)
        finally:
            if child.poll() is None:
                child.kill()
                child.communicate()
            router.close(linger=0)
            ctx.term()
    assert child.returncode == 0, err
    assert out.split() == ["got", "r1", "got", "r2"]
