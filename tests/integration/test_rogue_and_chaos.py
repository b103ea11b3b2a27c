"""Hostile peers and random worker deaths: the coordinator stays healthy and every call ends exactly once."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time

import msgpack
import psutil
import zmq
from pool_support import SCRIPT, run

from coordinator._core.pool import Pool
from coordinator.errors import CallFailed, WorkerLost
from proto import SIGNATURE, Call, Command, Result, encode


def test_malformed_frames_from_a_rogue_dealer_are_rejected() -> None:
    async def scenario() -> None:
        async with Pool(workers=1, spares=0) as pool:
            handle = await pool.load(SCRIPT, name="s.rhai")
            context = zmq.Context()
            rogue = context.socket(zmq.DEALER)
            rogue.setsockopt(zmq.LINGER, 0)
            rogue.connect(pool.endpoint)
            garbage = [
                [b""],
                [b"junk", b"more", b"frames"],
                [SIGNATURE + bytes((Command.RESULT,)) + b"\xc1\xc1"],
                [SIGNATURE + b"\xff" + msgpack.packb({})],
                [b"RHP\x07" + bytes((Command.READY,)) + msgpack.packb({})],
                [SIGNATURE + bytes((Command.RESULT,)) + msgpack.packb({"id": 1})],
                encode(Result(1, "forged", 0.0, 0.0, 0, 0, [])),  # well-formed, but not from a worker
                encode(Call(1, "call", "region", "0" * 64, "f", [], 1.0, "t")),
                [SIGNATURE + bytes((Command.CHUNK,)) + b"\xdd\xff\xff\xff\xff"],
            ]
            for frames in garbage * 20:
                rogue.send_multipart(frames)
            for i in range(50):
                assert await pool.call(handle, "add", i, 1) == i + 1
            await asyncio.sleep(0.2)
            stats = pool.statistics()
            assert stats.dropped_messages >= len(garbage) * 20 - 20 and stats.calls_failed == 0
            assert stats.exits == 0  # the rogue could not hurt a real worker
            rogue.close()
            context.term()

    run(scenario())


def test_ten_thousand_calls_while_workers_are_killed_at_random() -> None:
    async def scenario() -> None:
        async with Pool(
            workers=2, spares=2, tenant_max_inflight=3
        ) as pool:  # per-tenant counts must stay exact
            handle = await pool.load(SCRIPT, name="s.rhai")
            limit = asyncio.Semaphore(32)
            answers: dict[int, list[object]] = {}
            kills = 0
            due, progress = 0, asyncio.Event()

            async def one(i: int) -> None:
                async with limit:
                    try:
                        outcome: object = await pool.call(
                            handle, "sleepy", 0.0005 if i % 10 == 0 else 0, i, timeout=10, tenant=f"t{i % 3}"
                        )
                    except CallFailed as exc:
                        outcome = exc
                answers.setdefault(i, []).append(outcome)
                if len(answers) >= due:
                    progress.set()

            async def killer() -> None:
                # Paced by the calls answered, not by the clock: as many kills on a slow machine as on a
                # fast one (a kill every 0.1 s outran the respawns there, and the test took a minute).
                nonlocal kills, due
                while True:
                    due = len(answers) + random.randint(100, 400)
                    progress.clear()
                    await progress.wait()
                    victims = [w for w in pool.workers() if w.state == "active"]
                    if victims:
                        os.kill(random.choice(victims).pid, signal.SIGKILL)
                        kills += 1

            chaos = asyncio.ensure_future(killer())
            await asyncio.gather(*(one(i) for i in range(10_000)))
            chaos.cancel()
            assert sorted(answers) == list(range(10_000))
            assert all(len(v) == 1 for v in answers.values()), "a call was answered twice"
            wrong = [(i, v[0]) for i, v in answers.items() if v[0] != i]
            assert all(isinstance(v, WorkerLost) for _, v in wrong), wrong[:5]
            assert len(wrong) < 100 and kills >= 15, (len(wrong), kills)
            stats = pool.statistics()
            assert stats.calls_ok + stats.calls_failed == 10_000 + 1  # + the load
            assert stats.inflight == 0 and stats.queued == 0
            assert (
                not pool._dispatcher.placements.per_tenant
            )  # every placed attempt was released exactly once

    run(scenario(), timeout=110)


COORDINATOR = """
import asyncio, json, sys
from coordinator._core.pool import Pool
async def main():
    async with Pool(workers=2, spares=1) as pool:
        h = await pool.load("fn f(s) { sleep(s); 1 }")
        busy = asyncio.ensure_future(pool.call(h, "f", 30, timeout=60))
        await asyncio.sleep(0.2)
        print(json.dumps([w.pid for w in pool.workers()]), flush=True)
        await asyncio.sleep(3600)
asyncio.run(main())
"""


def test_sigkill_of_the_coordinator_leaves_no_worker_after_one_second() -> None:
    coordinator = subprocess.Popen([sys.executable, "-c", COORDINATOR], stdout=subprocess.PIPE, text=True)
    try:
        assert coordinator.stdout is not None
        pids = json.loads(coordinator.stdout.readline())
        assert len(pids) == 3 and all(psutil.pid_exists(p) for p in pids)
        coordinator.kill()
        coordinator.wait()
        time.sleep(1.0)
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        assert not alive, f"workers alive 1 s after the coordinator's SIGKILL: {alive}"
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
        coordinator.wait()
        assert coordinator.stdout is not None
        coordinator.stdout.close()
