"""A real worker process against a bare ROUTER socket: the worker's side of PROTOCOL.md.

No coordinator is involved, so these tests pin down what any coordinator may rely on.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import pytest
from bare_worker import BareWorker

from proto import (
    SIGNATURE,
    Call,
    Cancel,
    Chunk,
    Command,
    Credit,
    Error,
    Goodbye,
    Heartbeat,
    HostCall,
    HostChunk,
    HostReply,
    Ready,
    Result,
    Shutdown,
)

SOURCE = """
fn add(a, b) { a + b }
fn fetch(u) { let r = http_get(u); r + "!" }
fn guarded(u) { let r = ""; try { r = http_get(u); } catch (e) { r = "caught " + e.kind; } r }
fn relay(u, on_chunk) { stream_request(u, "{}", #{}, |p| on_chunk.call(#{delta: p})); "done" }
fn count(n, on_chunk) { for i in 0..n { on_chunk.call(i); } n }
fn wait() { sleep(30); 1 }
fn nap(s) { sleep(s); "rested" }
fn twice(u) { let a = http_get(u); let b = http_get(u + "/2"); a + b }
"""
SHA = hashlib.sha256(SOURCE.encode()).hexdigest()


class Bare(BareWorker):
    """A real worker on a bare ROUTER socket, with its stderr kept for inspection."""

    def __init__(self, tmp: str) -> None:
        super().__init__(tmp, keep_stderr=True)

    def call(
        self, fn: str, args: list[Any], *, op: str = "call", kind: str = "provider", source: bool = True
    ) -> int:
        call_id = next(self.ids)
        self.send(Call(call_id, op, kind, SHA, fn, args, 10.0, "t", "t.rhai", SOURCE if source else None, 2))
        return call_id


@pytest.fixture
def bare() -> Iterator[Bare]:
    with tempfile.TemporaryDirectory() as tmp:
        peer = Bare(tmp)
        try:
            ready = peer.recv()
            assert isinstance(ready, Ready)
            peer.ready = ready  # type: ignore[attr-defined]
            yield peer
        finally:
            peer.close()


def test_ready_reports_pid_version_and_sandbox(bare: Bare) -> None:
    ready = bare.ready  # type: ignore[attr-defined]
    assert ready.pid == bare.proc.pid and ready.versions == [1] and ready.capacity >= 1
    assert ready.sandbox and all({"active", "detail"} <= set(layer) for layer in ready.sandbox.values())


def test_load_call_and_cache_miss(bare: Bare) -> None:
    load = bare.call("", [], op="load", kind="region")
    reply = bare.recv()
    assert isinstance(reply, Result) and reply.id == load
    assert ["add", 2] in reply.value["functions"]
    call = bare.call("add", [2, 3], kind="region", source=False)
    reply = bare.recv()
    assert (reply.id, reply.value) == (call, 5) and reply.wall > 0 and reply.peak_rss > 0
    miss = bare.call("add", [1, 1], kind="provider", source=False)  # cached per kind: provider AST absent
    reply = bare.recv()
    assert isinstance(reply, Error) and (reply.id, reply.cls) == (miss, "ScriptMissing")


def test_host_call_round_trip_and_thrown_reply(bare: Bare) -> None:
    call = bare.call("fetch", ["http://x"])
    host = bare.recv()
    assert isinstance(host, HostCall) and (host.id, host.hid, host.name, host.args) == (
        call,
        1,
        "http_get",
        ["http://x"],
    )
    bare.send(HostReply(call, 1, True, "body"))
    assert bare.recv().value == "body!"
    call = bare.call("guarded", ["http://y"], source=False)
    host = bare.recv()
    bare.send(HostReply(call, host.hid, False, {"kind": "api", "message": "HTTP 500"}))
    assert bare.recv().value == "caught api"


def test_script_threads_share_the_socket_without_losing_messages(bare: Bare) -> None:
    """32 script threads send HOST_CALL and RESULT themselves while the loop thread receives."""
    calls = [bare.call("fetch", [f"http://x/{i}"], source=i == 0) for i in range(32)]
    hosts: dict[int, HostCall] = {}
    while len(hosts) < len(calls):
        host = bare.recv(timeout=5.0)
        assert isinstance(host, HostCall)
        hosts[host.id] = host
    for call in calls:
        bare.send(HostReply(call, hosts[call].hid, True, f"b{call}"))
    results: dict[int, Any] = {}
    while len(results) < len(calls):
        reply = bare.recv(timeout=5.0)
        assert isinstance(reply, Result)
        results[reply.id] = reply.value
    assert results == {call: f"b{call}!" for call in calls}


def test_stream_request_chunks_are_credited(bare: Bare) -> None:
    call = bare.call("relay", ["http://s"], op="stream")
    host = bare.recv()
    assert host.name == "stream_request" and host.args == ["http://s", "{}", {}]
    for seq, payload in enumerate(["a", "b"]):
        bare.send(HostChunk(call, host.hid, seq, payload))
    got = [bare.recv() for _ in range(4)]  # two CHUNKs out, two CREDITs back, in some order
    chunks = [m for m in got if isinstance(m, Chunk)]
    credits = [m for m in got if isinstance(m, Credit)]
    assert [c.value for c in chunks] == [{"delta": "a"}, {"delta": "b"}] and len(credits) == 2
    assert all(c.hid == host.hid for c in credits)
    bare.send(HostReply(call, host.hid, True, None))
    assert bare.recv().value == "done"


def test_output_stream_waits_for_credit(bare: Bare) -> None:
    call = bare.call("count", [5], op="stream")  # window is 2
    first = [bare.recv(), bare.recv()]
    assert [m.value for m in first] == [0, 1]
    with pytest.raises(TimeoutError):
        bare.recv(timeout=0.5)
    bare.send(Credit(call, 0, 3))
    rest = [bare.recv() for _ in range(4)]
    assert [m.value for m in rest[:3]] == [2, 3, 4] and isinstance(rest[3], Result) and rest[3].value == 5


def test_a_sleeping_call_does_not_hold_up_the_worker(bare: Bare) -> None:
    """The first provider call runs on the loop thread: its sleep must keep serving the socket."""
    sleeper = bare.call("wait", [])
    started = time.monotonic()
    other = bare.call("fetch", ["http://x"], source=False)
    host = bare.recv(timeout=2.0)
    assert isinstance(host, HostCall) and host.id == other
    bare.send(HostReply(other, host.hid, True, "b"))
    assert bare.recv(timeout=2.0).value == "b!"
    region = bare.call("add", [1, 2], kind="region")
    assert bare.recv(timeout=2.0).value == 3
    beat = bare.recv(timeout=2.0, skip_heartbeats=False)  # heartbeats go on meanwhile
    assert isinstance(beat, Heartbeat) and beat.stats["inflight"] >= 1
    bare.send(Cancel(sleeper))
    reply = bare.recv(timeout=2.0)
    assert isinstance(reply, Error) and (reply.id, reply.cls) == (sleeper, "Cancelled")
    assert time.monotonic() - started < 5.0 and region


def test_a_call_arriving_while_another_runs_is_served_at_once(bare: Bare) -> None:
    """A region CALL that arrives while the loop thread runs another, so before that one's RESULT is
    sent, is served right after it: the send must not leave it unseen until the next tick (the
    worker's socket signals arrivals by an edge, which a send can consume)."""
    bare.call("nap", [0], kind="region")  # cached
    assert bare.recv(timeout=5.0).value == "rested"
    gaps = []
    for _ in range(10):
        first = bare.call("nap", [0.02], kind="region", source=False)
        time.sleep(0.005)  # arrives while the first one sleeps
        second = bare.call("nap", [0], kind="region", source=False)
        answered = []
        for _ in range(2):
            answered.append((bare.recv(timeout=5.0).id, time.monotonic()))
        assert [a for a, _ in answered] == [first, second], answered
        gaps.append(answered[1][1] - answered[0][1])
    assert sorted(gaps)[5] < 0.02, gaps  # the median; a missed arrival waited for the 100 ms tick


@pytest.mark.parametrize(("seconds", "cls"), [(0, None), (-1, None), (0.05, None), (30.0, "ScriptTimeout")])
def test_sleep_is_bounded_by_the_deadline(bare: Bare, seconds: float, cls: str | None) -> None:
    call_id = next(bare.ids)
    bare.send(Call(call_id, "call", "provider", SHA, "nap", [seconds], 0.3, "t", "t.rhai", SOURCE, 2))
    started = time.monotonic()
    reply = bare.recv(timeout=5.0)
    if cls is None:
        assert isinstance(reply, Result) and reply.value == "rested"
    else:
        assert isinstance(reply, Error) and reply.cls == cls and reply.limit == "deadline"
        assert 0.25 < time.monotonic() - started < 2.0


def test_a_region_call_served_while_a_provider_call_waits_leaves_it_intact(bare: Bare) -> None:
    """A region call nested on the loop thread restores the waiting call's host channel after it."""
    call = bare.call("twice", ["http://x"])
    first = bare.recv()
    assert isinstance(first, HostCall) and first.args == ["http://x"]
    region = bare.call("add", [20, 22], kind="region", source=False)
    load = bare.recv()
    assert isinstance(load, Error) and (load.id, load.cls) == (region, "ScriptMissing")
    region = bare.call("add", [20, 22], kind="region")
    assert bare.recv().value == 42
    bare.send(HostReply(call, first.hid, True, "a"))
    second = bare.recv()
    assert isinstance(second, HostCall) and second.args == ["http://x/2"]
    bare.send(HostReply(call, second.hid, True, "b"))
    reply = bare.recv()
    assert isinstance(reply, Result) and (reply.id, reply.value) == (call, "ab")


def test_cancel_then_shutdown_says_goodbye(bare: Bare) -> None:
    call = bare.call("wait", [])
    bare.send(Cancel(call))
    reply = bare.recv()
    assert isinstance(reply, Error) and (reply.id, reply.cls) == (call, "Cancelled")
    bare.send(Shutdown("test"))
    assert isinstance(bare.recv(), Goodbye)
    assert bare.proc.wait(timeout=10) == 0


def test_invalid_messages_are_dropped_and_serving_continues(bare: Bare) -> None:
    for frames in (
        [b"junk"],
        [SIGNATURE + bytes((Command.CALL,)) + b"\xc1"],
        [b"RHP\x09\x10\x80"],
        [b"a", b"b"],
    ):
        bare.sock.send_multipart([bare.identity, *frames])
    bare.call("add", [20, 22], kind="region")
    assert bare.recv().value == 42
    assert bare.proc.poll() is None


def test_heartbeats_flow(bare: Bare) -> None:
    beat = bare.recv(skip_heartbeats=False)
    assert isinstance(beat, Heartbeat) and "calls" in beat.stats


def test_exits_when_parent_is_gone() -> None:
    """PDEATHSIG plus the parent check: an orphaned worker does not linger."""
    with tempfile.TemporaryDirectory() as tmp:
        code = (
            "import subprocess, sys, os;"
            f"p = subprocess.Popen([sys.executable, '-I', '-m', 'worker', '--connect', 'ipc://{tmp}/x.sock',"
            "'--identity', '00', '--parent-pid', str(os.getpid())]); print(p.pid, flush=True); os._exit(0)"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True
        )
        pid = int(out.stdout.split()[0])
        import psutil

        try:
            proc = psutil.Process(pid)
            proc.wait(timeout=5)
        except psutil.NoSuchProcess:
            pass
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
