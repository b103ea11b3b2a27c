"""Protocol abuse: a rogue peer on the pool's socket, and a worker whose code was replaced.

Same promises as the script corpus (``test_corpus``): the coordinator stays healthy, the attacking
call ends in a typed error (or its own, unchecked value), no quiet-tenant call fails, and the quiet
tenant's p99 stays within ``latency_bound`` of a baseline measured in the same test (see there).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import zmq
from pool_support import run

from coordinator._core.config import Deadlines, PoolConfig
from coordinator._core.pool import Pool
from coordinator.errors import CallFailed, ScriptTimeout, WorkerCrashed
from proto import (
    SIGNATURE,
    Call,
    Chunk,
    Error,
    Heartbeat,
    HostCall,
    Ready,
    Result,
    encode,
)

from .arena import QUIET, QUIET_SCRIPT, Arena, latency_bound, p99
from .rogue import TakenOver

ATTACKER = "attacker-protocol"
PROVIDER = "fn initialize(config) { #{} }\nfn go() { 1 }"


async def quiet_alongside(
    call_quiet: Callable[[int], Awaitable[float]], attack: Awaitable[Any]
) -> tuple[float, list[float], Any]:
    """Baseline p99, then quiet calls for as long as ``attack`` runs (at least 30); its outcome."""
    baseline = p99([await call_quiet(i) for i in range(40)])
    task = asyncio.ensure_future(attack)
    samples: list[float] = []
    while not task.done() or len(samples) < 30:
        samples.append(await call_quiet(len(samples)))
        await asyncio.sleep(0.002)
    try:
        outcome: Any = await task
    except Exception as exc:
        outcome = exc
    return baseline, samples, outcome


# -- a rogue peer on the socket ---------------------------------------------------------------------


def rogue_frames(live_pid: int) -> list[list[bytes]]:
    """What a same-uid process that found the socket might send: garbage and forged messages."""
    forged = [encode(Result(i, "forged")) for i in range(1, 400)]
    forged += [encode(Error(i, "ScriptError", "forged")) for i in range(1, 50)]  # type: ignore[arg-type]
    return [
        [b"garbage"],
        [SIGNATURE, b"\xff", b"not msgpack"],
        [b"RHP\x63", b"\x01"],
        [SIGNATURE] + [b"x" * 1000] * 50,
        encode(Ready(live_pid, [1], 64, {})),
        encode(Heartbeat({})),
        encode(HostCall(1, 1, "http_get", ["http://169.254.169.254/"])),
        encode(Chunk(1, 0, "forged")),
        *forged,
    ]


def test_a_rogue_peer_on_the_socket_changes_nothing(arena: Arena) -> None:
    """Unknown routing ids are dropped; a peer claiming a live worker's id is refused by the ROUTER."""

    async def scenario() -> None:
        pool = arena.pool
        live = next(w for w in pool._supervisor.workers.values() if w.state.value == "active")
        before = pool.statistics()
        context = zmq.Context()
        peers = []
        for identity in (secrets.token_bytes(8), live.identity):  # a stranger, then an impersonator
            peer = context.socket(zmq.DEALER)
            peer.setsockopt(zmq.LINGER, 0)
            peer.setsockopt(zmq.ROUTING_ID, identity)
            peer.connect(pool.endpoint)
            peers.append(peer)

        async def attack() -> None:
            for _ in range(5):
                for peer in peers:
                    for frames in rogue_frames(live.pid):
                        peer.send_multipart(frames)
                await asyncio.sleep(0.05)

        try:
            baseline, samples, outcome = await quiet_alongside(arena.quiet_call, attack())
        finally:
            for peer in peers:
                peer.close()
            context.term()
        assert outcome is None
        after = pool.statistics()
        assert after.dropped_messages > before.dropped_messages  # the stranger was heard and ignored
        assert after.exits == before.exits and after.protocol_errors == before.protocol_errors
        assert p99(samples) <= latency_bound(baseline)

    arena.run(scenario())


# -- a worker whose code was replaced ---------------------------------------------------------------


def forge_other_ids(worker: TakenOver, call: Call) -> None:
    """Answers for calls it does not hold (another tenant's, if it could guess), then its own."""
    for wire in range(1, call.id + 300):
        if wire != call.id:
            worker.send(Result(wire, "forged"))
    worker.send(Result(call.id, "its own answer"))


