"""Benchmark: inferences through the pool vs a raw-socket client, plain aiohttp and plain httpx, same run.

The stand-in API runs in its own process and answers after ``--delay`` seconds. At each concurrency
(default 64, 256 and 1 024 callers) four clients drive it in turn: raw sockets (the server's
ceiling), plain aiohttp (the transport the pool's egress runs on), plain httpx (``baselines.py``:
how each is kept healthy) and the pool running a provider script. The default shape is the
reference's: a mock provider whose ``inference`` makes one ``http_get`` to the latency server;
``--shape groq`` runs the seed's groq script (one POST) instead.
Run with::

    rhaipool bench providers [--concurrency 64,256,1024] [--calls 2048] [--delay 0.1] [--workers 4]
        [--shape reference|groq] [--json]

Prints, per concurrency and side: throughput, p50/p99, CPU per call, new connections per 1 000
calls, the baselines' health; for the pool also its CPU split (coordinator, workers), the CPU it
adds beyond the HTTP request itself (against plain aiohttp, the pool's own transport; against plain
httpx too), peak PSS of coordinator + workers, and the memory each extra
in-flight call costs. The egress per-tenant request cap is lifted (a host measuring one tenant's
throughput sets it so); each worker runs the pool's default number of provider calls at once
(``--capacity``: 64, each a thread with its own stack under the worker's address-space limit), so
beyond workers x capacity callers the rest wait in the coordinator's queue.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

from coordinator._cli.demo import GROQ_SCRIPT
from coordinator._core.config import Limits
from coordinator.bench.baselines import (
    CONNECTIONS_PER_CLIENT,
    Call,
    HttpShape,
    PlainAiohttp,
    PlainHttpx,
    RawSockets,
    Run,
    drive,
    health,
    server_stats,
)
from coordinator.bench.measure import CpuClock, PeakSampler, load_average, pss_bytes
from coordinator.egress.budgets import EgressLimits
from coordinator.providers.config import parse_config
from coordinator.providers.session import open_runtime

__all__ = ["main", "run_benchmark"]

MOCK_SCRIPT = """
fn initialize(config) { #{ url: config.base_url } }
fn inference(state, request) { #{ content: http_get(state.url + "/models") } }
"""
"""The reference benchmark's provider: one brokered GET per inference, nothing else."""
MESSAGES = [{"role": "user", "content": "Reply with exactly: PONG"}]
_GROQ_BODY = {"model": "standin-small", "messages": MESSAGES, "max_tokens": 16, "temperature": 0.7}
SHAPES = {
    "reference": ("mock", MOCK_SCRIPT, HttpShape("GET", "/models")),
    "groq": ("groq", None, HttpShape("POST", "/chat/completions", json.dumps(_GROQ_BODY).encode())),
}


def _calls(args: argparse.Namespace, concurrency: int) -> int:
    return max(int(args.calls), 4 * concurrency)


async def _measure(
    one: Call,
    concurrency: int,
    calls: int,
    base_url: str,
    exclude: tuple[int, ...],
    sampler: PeakSampler | None = None,
) -> tuple[Run, int, float, float, int]:
    """A warm-up (4 calls per caller: the connections steady state needs open), then the run.

    Returns (run, new connections during the run, coordinator CPU s, workers CPU s, connections
    opened at this level, warm-up included: no more than the callers when connections are reused).
    The ``sampler``'s own CPU during the run is not counted as the coordinator's.
    """
    start = await server_stats(base_url)
    await drive(one, concurrency, 4 * concurrency)
    before = await server_stats(base_url)
    clock = CpuClock(exclude)
    sampling0 = sampler.cpu_seconds if sampler is not None else 0.0
    clock.start()
    run = await drive(one, concurrency, calls)
    cpu = clock.stop()
    sampling = (sampler.cpu_seconds if sampler is not None else 0.0) - sampling0
    after = await server_stats(base_url)
    new = after["connections"] - before["connections"] - 1  # the stats request's own connection
    opened = after["connections"] - start["connections"] - 2
    return run, new, cpu.coordinator - sampling, cpu.workers, opened


def _side(run: Run, new_connections: int, cpu: float, ceiling: float | None, opened: int) -> dict[str, Any]:
    return {
        "connections_opened_at_level": opened,
        "throughput": run.throughput,
        "p50_ms": run.p50_ms,
        "p99_ms": run.p99_ms,
        "calls": run.calls,
        "load": load_average(),
        **health(run, new_connections, cpu, ceiling),
    }


@asynccontextmanager
async def _pool_call(base_url: str, args: argparse.Namespace) -> AsyncIterator[Call]:
    name, source, _ = SHAPES[args.shape]
    with tempfile.TemporaryDirectory(prefix="rhaipool-bench-") as tmp:
        Path(tmp, f"{name}.rhai").write_text(source if source is not None else GROQ_SCRIPT.read_text())
        config = parse_config(
            {
                "providers_dir": tmp,
                "model_providers": {
                    name: {"api_key": "bench", "base_url": base_url, "egress_allow": ["127.0.0.1"]}
                },
            }
        )
        limits = EgressLimits(tenant_requests=None)
        options: dict[str, Any] = {} if args.capacity is None else {"provider_capacity": args.capacity}
        if args.address_space_gb is not None:
            options["limits"] = Limits(memory_bytes=int(args.address_space_gb * 2**30))
        async with open_runtime(
            config, workers=args.workers, spares=0, egress_limits=limits, **options
        ) as runtime:
            request = {"model": "standin-small", "messages": MESSAGES, "max_tokens": 16}

            async def one() -> None:
                await runtime.inference(name, request)

            await runtime.get(name)
            await asyncio.gather(*(one() for _ in range(args.workers * 4)))
            yield one


async def _pool(
    base_url: str, args: argparse.Namespace, server_pid: int
) -> tuple[dict[int, dict[str, Any]], float]:
    out: dict[int, dict[str, Any]] = {}
    async with _pool_call(base_url, args) as one:
        for concurrency in args.concurrency:
            sampler = PeakSampler(lambda: pss_bytes(exclude=(server_pid,)))
            sampling = asyncio.create_task(sampler.run())
            try:
                run, conns, coordinator, workers, opened = await _measure(
                    one, concurrency, _calls(args, concurrency), base_url, (server_pid,), sampler
                )
            finally:
                sampling.cancel()
            side = _side(run, conns, coordinator + workers, None, opened)
            side["coordinator_cpu_ms_per_call"] = coordinator / run.calls * 1000
            side["workers_cpu_ms_per_call"] = workers / run.calls * 1000
            side["peak_pss_mb"] = sampler.peak / 2**20
            out[concurrency] = side
        async with PlainAiohttp(base_url, SHAPES[args.shape][2], 1) as plain:
            added = await _interleaved(plain, one, args.sequential)
    return out, added


async def _interleaved(plain: Call, pooled: Call, n: int) -> float:
    """Median of (pool - plain) latency over ``n`` back-to-back pairs, one call at a time: robust to load."""
    deltas = []
    for _ in range(n):
        t0 = time.perf_counter()
        await plain()
        t1 = time.perf_counter()
        await pooled()
        deltas.append((time.perf_counter() - t1) - (t1 - t0))
    return statistics.median(deltas) * 1000 if deltas else float("nan")


async def _baseline(
    make: Any, base_url: str, args: argparse.Namespace, server_pid: int, ceiling: dict[int, float] | None
) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for concurrency in args.concurrency:
        client: AbstractAsyncContextManager[Call] = make(concurrency)
        async with client as one:
            run, conns, mine, _, opened = await _measure(
                one, concurrency, _calls(args, concurrency), base_url, (server_pid,)
            )
        out[concurrency] = _side(run, conns, mine, None if ceiling is None else ceiling[concurrency], opened)
    return out


def _start_server(delay: float) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "coordinator.bench.standin", "--delay", str(delay)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


async def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    """Pool first (so nothing else inflates its memory), then the raw ceiling, plain aiohttp, plain httpx."""
    shape = SHAPES[args.shape][2]
    proc, base_url = _start_server(args.delay)
    try:
        load_before = load_average()
        pool, added = await _pool(base_url, args, proc.pid)
        raw = await _baseline(lambda c: RawSockets(base_url, shape), base_url, args, proc.pid, None)
        ceiling = {c: raw[c]["throughput"] for c in args.concurrency}
        aio = await _baseline(lambda c: PlainAiohttp(base_url, shape, c), base_url, args, proc.pid, ceiling)
        plain = await _baseline(
            lambda c: PlainHttpx(base_url, shape, c, args.httpx_per_client),
            base_url,
            args,
            proc.pid,
            ceiling,
        )
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    levels = sorted(args.concurrency)
    for c in levels:
        pool[c]["of_ceiling"] = pool[c]["throughput"] / ceiling[c]
        pool[c]["of_aiohttp"] = pool[c]["throughput"] / aio[c]["throughput"]
        pool[c]["of_plain"] = pool[c]["throughput"] / plain[c]["throughput"]
        # no latency-bound ideal against a server that answers at once (``--delay 0``)
        pool[c]["of_ideal"] = pool[c]["throughput"] / (c / args.delay) if args.delay > 0 else None
        pool[c]["added_cpu_ms_per_call"] = pool[c]["cpu_ms_per_call"] - aio[c]["cpu_ms_per_call"]
        pool[c]["added_cpu_ms_per_call_vs_httpx"] = pool[c]["cpu_ms_per_call"] - plain[c]["cpu_ms_per_call"]
    growth = None
    if len(levels) > 1:
        low, high = levels[-2], levels[-1]
        growth = (pool[high]["peak_pss_mb"] - pool[low]["peak_pss_mb"]) * 1024 / (high - low)
    return {
        "shape": args.shape,
        "delay_ms": args.delay * 1000,
        "workers": args.workers,
        "load_before": load_before,
        "load_after": load_average(),
        "cpus": os.cpu_count(),
        "raw": raw,
        "aiohttp": aio,
        "plain": plain,
        "pool": pool,
        "kb_per_extra_in_flight_call": growth,
        "added_p50_ms": added,
    }


def _line(label: str, side: dict[str, Any]) -> str:
    verdict = "" if "healthy" not in side or side["healthy"] else "  UNHEALTHY: " + "; ".join(side["why_not"])
    ceiling = "" if side.get("of_ceiling") is None else f" {side['of_ceiling']:4.0%} of ceiling"
    return (
        f"  {label:<13} {side['throughput']:7.0f} calls/s{ceiling}  p50 {side['p50_ms']:6.1f} ms  "
        f"p99 {side['p99_ms']:7.1f} ms  CPU {side['cpu_ms_per_call']:5.2f} ms/call  "
        f"new conns {side['new_connections_per_1000']:5.1f}/1000 "
        f"(at this level {side['connections_opened_at_level']})  load {side['load']:.1f}{verdict}"
    )


def _print(r: dict[str, Any]) -> None:
    print(
        f"shape {r['shape']}, API delay {r['delay_ms']:.0f} ms, {r['workers']} workers, "
        f"{r['cpus']} CPUs, load {r['load_before']:.1f} -> {r['load_after']:.1f}"
    )
    for c in r["pool"]:
        a, p, q = r["aiohttp"][c], r["plain"][c], r["pool"][c]
        ideal = "no delay"
        if r["delay_ms"]:
            ideal = f"latency-bound ideal {int(c) * 1000 / r['delay_ms']:.0f} calls/s"
        print(f"{c} concurrent callers ({ideal})")
        print(_line("raw sockets", r["raw"][c]))
        print(_line("plain aiohttp", a))
        print(_line("plain httpx", p))
        print(_line("pool", q))
        by_aiohttp = f"{q['of_aiohttp']:.0%}" if a["healthy"] else "n/a (baseline unhealthy)"
        by_httpx = f"{q['of_plain']:.0%}" if p["healthy"] else "n/a (baseline unhealthy)"
        by_ideal = "n/a" if q["of_ideal"] is None else f"{q['of_ideal']:.0%}"
        print(
            f"    pool/aiohttp {by_aiohttp}  pool/httpx {by_httpx}  pool/ideal {by_ideal}  "
            f"CPU coordinator {q['coordinator_cpu_ms_per_call']:.2f} + workers "
            f"{q['workers_cpu_ms_per_call']:.2f} ms/call, added beyond the request itself "
            f"{q['added_cpu_ms_per_call']:.2f} ms (vs plain aiohttp, the pool's transport; "
            f"vs plain httpx {q['added_cpu_ms_per_call_vs_httpx']:.2f} ms)  "
            f"peak PSS {q['peak_pss_mb']:.0f} MB"
        )
    print(
        f"added p50 latency per call, one at a time: {r['added_p50_ms']:.2f} ms "
        "(median of pool - plain aiohttp pairs)"
    )
    if r["kb_per_extra_in_flight_call"] is not None:
        print(f"memory per extra in-flight call: {r['kb_per_extra_in_flight_call']:.0f} KB")


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(
        description="pool vs raw sockets, plain aiohttp and plain httpx against a slow local API"
    )
    parser.add_argument(
        "--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[64, 256, 1024]
    )
    parser.add_argument("--calls", type=int, default=2048, help="calls per level (at least 4 x concurrency)")
    parser.add_argument("--sequential", type=int, default=50, help="interleaved one-at-a-time pairs")
    parser.add_argument("--delay", type=float, default=0.1)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--capacity", type=int, default=None, help="provider calls at once per worker")
    parser.add_argument(
        "--address-space-gb", type=float, default=None, help="each worker's RLIMIT_AS (default: the pool's)"
    )
    parser.add_argument(
        "--httpx-per-client",
        type=int,
        default=CONNECTIONS_PER_CLIENT,
        help="plain httpx: connections per client",
    )
    parser.add_argument("--shape", choices=sorted(SHAPES), default="reference")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = asyncio.run(run_benchmark(args))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print(result)


if __name__ == "__main__":
    main()
