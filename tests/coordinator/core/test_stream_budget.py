"""The pool's budget of buffered stream chunks, across streams: unread streams make their workers
wait (backpressure, not an error), a stream that is read is never starved, and reading resumes all."""

from __future__ import annotations

import asyncio
import gc

from pool_support import run

from coordinator._core.pool import Pool
from coordinator._core.streambudget import chunk_bytes

PROVIDER = """
fn stream(state, request, on_chunk) {
    let s = "x"; while s.len < request.size { s += s; }
    for i in 0..request.n { on_chunk.call(#{ i: i, text: s }); }
    request.n
}
"""

SIZE = 1 << 18  # 256 KiB of text per chunk
CHUNK = chunk_bytes({"i": 0, "text": "x" * SIZE})
BUDGET = 4 << 20
WINDOW = 16
STREAMS = 4
N = 40  # chunks per stream: 10 MiB each, 16 chunks (4 MiB) each within the window alone


async def settle(pool: Pool, at_least: int) -> int:
    """Wait until the pool buffers ``at_least`` bytes (chunks arriving), then a little more for any
    chunk beyond the budget to show up; returns the bytes buffered."""
    for _ in range(400):
        if pool.statistics().stream_bytes >= at_least:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    return pool.statistics().stream_bytes


def test_unread_streams_hold_no_more_than_the_budget_and_reading_resumes_them() -> None:
    async def scenario() -> None:
        async with Pool(workers=1, spares=0, stream_window=WINDOW, stream_buffer_bytes=BUDGET) as pool:
            handle = await pool.load(PROVIDER, name="p.rhai", kind="provider")
            streams = [
                pool.stream(handle, "stream", {}, {"n": N, "size": SIZE}, timeout=60) for _ in range(STREAMS)
            ]
            held = await settle(pool, BUDGET - CHUNK)
            stats = pool.statistics()
            # The windows alone would let 4 × 16 chunks (16 MiB) pile up; the budget stops them at 4 MiB,
            # give or take the one chunk a stream is always allowed (the wire's opening credit).
            assert BUDGET - CHUNK <= held <= stats.stream_bytes_peak <= BUDGET + STREAMS * CHUNK
            assert stats.inflight == STREAMS and stats.calls_failed == 0  # waiting, not failed
            for stream in streams:
                assert [c["i"] async for c in stream] == list(range(N))
                assert stream.value == N
            for _ in range(100):  # a stream's end reaches its reader before the pool settles its call
                if pool.statistics().inflight == 0:
                    break
                await asyncio.sleep(0.01)
            stats = pool.statistics()
            assert stats.stream_bytes == 0 and stats.calls_ok == STREAMS + 1  # and the load
            assert stats.stream_bytes_peak <= BUDGET + STREAMS * CHUNK

    run(scenario())


def test_a_stream_that_is_read_is_not_starved_by_unread_ones() -> None:
    async def scenario() -> None:
        async with Pool(workers=1, spares=0, stream_window=WINDOW, stream_buffer_bytes=BUDGET) as pool:
            handle = await pool.load(PROVIDER, name="p.rhai", kind="provider")
            unread = [pool.stream(handle, "stream", {}, {"n": N, "size": SIZE}, timeout=60) for _ in range(3)]
            await settle(pool, BUDGET - CHUNK)
            reader = pool.stream(handle, "stream", {}, {"n": N, "size": SIZE}, timeout=60)
            assert [c["i"] async for c in reader] == list(range(N))  # one chunk at a time, but it moves
            assert pool.statistics().stream_bytes_peak <= BUDGET + 4 * CHUNK
            for stream in unread:
                await stream.aclose()  # dropped unread: their bytes return to the budget
            assert pool.statistics().stream_bytes == 0

    run(scenario())


def test_a_stream_dropped_unread_returns_its_bytes() -> None:
    async def scenario() -> None:
        async with Pool(workers=1, spares=0, stream_window=WINDOW, stream_buffer_bytes=BUDGET) as pool:
            handle = await pool.load(PROVIDER, name="p.rhai", kind="provider")
            stream = pool.stream(handle, "stream", {}, {"n": 4, "size": SIZE}, timeout=60)
            await settle(pool, 4 * CHUNK)
            for _ in range(200):  # the call ends with its chunks still buffered
                if pool.statistics().inflight == 0:
                    break
                await asyncio.sleep(0.05)
            assert pool.statistics().stream_bytes == 4 * CHUNK
            del stream
            gc.collect()  # the stream and its call reference each other: a cycle
            assert pool.statistics().stream_bytes == 0

    run(scenario())
