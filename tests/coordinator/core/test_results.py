"""A RESULT settles its call with every field it carries; one for a call the worker does not hold is
dropped (an int ``wall`` is still a valid RESULT), and one missing fields is a protocol violation."""

from __future__ import annotations

import asyncio

import msgpack
from pool_support import SCRIPT, run

from coordinator._core.pool import Pool
from proto import Result, encode
from proto.frames import HEADER_BYTES


def test_call_detailed_reads_every_field_of_a_result() -> None:
    async def main() -> None:
        async with Pool(workers=1, spares=0) as pool:
            h = await pool.load(SCRIPT, name="plain.rhai")
            detailed = await pool.call_detailed(h, "talk")
            assert detailed.value == 5
            assert detailed.output == ("hello", '"dbg"')  # debug() quotes its string
            assert type(detailed.wall) is float and type(detailed.cpu) is float
            assert detailed.operations > 0 and detailed.peak_rss > 0
            assert detailed.attempts == 1 and detailed.worker_id
            answers = await asyncio.gather(*(pool.call(h, "add", i, 1) for i in range(20)))
            assert answers == [i + 1 for i in range(20)]

    run(main())


def test_a_result_for_a_call_not_held_is_dropped_and_a_bad_one_is_a_violation() -> None:
    async def main() -> None:
        async with Pool(workers=1, spares=0) as pool:
            h = await pool.load(SCRIPT, name="plain.rhai")
            assert await pool.call(h, "echo", 1) == 1
            (identity,) = pool._supervisor.workers
            router = pool._router
            header = encode(Result(1, None))[0][:HEADER_BYTES]
            plain = encode(Result(987_654, "late", 0.5, 0.25, 1, 2, []))
            # valid too: an int wall reads as its float
            checked = [header + msgpack.packb({"id": 987_655, "value": 1, "wall": 1, "cpu": 0.0,
                                               "peak_rss": 1, "ops": 1, "output": []})]  # fmt: skip
            router.deliver(identity, plain)
            router.deliver(identity, checked)
            stats = pool.statistics()
            assert (stats.dropped_messages, stats.protocol_errors) == (2, 0)
            assert await pool.call(h, "echo", 2) == 2  # the worker was not blamed

            router.deliver(identity, [header + msgpack.packb({"id": 1, "value": 1})])  # fields missing
            assert pool.statistics().protocol_errors == 1

    run(main())
