"""A plainly valid RESULT reaches the dispatcher as a ``PlainResult`` (no frozen ``Result`` built): it
must settle calls, and be dropped or refused, exactly as the ``Result`` that ``decode`` builds."""

from __future__ import annotations

import asyncio

import msgpack
from pool_support import SCRIPT, run

from coordinator._core.pool import Pool
from proto import Result, encode
from proto.frames import HEADER_BYTES, decode_plain_result, encode_result


def test_call_detailed_reads_every_field_of_a_plain_result() -> None:
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


def test_a_result_for_a_call_not_held_is_dropped_on_both_paths_and_a_bad_one_is_a_violation() -> None:
    async def main() -> None:
        async with Pool(workers=1, spares=0) as pool:
            h = await pool.load(SCRIPT, name="plain.rhai")
            assert await pool.call(h, "echo", 1) == 1
            (identity,) = pool._supervisor.workers
            router = pool._router
            header = encode(Result(1, None))[0][:HEADER_BYTES]
            plain = encode_result(987_654, "late", 0.5, 0.25, 1, 2, [])
            # valid, but not plain (an int wall): ``decode`` reads it into a ``Result``
            checked = [header + msgpack.packb({"id": 987_655, "value": 1, "wall": 1, "cpu": 0.0,
                                               "peak_rss": 1, "ops": 1, "output": []})]  # fmt: skip
            assert decode_plain_result(plain) is not None and decode_plain_result(checked) is None
            router.deliver(identity, plain)
            router.deliver(identity, checked)
            stats = pool.statistics()
            assert (stats.dropped_messages, stats.protocol_errors) == (2, 0)
            assert await pool.call(h, "echo", 2) == 2  # the worker was not blamed

            router.deliver(identity, [header + msgpack.packb({"id": 1, "value": 1})])  # fields missing
            assert pool.statistics().protocol_errors == 1

    run(main())