def chunk_beyond_window(worker: TakenOver, call: Call) -> None:
    worker.send(Chunk(call.id, 999, "flood"))


def host_call_out_of_order(worker: TakenOver, call: Call) -> None:
    worker.send(HostCall(call.id, 7, "http_get", ["http://169.254.169.254/"]))


def fan_out_host_calls(worker: TakenOver, call: Call) -> None:
    for hid in range(1, 50):
        worker.send(HostCall(call.id, hid, "http_get", ["http://127.0.0.1:9/"]))


def stall(worker: TakenOver, call: Call) -> None:
    """Never answer its own call (it holds it forever)."""


LIES: list[tuple[str, Callable[[TakenOver, Call], None], Any]] = [
    ("forged-results-for-other-ids", forge_other_ids, "its own answer"),
    ("chunk-beyond-the-window", chunk_beyond_window, WorkerCrashed),
    ("host-call-out-of-order", host_call_out_of_order, WorkerCrashed),
    ("host-call-fan-out", fan_out_host_calls, WorkerCrashed),
    ("stalls-its-own-call", stall, ScriptTimeout),
]


class _Silent:
    """Host handler for the attacker's call: nothing the liar asks for is ever performed."""

    sent = True

    def begin_attempt(self, spawn: object) -> None:
        pass

    async def call(self, name: str, args: list[Any]) -> Any:
        await asyncio.sleep(3600)

    async def stream(self, name: str, args: list[Any]) -> Any:  # pragma: no cover - never asked
        yield None


@contextlib.asynccontextmanager
async def pool_with_taken_over_worker(
    lie: Callable[[TakenOver, Call], None],
) -> AsyncIterator[tuple[Pool, TakenOver]]:
    """A started pool whose one active worker is ``TakenOver`` (its warm spare is real)."""
    deadlines = Deadlines(heartbeat=0.25, shutdown_grace=0.3, kill_grace=0.3)
    pool = Pool(PoolConfig(workers=1, spares=1, deadlines=deadlines))
    entering = asyncio.ensure_future(pool.__aenter__())
    while not hasattr(pool, "_supervisor") or not pool._supervisor.workers:
        await asyncio.sleep(0)
    taken = TakenOver(pool, ATTACKER, lie)
    server = asyncio.ensure_future(taken.serve())
    try:
        await entering
        while pool.statistics().workers.get("spare", 0) < 1:  # the liar's replacement is warm
            await asyncio.sleep(0.01)
        yield pool, taken
    finally:
        server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await server
        await pool.aclose()
        taken.close()


@pytest.mark.parametrize(("lie", "expected"), [(l[1], l[2]) for l in LIES], ids=[l[0] for l in LIES])
def test_a_taken_over_worker_fails_only_its_own_call(
    lie: Callable[[TakenOver, Call], None], expected: Any
) -> None:
    async def scenario() -> None:
        async with pool_with_taken_over_worker(lie) as (pool, taken):
            quiet = await pool.load(QUIET_SCRIPT, name="quiet.rhai", tenant=QUIET)
            attacker = await pool.load(PROVIDER, name="attacker.rhai", kind="provider", tenant=ATTACKER)

            async def call_quiet(x: int) -> float:
                started = time.perf_counter()
                assert await pool.call(quiet, "render", {"x": x}, tenant=QUIET, timeout=10.0) == 2 * x
                return time.perf_counter() - started

            attack = pool.call(attacker, "go", tenant=ATTACKER, timeout=1.0, host=_Silent())
            baseline, samples, outcome = await quiet_alongside(call_quiet, attack)
            assert taken.lied == 1, "the attacker's call did not reach the taken-over worker"
            if isinstance(expected, type):
                assert isinstance(outcome, expected), repr(outcome)
                assert isinstance(outcome, CallFailed) and outcome.tenant == ATTACKER
            else:
                assert outcome == expected
            for _ in range(500):  # a stopped liar is replaced by the warm spare
                if pool.statistics().workers.get("active") == 1 and not pool.statistics().inflight:
                    break
                await asyncio.sleep(0.01)
            await call_quiet(21)
            assert p99(samples) <= latency_bound(baseline)

    run(scenario())
