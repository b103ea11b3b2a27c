"""An answered call is freed by reference counting as it ends, not left to the cyclic collector.

With many calls in flight, every call left as cyclic garbage (its attempt, future and result with
it) is work for the collector on the pool's one thread; none should be.
"""

from __future__ import annotations

import asyncio
import gc

from pool_support import SCRIPT, run

from coordinator._core.calls import Attempt, CallRecord
from coordinator._core.pool import Pool


def test_answered_calls_one_at_a_time_and_at_once_leave_no_call_behind() -> None:
    async def main() -> tuple[list[object], int]:
        async with Pool(workers=1, spares=0) as pool:
            h = await pool.load(SCRIPT, name="lifetime.rhai")
            assert await pool.call(h, "echo", 0) == 0
            gc.collect()
            gc.disable()
            try:
                for i in range(50):
                    assert await pool.call(h, "echo", i) == i
                answers = await asyncio.gather(*(pool.call(h, "add", i, 1) for i in range(50)))
                assert answers == [i + 1 for i in range(50)]
                assert (await pool.call_detailed(h, "echo", "x")).value == "x"
                left = [o for o in gc.get_objects() if type(o) in (CallRecord, Attempt)]
            finally:
                gc.enable()
            return left, pool.statistics().calls_ok

    left, ok = run(main())
    assert ok == 103
    assert left == []
