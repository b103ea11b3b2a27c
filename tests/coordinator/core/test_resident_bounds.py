"""The workers' resident region lists honour the bounds given in ``PoolConfig`` (passed on their
command line): lists beyond a lower bound are dropped by the worker and sent again whole, never lost."""

from __future__ import annotations

from typing import Any

import pytest
from pool_support import run

from coordinator._core.config import DEFAULT_RESIDENT_MAX_BYTES, DEFAULT_RESIDENT_MAX_LISTS
from coordinator._core.pool import Pool
from coordinator.regions.resident import ResidentEntries

SCRIPT = """
fn render(ctx) { let n = 0; for e in ctx.entries { n += e.v; } [ctx.entries.len(), n] }
"""
REGIONS = 5
STEPS = 12


@pytest.mark.parametrize(
    ("options", "bounded"),
    [
        ({}, False),
        ({"resident_max_lists": 2}, True),
        ({"resident_max_bytes": 200}, True),
    ],
    ids=["defaults", "two-lists", "200-bytes"],
)
def test_lists_beyond_the_bound_are_resent_whole_and_every_render_is_exact(
    options: dict[str, Any], bounded: bool
) -> None:
    async def scenario() -> tuple[int, int]:
        async with Pool(workers=1, spares=0, **options) as pool:
            handle = await pool.load(SCRIPT, name="r.rhai", kind="region")
            states = [ResidentEntries() for _ in range(REGIONS)]
            lists: list[list[dict[str, Any]]] = [[] for _ in range(REGIONS)]
            for step in range(STEPS):
                for state, entries in zip(states, lists, strict=True):  # round robin: LRU drops each
                    entries.append({"v": step, "text": "x" * 200})  # one entry outgrows 200 bytes
                    resident = state.prepare(list(entries))
                    got = await pool.call(handle, "render", {"entries": []}, resident=resident)
                    assert got == [len(entries), sum(e["v"] for e in entries)]
            return sum(s.resends for s in states), sum(s.sent_delta for s in states)

    resends, deltas = run(scenario())
    assert deltas == REGIONS * (STEPS - 1)  # the coordinator believed each list held after its first send
    if bounded:
        assert resends == deltas  # the worker had dropped every one of them: resent whole each time
    else:
        assert resends == 0


def test_the_defaults_are_the_workers_own() -> None:
    from worker.resident import DEFAULT_MAX_BYTES, DEFAULT_MAX_KEYS

    assert (DEFAULT_RESIDENT_MAX_LISTS, DEFAULT_RESIDENT_MAX_BYTES) == (DEFAULT_MAX_KEYS, DEFAULT_MAX_BYTES)
