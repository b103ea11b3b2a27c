"""Benchmark: a region render through the pool vs the same render on an in-process engine.

Both sides run the same ``Region.render`` (ctx building, interpretation,
fallback checks); only the hook runner differs.  Run with::

    python -m coordinator.bench.regions [--entries 10,100,1000,10000] [--repeat 50] [--json]

Prints p50/p99 per size and the pool/in-process ratio, with residency on (the default) and
off ("ship-all": every entry shipped on every render), all measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import rhai

from contract.budgets import BUDGETS
from coordinator.regions.hooks import HookOutcome, RenderMeta, ScriptInfo
from coordinator.regions.loading import RegionLoader
from coordinator.regions.model import Entry
from coordinator.regions.runtime import Region
from proto.vocabulary import Kind

__all__ = ["BENCH_SCRIPT", "InProcessRunner", "Measurement", "main", "run_benchmark"]

BENCH_SCRIPT = r"""
fn render(ctx) {
    let total = 0;
    for e in ctx.entries { total += e.tokens; }
    let n = ctx.region.entry_count;
    let start = if n > 20 { n - 20 } else { 0 };
    let out = `[${ctx.region.name}] ${n} entries, ${total} tokens\n`;
    for i in start..n { out += ctx.entries[i].content + "\n"; }
    out
}
"""
"""A realistic render: one pass over every entry, then the newest twenty as text.

