"""``outcomes.blame`` over every way a worker dies, on real records of a real (exited) process.

The rule (outcomes' docstring): a kill for a lost heartbeat or memory, or a death we did not cause
(any signal but an external SIGKILL/SIGTERM, a non-zero exit), blames the one call running, and makes
suspects of several; a deadline or protocol kill blames its target; a frozen worker, an external kill
and a clean GOODBYE blame nobody.  A threaded call given up on that has not answered still runs: it
counts among the running.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Iterator

import pytest

from coordinator._core import outcomes
from coordinator._core.calls import Attempt, CallRecord
from coordinator._core.handles import ScriptHandle
from coordinator._core.kills import KillReason
from coordinator._core.processes import LocalProcess
from coordinator._core.workers import Placement, WorkerProcess
from proto import Kind, Op


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def exited(code: int) -> LocalProcess:
    """A real process that ended with ``code`` (negative: killed by that signal)."""
    if code < 0:
        process = LocalProcess.start([sys.executable, "-c", "import time; time.sleep(60)"], ".")
        process.popen.send_signal(-code)
    else:
        process = LocalProcess.start([sys.executable, "-c", f"raise SystemExit({code})"], ".")
    process.reap(timeout=30)
    process.close_output()
    return process


def worker_of(code: int, reason: KillReason | None = None, goodbye: str = "") -> Placement:
    process = WorkerProcess("w1", b"w1", exited(code), 0.0, kill_reason=reason, goodbye=goodbye)
    return Placement(process)


def attempt(
    loop: asyncio.AbstractEventLoop, worker: Placement, wire: int, kind: Kind, *, given_up: bool = False
) -> Attempt:
    handle = ScriptHandle(f"sha{wire}", f"s{wire}.rhai", kind, (("f", 0),), "fn f() { 0 }")
    call = CallRecord(wire, handle, Op.CALL, "f", [], 5.0, f"tenant{wire}", loop.create_future())
    tried = Attempt(wire, call, worker, sent_at=0.0)
    if given_up:
        worker.given_up[wire] = tried
    else:
        worker.attempts[wire] = tried
        if call.inline:
            worker.inline.append(tried)
    return tried


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (-signal.SIGKILL, KillReason.HEARTBEAT_LOST),
        (-signal.SIGKILL, KillReason.MEMORY),
        (-signal.SIGSEGV, None),
        (-signal.SIGABRT, None),
        (-signal.SIGBUS, None),
        (3, None),
    ],
)
def test_the_one_call_running_is_blamed(
    loop: asyncio.AbstractEventLoop, code: int, reason: KillReason | None
) -> None:
    worker = worker_of(code, reason)
    only = attempt(loop, worker, 1, Kind.PROVIDER)
    assert outcomes.blame(worker) == (only, [])


@pytest.mark.parametrize(
    ("code", "reason"), [(-signal.SIGKILL, KillReason.HEARTBEAT_LOST), (-signal.SIGSEGV, None)]
)
def test_several_running_are_suspects_given_up_ones_included(
    loop: asyncio.AbstractEventLoop, code: int, reason: KillReason | None
) -> None:
    worker = worker_of(code, reason)
    running = attempt(loop, worker, 1, Kind.PROVIDER)
    cancelled_but_running = attempt(loop, worker, 2, Kind.PROVIDER, given_up=True)
    blamed, suspects = outcomes.blame(worker)
    assert blamed is None and suspects == [running, cancelled_but_running]


def test_a_given_up_call_alone_is_blamed(loop: asyncio.AbstractEventLoop) -> None:
    """The loop thread stuck in a call answered at its deadline: nobody else was there to blame."""
    worker = worker_of(-signal.SIGKILL, KillReason.HEARTBEAT_LOST)
    stuck = attempt(loop, worker, 1, Kind.PROVIDER, given_up=True)
    assert outcomes.blame(worker) == (stuck, [])


def test_a_queued_region_call_is_not_running(loop: asyncio.AbstractEventLoop) -> None:
    worker = worker_of(-signal.SIGSEGV)
    head = attempt(loop, worker, 1, Kind.REGION)
    attempt(loop, worker, 2, Kind.REGION)  # waits behind the head at the worker
    assert outcomes.blame(worker) == (head, [])


def test_a_kill_for_a_deadline_blames_its_target_among_several(loop: asyncio.AbstractEventLoop) -> None:
    worker = worker_of(-signal.SIGKILL, KillReason.DEADLINE)
    attempt(loop, worker, 1, Kind.PROVIDER)
    target = attempt(loop, worker, 2, Kind.PROVIDER, given_up=True)
    worker.kill_target = target
    assert outcomes.blame(worker) == (target, [])


@pytest.mark.parametrize(
    ("code", "reason", "goodbye"),
    [
        (-signal.SIGKILL, KillReason.FROZEN, ""),
        (-signal.SIGKILL, KillReason.UNREACHABLE, ""),
        (-signal.SIGKILL, KillReason.POOL_CLOSED, ""),
        (-signal.SIGKILL, None, ""),  # an operator's kill (or the OOM killer's choice)
        (-signal.SIGTERM, None, ""),
        (0, None, "shutdown"),
    ],
)
def test_deaths_that_are_not_the_calls_doing_blame_nobody(
    loop: asyncio.AbstractEventLoop, code: int, reason: KillReason | None, goodbye: str
) -> None:
    worker = worker_of(code, reason, goodbye)
    attempt(loop, worker, 1, Kind.PROVIDER)
    assert outcomes.blame(worker) == (None, [])


def test_a_crash_after_goodbye_excuses_nothing(loop: asyncio.AbstractEventLoop) -> None:
    worker = worker_of(-signal.SIGSEGV, goodbye="shutdown")
    only = attempt(loop, worker, 1, Kind.PROVIDER)
    assert outcomes.blame(worker) == (only, [])
