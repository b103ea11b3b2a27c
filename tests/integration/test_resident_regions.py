"""Resident region entries survive worker deaths: SIGKILL mid-sequence, the next render is still exact.

Two regions of one script in one real pool: one resident, one shipping every
entry every call.  Workers holding the resident list are killed while idle and
while rendering; every report must equal the ship-all region's.
"""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
from pathlib import Path
from typing import Any

from pool_support import run

from coordinator._core.config import Deadlines, Limits, PoolConfig
from coordinator._core.pool import Pool
from coordinator.regions import Region, RegionLoader
from coordinator.regions.loading import PoolHookRunner
from coordinator.regions.resident import ResidentEntries

CONFIG = PoolConfig(
    workers=2,
    spares=1,
    limits=Limits(memory_bytes=768 << 20, watchdog_rss_bytes=4 << 30),
    deadlines=Deadlines(kill_grace=0.5),
)
SCRIPT = r"""
fn render(ctx) {
    let out = `${ctx.region.entry_count}` + "\n";
    for e in ctx.entries { out += `${e.content}/${e.tokens}/${e.timestamp}` + "\n"; }
    out
}
fn on_overflow(ctx) { [0, 2] }
"""


def resident_of(region: Region) -> ResidentEntries:
    runner = region.runner
    assert isinstance(runner, PoolHookRunner) and runner.resident is not None
    return runner.resident


async def twins(pool: Pool, path: Path) -> list[Region]:
    regions = []
    for resident in (True, False):
        loader = RegionLoader(pool, timeout=10.0, resident=resident)
        regions.append(await loader.region("r", str(path), budget=3000, clock=lambda: 1_700_000_000))
    return regions


async def both(regions: list[Region], op: str, *args: Any) -> Any:
    reports = [await getattr(region, op)(*args) for region in regions]
    assert reports[0] == reports[1], (op, reports)
    return reports[0]


async def render_matches(regions: list[Region]) -> None:
    report = await both(regions, "render")
    assert not report.fallback and report.output.system[0].text.count("\n") == len(regions[0].entries) + 1


def holder_pid(pool: Pool, state: ResidentEntries) -> int:
    holder = next(reversed(state.holders))
    return next(w.pid for w in pool.workers() if w.id == holder)


def test_sigkill_of_the_holding_worker_idle_and_mid_render() -> None:
    async def go() -> tuple[int, int, int]:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "r.rhai"
            path.write_text(SCRIPT)
            async with Pool(CONFIG) as pool:
                regions = await twins(pool, path)
                state = resident_of(regions[0])
                for i in range(400):
                    await both(regions, "write", f"entry {i}", 5 + i % 4)
                await render_matches(regions)
                retries = pool.statistics().retries
                for round_ in range(6):
                    await both(regions, "write", f"round {round_}", 3000 - regions[0].current_tokens + 2)
                    await both(regions, "write", f"after {round_}", 1)
                    if round_ % 2 == 0:  # idle: the list dies with the worker between two renders
                        os.kill(holder_pid(pool, state), signal.SIGKILL)
                        await asyncio.sleep(0.1)
                        await render_matches(regions)
                    else:  # mid-render: the CALL is sent; the re-run goes to a worker without the list
                        task = asyncio.ensure_future(regions[0].render())
                        await asyncio.sleep(0)
                        os.kill(holder_pid(pool, state), signal.SIGKILL)
                        killed = await task
                        assert killed == await regions[1].render()
                    await render_matches(regions)
                return state.sent_whole, pool.statistics().retries - retries, state.sent_delta

    whole, reruns, deltas = run(go(), timeout=120)
    assert whole >= 4 and deltas >= 6  # each death cost one whole resend, the rest were deltas
    assert reruns >= 1  # at least one kill really landed mid-render
