"""A lying worker against a real Pool: it may fail its own calls, nothing else; and what the pool sends
is always something a worker can decode.

The liar is a real DEALER socket that takes over one worker slot: the process the supervisor started
for that slot is SIGSTOPped before it can connect, and the test's socket connects with its routing id
and sends READY with its pid.  The pool cannot tell it from a worker whose script took over the process.
The last group pins three coordinator defects this audit found, now fixed: the CHUNK window is
enforced, host calls are numbered and bounded per call, and a malformed load RESULT is a typed failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator
from typing import Any

import msgpack
import pytest
import zmq
from pool_support import SCRIPT, run

from coordinator._core.config import Deadlines, PoolConfig
from coordinator._core.hostcalls import MAX_OPEN_HOST_CALLS
from coordinator._core.pool import Pool
from coordinator._core.workers import WorkerProcess
from coordinator.errors import CallFailed, ScriptTimeout, WorkerCrashed
from proto import (
    SIGNATURE,
    Call,
    Chunk,
    Command,
    Credit,
    Error,
    Goodbye,
    Heartbeat,
    HostCall,
    HostReply,
    Ready,
    Result,
    RhaipoolError,
    WireMessage,
    decode,
    encode,
    signature_for,
)

PROVIDER = """
fn fetch(url) { http_get(url) }
fn guarded(url) { let r = ""; try { r = http_get(url); } catch (e) { r = `thrown: ${e}`; } r }
fn stream(n, on_chunk) { for i in 0..n { on_chunk.call(i); } n }
"""


class FakeWorker:
    """One worker slot of a real Pool, spoken for by the test (see the module docstring)."""

    def __init__(self, endpoint: str, slot: WorkerProcess) -> None:
        self.slot = slot
        os.kill(slot.pid, signal.SIGSTOP)  # before it connects: its routing id is ours
        self.context = zmq.Context()
        self.sock = self.context.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.ROUTING_ID, slot.identity)
        self.sock.connect(endpoint)

    def send(self, message: WireMessage | list[bytes]) -> None:
        self.sock.send_multipart(message if isinstance(message, list) else encode(message))

    def ready(self, capacity: int = 4) -> None:
        self.send(Ready(self.slot.pid, [1], capacity, {"fake": {"active": True, "detail": "test"}}))

    async def recv(self, timeout: float = 5.0) -> Any:
        """The next message from the pool (its heartbeats skipped); we heartbeat meanwhile."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.sock.poll(0):
                message = decode(self.sock.recv_multipart())
                if not isinstance(message, Heartbeat):
                    return message
            else:
                self.send(Heartbeat({}))
                await asyncio.sleep(0.005)
        raise TimeoutError("the pool sent nothing")

    async def answer_load(self, functions: list[list[Any]]) -> None:
        call = await self.recv()
        assert isinstance(call, Call) and call.op == "load"
        self.send(Result(call.id, {"functions": functions}))

    def close(self) -> None:
        self.sock.close()
        self.context.term()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.slot.pid, signal.SIGKILL)


@contextlib.asynccontextmanager
async def pool_with_fake(workers: int = 1, **options: Any) -> AsyncIterator[tuple[Pool, FakeWorker]]:
    """A started Pool whose first worker slot is a ``FakeWorker`` (the other slots are real)."""
    deadlines = Deadlines(heartbeat=1.0, shutdown_grace=0.3)
    pool = Pool(PoolConfig(workers=workers, spares=0, deadlines=deadlines, **options))
    entering = asyncio.ensure_future(pool.__aenter__())
    while not hasattr(pool, "_supervisor") or len(pool._supervisor.workers) < workers:
        await asyncio.sleep(0)
    fake = FakeWorker(pool.endpoint, next(iter(pool._supervisor.workers.values())))
    try:
        fake.ready()
        await entering
        yield pool, fake
    finally:
        await pool.aclose()
        fake.close()


# -- what the pool sends must decode -------------------------------------------------------------


