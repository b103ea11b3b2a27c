"""Cost curves: how CPU per call and memory grow with concurrency, ctx size and distinct scripts.

    rhaipool bench curves [--concurrency 1,16,256,1024] [--entries 10,100,1000,10000]
        [--scripts 1,10,100,1000,10000] [--plot DIR] [--json]

Each point is measured, in one run, on a pool started for its curve:

* **concurrency** — the reference provider (one brokered ``http_get`` to a stand-in answering after
  100 ms) with N callers in flight: CPU per inference of coordinator + workers, peak PSS.
* **ctx size** — a region render with N resident entries (``bench regions``' script): CPU per render,
  PSS after the renders.
* **distinct scripts** — N different region scripts loaded, each called in turn: CPU per call
  (compiling each in its worker included, as a host with many tenants pays it), PSS after.

``--plot DIR`` writes one PNG per curve (matplotlib: the optional ``bench`` extra). Runs are kept
short (a few seconds per point); the figures are for the shape of the curve, not a third digit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path

from coordinator.bench.measure import CpuClock, PeakSampler, load_average, pss_bytes

__all__ = ["main", "run_curves"]

Point = dict[str, float]


async def concurrency_curve(
    levels: Sequence[int], workers: int, address_space_gb: float | None
) -> list[Point]:
    """CPU per inference and peak PSS with N callers in flight (the reference provider)."""
    from coordinator.bench import providers

    proc, base_url = providers._start_server(0.1)
    args = argparse.Namespace(
        shape="reference",
        concurrency=list(levels),
        workers=workers,
        capacity=None,
        address_space_gb=address_space_gb,
    )
    points = []
    try:
        async with providers._pool_call(base_url, args) as one:
            for level in levels:
                sampler = PeakSampler(lambda: pss_bytes(exclude=(proc.pid,)))
                sampling = asyncio.create_task(sampler.run())
                try:
                    run, _, coordinator, worker_cpu, _ = await providers._measure(
                        one, level, max(50, 4 * level), base_url, (proc.pid,), sampler
                    )
                finally:
                    sampling.cancel()
                points.append(_point(level, run.calls, coordinator, worker_cpu, sampler.peak, run.throughput))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return points


def _point(
    x: int, calls: int, coordinator: float, workers: float, pss: int, throughput: float = 0.0
) -> Point:
    return {
        "x": x,
        "cpu_us_per_call": (coordinator + workers) / calls * 1e6,
        "coordinator_cpu_us_per_call": coordinator / calls * 1e6,
        "workers_cpu_us_per_call": workers / calls * 1e6,
        "pss_mb": pss / 2**20,
        "throughput": throughput,
        "load": load_average(),
    }


async def ctx_curve(sizes: Sequence[int], repeat: int) -> list[Point]:
    """CPU per render and PSS of a region with N resident entries."""
    from coordinator._core.pool import Pool
    from coordinator.bench.regions import BENCH_SCRIPT, _fill
    from coordinator.regions.hooks import RenderMeta
    from coordinator.regions.loading import RegionLoader

    points = []
    async with Pool(workers=1, spares=0) as pool:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "bench.rhai"
            path.write_text(BENCH_SCRIPT)
            loader = RegionLoader(pool, timeout=30.0)
            for size in sizes:
                region = await loader.region("bench", str(path), budget=size * 24)
                _fill(region, size)
                meta = RenderMeta("bench", 0, "m", size * 12, size * 24)
                await region.render(meta)  # ships the entries once; later renders find them resident
                clock = CpuClock()
                clock.start()
                for _ in range(repeat):
                    await region.render(meta)
                cpu = clock.stop()
                points.append(_point(size, repeat, cpu.coordinator, cpu.workers, pss_bytes()))
    return points


async def scripts_curve(counts: Sequence[int], calls: int) -> list[Point]:
    """CPU per call and PSS with N distinct scripts loaded and called in turn."""
    from coordinator._core.config import PoolConfig
    from coordinator._core.pool import Pool

    points = []
    for count in counts:
        config = PoolConfig(workers=1, spares=0, tenant_max_scripts=None, tenant_max_script_bytes=None)
        async with Pool(config) as pool:
            handles = [
                await pool.load(f'fn render(ctx) {{ "script {i}" }}', name=f"s{i}.rhai") for i in range(count)
            ]
            n = max(calls, count)
            clock = CpuClock()
            clock.start()
            for i in range(n):
                await pool.call(handles[i % count], "render", {})
            cpu = clock.stop()
            points.append(_point(count, n, cpu.coordinator, cpu.workers, pss_bytes()))
    return points


async def run_curves(args: argparse.Namespace) -> dict[str, list[Point]]:
    """Every curve, one after the other."""
    return {
        "concurrency": await concurrency_curve(args.concurrency, args.workers, args.address_space_gb),
        "ctx_entries": await ctx_curve(args.entries, args.repeat),
        "distinct_scripts": await scripts_curve(args.scripts, args.calls),
    }


_LABELS = {
    "concurrency": "calls in flight",
    "ctx_entries": "ctx entries (resident)",
    "distinct_scripts": "distinct scripts loaded",
}


def _print(curves: dict[str, list[Point]]) -> None:
    for name, points in curves.items():
        print(f"{_LABELS[name]}:")
        for p in points:
            extra = f"  {p['throughput']:7.0f} calls/s" if p["throughput"] else ""
            print(
                f"  {int(p['x']):>6}  CPU {p['cpu_us_per_call']:8.0f} µs/call (coordinator "
                f"{p['coordinator_cpu_us_per_call']:.0f} + workers {p['workers_cpu_us_per_call']:.0f})  "
                f"PSS {p['pss_mb']:6.0f} MB{extra}  load {p['load']:.1f}"
            )


def plot(curves: dict[str, list[Point]], directory: Path) -> list[Path]:
    """One PNG per curve: CPU per call (left axis) and memory (right axis) against x, log-scaled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, points in curves.items():
        xs = [p["x"] for p in points]
        figure, cpu_axis = plt.subplots(figsize=(6, 4))
        cpu_axis.plot(xs, [p["cpu_us_per_call"] for p in points], "o-", color="tab:blue")
        cpu_axis.set_xscale("log")
        cpu_axis.set_xlabel(_LABELS[name])
        cpu_axis.set_ylabel("CPU per call (µs)", color="tab:blue")
        memory_axis = cpu_axis.twinx()
        memory_axis.plot(xs, [p["pss_mb"] for p in points], "s--", color="tab:red")
        memory_axis.set_ylabel("PSS coordinator + workers (MB)", color="tab:red")
        cpu_axis.set_ylim(bottom=0)  # from zero: a flat curve must look flat
        memory_axis.set_ylim(bottom=0)
        cpu_axis.set_title(f"rhaipool: cost vs {_LABELS[name]}")
        figure.tight_layout()
        path = directory / f"{name}.png"
        figure.savefig(path, dpi=100)
        plt.close(figure)
        written.append(path)
    return written


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description="cost curves: CPU per call and memory")
    parser.add_argument("--concurrency", type=_ints, default=[1, 16, 256, 1024])
    parser.add_argument("--entries", type=_ints, default=[10, 100, 1000, 10000])
    parser.add_argument("--scripts", type=_ints, default=[1, 10, 100, 1000, 10000])
    parser.add_argument("--repeat", type=int, default=100, help="renders per ctx size")
    parser.add_argument("--calls", type=int, default=500, help="calls per script count (at least one each)")
    parser.add_argument("--workers", type=int, default=4, help="workers for the concurrency curve")
    parser.add_argument("--address-space-gb", type=float, default=None, help="each worker's RLIMIT_AS")
    parser.add_argument("--plot", type=Path, default=None, metavar="DIR", help="write PNG charts here")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    curves = asyncio.run(run_curves(args))
    if args.json:
        print(json.dumps(curves, indent=2))
    else:
        _print(curves)
    if args.plot is not None:
        for path in plot(curves, args.plot):
            print(f"wrote {path}")


if __name__ == "__main__":
    main()