``ctx.region.entry_count``, not ``ctx.entries.len()``: a method call on a
10 000-map array trips the docs/scripts/errors.md#limits map-size limit, on both sides alike.
"""


class InProcessRunner:
    """The baseline: the same engine limits, called directly in this process.

    The entries reach it as Python values, converted on every call: what an
    in-process host does (the pool's worker keeps them in Rhai form instead).
    """

    def __init__(self, source: str, name: str = "bench.rhai") -> None:
        engine = rhai.Engine(**BUDGETS[Kind.REGION], json_functions=False, check_argument_sizes=False)
        self._script = engine.compile(source, name=name)  # configured as worker/engine.py's region engine
        names = {n for n, _ in self._script.functions}
        sha = hashlib.sha256(source.encode()).hexdigest()
        self.script = ScriptInfo(name, sha, "on_write" in names, "on_overflow" in names)

    async def run_hook(self, hook: str, ctx: dict[str, Any]) -> HookOutcome:
        """Call the hook on this thread (what an in-process host does)."""
        try:
            return HookOutcome.success(self._script.call(hook, ctx, timeout=5.0))
        except rhai.RhaiError as exc:
            return HookOutcome.failure(f"{type(exc).__name__}: {exc}")


@dataclass(frozen=True, slots=True)
class Measurement:
    """Latency of one render, per side, at one region size (seconds)."""

    entries: int
    pool_p50: float
    pool_p99: float
    local_p50: float
    local_p99: float
    shipping: float = 0.0
    """p50 of a do-nothing hook given these entries minus one given none: the cost of moving them."""
    ship_all_p50: float = 0.0
    """Pool p50 with residency off: every entry shipped on every render (the previous behaviour)."""
    failure: str | None = None
    """Why this size could not be measured (the render fell back on either side)."""

    @property
    def ratio(self) -> float:
        """pool p50 / in-process p50."""
        return self.pool_p50 / self.local_p50 if self.local_p50 else float("inf")

    @property
    def ship_all_ratio(self) -> float:
        """ship-all pool p50 / in-process p50."""
        return self.ship_all_p50 / self.local_p50 if self.local_p50 else float("inf")


def _fill(region: Region, count: int) -> None:
    region.restore(
        Entry(f"entry {i}: observed something worth keeping", 12, timestamp=i) for i in range(count)
    )


async def _timed(fn: Callable[[], Awaitable[Any]], repeat: int) -> list[float]:
    await fn()  # warm: AST cached in the worker, caches hot
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        await fn()
        samples.append(time.perf_counter() - start)
    return samples


def _p(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run_benchmark(
    pool: Any, sizes: Sequence[int], repeat: int, source: str = BENCH_SCRIPT
) -> list[Measurement]:
    """Measure both sides at every size; the pool side goes through ``RegionLoader``."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.rhai"
        path.write_text(source)
        loader = RegionLoader(pool, timeout=10.0)
        ship_all = RegionLoader(pool, timeout=10.0, resident=False)
        results = []
        for size in sizes:
            meta = RenderMeta("bench", 0, "m", size * 12, size * 24)
            pooled = await loader.region("bench", str(path), budget=size * 24)
            shipped = await ship_all.region("bench", str(path), budget=size * 24)
            local = Region("bench", InProcessRunner(source), budget=size * 24)
            for region in (pooled, shipped, local):
                _fill(region, size)
            probes = [await r.render(meta) for r in (pooled, shipped, local)]
            if any(p.fallback for p in probes) or len({p.output for p in probes}) != 1:
                cause = "; ".join(w.cause for p in probes for w in p.warnings) or "outputs differ"
                results.append(Measurement(size, 0.0, 0.0, 0.0, 0.0, failure=cause))
                continue
            remote = await _timed(lambda r=pooled, m=meta: r.render(m), repeat)  # type: ignore[misc]
            whole = await _timed(lambda r=shipped, m=meta: r.render(m), repeat)  # type: ignore[misc]
            inproc = await _timed(lambda r=local, m=meta: r.render(m), repeat)  # type: ignore[misc]
            shipping = await _shipping_cost(pool, pooled, repeat)
            results.append(
                Measurement(
                    size,
                    _p(remote, 0.5),
                    _p(remote, 0.99),
                    _p(inproc, 0.5),
                    _p(inproc, 0.99),
                    shipping,
                    _p(whole, 0.5),
                )
            )
    return results


async def _shipping_cost(pool: Any, region: Region, repeat: int) -> float:
    """What carrying the entries to the worker costs, on a hook that does nothing."""
    handle = await pool.load('fn render(ctx) { "" }', name="noop.rhai", kind="region")
    full = {"entries": [entry.to_ctx() for entry in region.entries]}
    with_entries = await _timed(lambda: pool.call(handle, "render", full, timeout=10.0), repeat)
    without = await _timed(lambda: pool.call(handle, "render", {"entries": []}, timeout=10.0), repeat)
    return max(0.0, _p(with_entries, 0.5) - _p(without, 0.5))


def _report(results: Sequence[Measurement]) -> str:
    head = (
        "entries",
        "pool p50",
        "pool p99",
        "local p50",
        "local p99",
        "ratio",
        "shipping",
        "ship-all",
        "ratio",
    )
    lines = ["{:>8} {:>10} {:>10} {:>10} {:>10} {:>6} {:>10} {:>10} {:>6}".format(*head)]
    lines.extend(
        f"{m.entries:>8} {m.pool_p50 * 1e3:>8.2f}ms {m.pool_p99 * 1e3:>8.2f}ms {m.local_p50 * 1e3:>8.2f}ms "
        f"{m.local_p99 * 1e3:>8.2f}ms {m.ratio:>5.2f}x {m.shipping * 1e3:>8.2f}ms "
        f"{m.ship_all_p50 * 1e3:>8.2f}ms {m.ship_all_ratio:>5.2f}x"
        if m.failure is None
        else f"{m.entries:>8}  not measured: {m.failure}"
        for m in results
    )
    measured = [m for m in results if m.failure is None]
    if len(measured) >= 2:
        a, b = measured[0], measured[-1]
        growth = (b.pool_p50 - a.pool_p50) / max(1, b.entries - a.entries)
        median = statistics.median(m.ratio for m in measured)
        lines.append(f"pool cost grows ~{growth * 1e6:.2f} µs per entry; median of ratios {median:.2f}x")
    tails = ", ".join(f"{m.entries}: {m.local_p99 / m.local_p50:.1f}x" for m in measured if m.local_p50)
    lines.append(
        f"baseline health: in-process p99/p50 {tails} (a ratio above 3x: the load, not the code, sets "
        f"the figures); load {os.getloadavg()[0]:.1f}"
    )
    return "\n".join(lines)


async def _main(sizes: Sequence[int], repeat: int, as_json: bool) -> None:
    from coordinator._core.pool import Pool

    async with Pool() as pool:
        results = await run_benchmark(pool, sizes, repeat)
    if as_json:
        rows = [
            {
                "entries": m.entries,
                "pool_p50": m.pool_p50,
                "pool_p99": m.pool_p99,
                "local_p50": m.local_p50,
                "local_p99": m.local_p99,
                "ratio": m.ratio if m.failure is None else None,
                "shipping": m.shipping,
                "ship_all_p50": m.ship_all_p50,
                "failure": m.failure,
            }
            for m in results
        ]
        print(json.dumps(rows, indent=2))
    else:
        print(_report(results))


def main(argv: Sequence[str] | None = None) -> None:
    """Command-line entry (``python -m coordinator.bench.regions``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", default="10,100,1000,10000", help="comma-separated region sizes")
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.entries.split(",") if s.strip()]
    asyncio.run(_main(sizes, args.repeat, args.json))


if __name__ == "__main__":
    main()