def test_arguments_without_wire_form_fail_at_once_and_kill_no_worker() -> None:
    """Int map keys, an over-long list, a zero timeout: msgpack packs them, the worker's decoder refused
    them, and each call used to wait out its deadline, kill the worker and strike the script (three
    such calls quarantined it for every tenant)."""

    async def scenario() -> None:
        async with Pool(workers=1, spares=0) as pool:
            handle = await pool.load(SCRIPT, name="s.rhai")
            bad: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
                (({1: 2},), {}),
                (({"ok": [{b"k": 1}]},), {}),
                (([0] * 1_000_001,), {}),
                ((1,), {"timeout": 0}),
                ((1,), {"timeout": float("nan")}),
                ((1,), {"tenant": 5}),
            ]
            for args, options in bad * 2:
                served = pool.workers()[0].calls
                with pytest.raises(CallFailed, match="cannot be sent"):
                    await pool.call(handle, "echo", *args, **({"timeout": 5.0} | options))
                assert pool.workers()[0].calls == served  # refused before any worker saw it
            assert await pool.call(handle, "add", 1, 2) == 3  # not quarantined
            stats = pool.statistics()
            assert stats.exits == 0 and stats.quarantined == 0

    run(scenario())


def test_a_host_value_without_wire_form_is_thrown_into_the_script() -> None:
    """The handler's reply packed, the worker dropped it, and the script waited out its deadline."""

    class Host:
        sent = True

        def begin_attempt(self, spawn: object) -> None:
            pass

        async def call(self, name: str, args: list[Any]) -> Any:
            return {1: "int key"}

        async def stream(self, name: str, args: list[Any]) -> AsyncIterator[Any]:
            yield "unused"

    async def scenario() -> None:
        async with Pool(workers=1, spares=0) as pool:
            handle = await pool.load(PROVIDER, name="p.rhai", kind="provider")
            value = await pool.call(handle, "guarded", "http://x", timeout=5.0, host=Host())
            assert "cannot be sent" in value

    run(scenario())


# -- a lying worker fails its own calls, nothing else ---------------------------------------------


def test_a_result_forged_for_another_workers_call_is_dropped() -> None:
    async def scenario() -> None:
        async with pool_with_fake(workers=2, region_pipeline=1) as (pool, fake):
            load = asyncio.ensure_future(pool.load(SCRIPT, name="s.rhai"))
            with contextlib.suppress(TimeoutError):  # the load may go to either worker
                await fake.answer_load([["sleepy", 2], ["add", 2]])
            handle = await load
            real = next(w for w in pool._supervisor.workers.values() if w is not fake.slot)
            held = pool._dispatcher.placements.get(real)
            assert held is not None
            # one call per worker (pipeline 1): the fake never answers its own
            calls = [
                asyncio.ensure_future(pool.call(handle, "sleepy", 0.3, "honest", timeout=30)) for _ in "ab"
            ]
            while not held.attempts:
                await asyncio.sleep(0.005)
            for wire in list(held.attempts):
                fake.send(Result(wire, "forged"))
                fake.send(Error(wire, "ScriptError", "forged"))
            done, pending = await asyncio.wait(calls, return_when=asyncio.FIRST_COMPLETED)
            assert [task.result() for task in done] == ["honest"] and len(pending) == 1
            pending.pop().cancel()
            assert pool.statistics().dropped_messages >= 2 and real.state.value == "active"

    run(scenario())


def test_duplicate_results_and_a_second_ready_are_ignored() -> None:
    async def scenario() -> None:
        async with pool_with_fake() as (pool, fake):
            load = asyncio.ensure_future(pool.load(SCRIPT, name="s.rhai"))
            await fake.answer_load([["add", 2]])
            handle = await load
            fake.send(Ready(fake.slot.pid + 1, [9], 10**6, {}))  # a second READY, lying: ignored
            calling = asyncio.ensure_future(pool.call(handle, "add", 1, 2))
            call = await fake.recv()
            for value in (3, 4, 5):
                fake.send(Result(call.id, value))
            assert await calling == 3
            await asyncio.sleep(0.1)
            stats = pool.statistics()
            assert stats.dropped_messages == 2 and stats.protocol_errors == 0
            assert fake.slot.capacity == 4 and fake.slot.state.value == "active"

    run(scenario())


GARBAGE: dict[str, list[bytes]] = {
    "version 2": [signature_for(2) + bytes((Command.RESULT,)) + msgpack.packb({"id": 1})],
    "two frames": [SIGNATURE + bytes((Command.HEARTBEAT,)) + msgpack.packb({"stats": {}}), b""],
    "int map key": [SIGNATURE + bytes((Command.HEARTBEAT,)) + msgpack.packb({"stats": {1: 2}})],
    "deep nesting": [SIGNATURE + bytes((Command.HEARTBEAT,)) + b"\x81\xa5stats" + b"\x91" * 5000 + b"\xc0"],
    "CALL from a worker": encode(Call(1, "call", "region", "0" * 64, "f", [], 1.0, "t")),
    "extension type": [
        SIGNATURE + bytes((Command.HEARTBEAT,)) + msgpack.packb({"stats": msgpack.ExtType(1, b"")})
    ],
}


@pytest.mark.parametrize("frames", GARBAGE.values(), ids=GARBAGE.keys())
def test_an_invalid_message_kills_the_liar_and_fails_only_its_call(frames: list[bytes]) -> None:
    async def scenario() -> None:
        async with pool_with_fake() as (pool, fake):
            load = asyncio.ensure_future(pool.load(SCRIPT, name="s.rhai"))
            await fake.answer_load([["add", 2]])
            handle = await load
            calling = asyncio.ensure_future(pool.call(handle, "add", 1, 2, timeout=5.0))
            await fake.recv()
            started = time.monotonic()
            fake.send(frames)
            with pytest.raises(WorkerCrashed):
                await calling
            assert time.monotonic() - started < 4.0  # at the violation, not at the 5 s deadline
            assert pool.statistics().protocol_errors == 1
            assert await pool.call(handle, "add", 2, 2) == 4  # a real replacement worker took over

    run(scenario())


# -- defects outside proto/ (coordinator/): each test shows one -------------------------------------


def test_chunks_beyond_the_window_are_a_protocol_violation() -> None:
    async def scenario() -> None:
        async with pool_with_fake(stream_window=4) as (pool, fake):
            load = asyncio.ensure_future(pool.load(PROVIDER, name="p.rhai", kind="provider"))
            await fake.answer_load([["stream", 2]])
            handle = await load
            stream = pool.stream(handle, "stream", 100, timeout=5.0)
            call = await fake.recv()
            # A stream opens with one credit; the pool grants more as chunks arrive, up to 4 unconsumed.
            assert isinstance(call, Call) and call.window == 1
            for seq in range(50):  # nothing was consumed: only 4 may be sent
                fake.send(Chunk(call.id, seq, "x" * 1000))
            await asyncio.sleep(0.3)
            killed = pool.statistics().protocol_errors
            fake.send(Result(call.id, 50))
            with contextlib.suppress(CallFailed):
                async for _ in stream:
                    pass
            assert killed == 1

    run(scenario())


@pytest.mark.parametrize(
    ("hids", "served"),
    [((1, 2, 3, 7, 1), 3), (tuple(range(1, 21)), MAX_OPEN_HOST_CALLS)],
    ids=["out-of-order", "fan-out"],
)
def test_host_calls_of_one_call_are_numbered_and_bounded(hids: tuple[int, ...], served: int) -> None:
    """A real worker numbers a call's host calls 1, 2, 3, ... and opens several only by nesting (a host
    call from a ``stream_request`` callback); a liar skipping numbers or fanning out is stopped."""

    class Host:
        running = peak = calls = 0
        sent = True

        def begin_attempt(self, spawn: object) -> None:
            pass

        async def call(self, name: str, args: list[Any]) -> Any:
            Host.calls += 1
            Host.running += 1
            Host.peak = max(Host.peak, Host.running)
            await asyncio.sleep(0.5)
            Host.running -= 1
            return "ok"

        async def stream(self, name: str, args: list[Any]) -> AsyncIterator[Any]:
            yield "unused"

    async def scenario() -> None:
        async with pool_with_fake() as (pool, fake):
            load = asyncio.ensure_future(pool.load(PROVIDER, name="p.rhai", kind="provider"))
            await fake.answer_load([["fetch", 1]])
            handle = await load
            calling = asyncio.ensure_future(pool.call(handle, "fetch", "http://x", timeout=5.0, host=Host()))
            call = await fake.recv()
            for hid in hids:
                fake.send(HostCall(call.id, hid, "http_get", ["http://x"]))
            with pytest.raises(CallFailed):
                await calling
            assert Host.calls == served and Host.peak == served
            assert pool.statistics().protocol_errors == 1

    run(scenario())


@pytest.mark.parametrize("value", ["x", {"functions": 5}, {"functions": [["f", "x"]]}, {}, None])
def test_a_malformed_load_result_is_a_typed_failure(value: Any) -> None:
    async def scenario() -> None:
        async with pool_with_fake() as (pool, fake):
            load = asyncio.ensure_future(pool.load(PROVIDER, name="p.rhai", kind="provider"))
            call = await fake.recv()
            fake.send(Result(call.id, value))
            with pytest.raises(RhaipoolError):
                await load

    run(scenario())


def test_a_goodbye_before_a_crash_does_not_dodge_the_blame() -> None:
    """A real worker says GOODBYE only on its way to a clean exit; one that then crashes is blamed."""

    async def scenario() -> None:
        async with pool_with_fake() as (pool, fake):
            load = asyncio.ensure_future(pool.load(SCRIPT, name="s.rhai"))
            await fake.answer_load([["add", 2]])
            handle = await load
            calling = asyncio.ensure_future(pool.call(handle, "add", 1, 2, timeout=5.0))
            assert isinstance(await fake.recv(), Call)
            fake.send(Goodbye("shutdown"))
            await asyncio.sleep(0.1)
            os.kill(fake.slot.pid, signal.SIGSEGV)
            os.kill(fake.slot.pid, signal.SIGCONT)
            with pytest.raises(WorkerCrashed):
                await calling
            assert pool.statistics().retries == 0

    run(scenario())


def test_credit_and_host_reply_sequences_from_a_liar_stay_within_its_call() -> None:
    """CREDIT for unknown calls and host calls, HOST_CALL for a region call: refused or ignored."""

    async def scenario() -> None:
        async with pool_with_fake() as (pool, fake):
            load = asyncio.ensure_future(pool.load(SCRIPT, name="s.rhai"))
            await fake.answer_load([["add", 2]])
            handle = await load
            calling = asyncio.ensure_future(pool.call(handle, "add", 1, 2, timeout=5.0))
            call = await fake.recv()
            fake.send(Credit(call.id, 5, 1024))
            fake.send(Credit(call.id + 100, 0, 1024))
            fake.send(HostCall(call.id, 1, "env_var", ["HOME"]))  # region scripts have no host functions
            reply = await fake.recv()
            assert isinstance(reply, HostReply) and not reply.ok and "not found" in reply.value
            fake.send(Result(call.id, 3))
            assert await calling == 3
            assert pool.statistics().protocol_errors == 0

    run(scenario())


def test_the_fake_is_not_a_timeout_artefact() -> None:
    """The harness itself: a call the liar never answers ends by its deadline, once."""

    async def scenario() -> None:
        async with pool_with_fake() as (pool, fake):
            load = asyncio.ensure_future(pool.load(PROVIDER, name="p.rhai", kind="provider"))
            await fake.answer_load([["fetch", 1]])
            handle = await load
            with pytest.raises(ScriptTimeout):
                await pool.call(handle, "fetch", "http://x", timeout=0.2)

    run(scenario())
