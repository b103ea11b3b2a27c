"""``rhaipool bench tenants``: what one tenant can do to another, and to the coordinator's memory
(issue 10's figures; a benchmark, not a test).  Every figure is printed beside its baseline, measured
in the same run on the same machine:

- a quiet tenant's p50/p99 alone, beside a flooding tenant, and beside one that crashes workers in a
  loop (a memory bomb, in a new variant of its script each time, to evade the breaker);
- the coordinator's RSS (this process: the stand-in server runs in a child) under a flood of distinct
  scripts, concurrent big responses and unread streams, against its RSS idle;
- a ramp of tenants, each with its own scripts, calling at an agent's pace, doubled until a quota or
  limit refuses a call or the p99 passes 3× the first level's: where, and why.

The module is long because each scenario is short but needs its own set-up; they share only the
pool configuration and the RSS sampling.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import psutil

from coordinator._core.config import PoolConfig
from coordinator._core.handles import ScriptHandle
from coordinator._core.pool import Pool
from coordinator.bench.measure import PeakSampler, load_average, percentile_ms
from coordinator.errors import RhaipoolError

__all__ = ["main", "run_benchmark"]

NAPPER = "fn initialize(config) { #{} }\nfn inference(state, request) { #{} }\nfn nap(s, v) { sleep(s); v }\n"
KILLER = """
fn render(ctx) { 0 }
fn bomb() {
    let m = #{}; let s = "y"; while s.len < 500000 { s += s; }
    let i = 0; loop { m[s + i.to_string()] = i; i += 1; }
}
"""
"""Outgrows the worker's address space: the worker dies and the death is blamed on the call."""
STREAMER = """
fn stream(state, request, on_chunk) {
    let s = "x"; while s.len < request.size { s += s; }
    for i in 0..request.n { on_chunk.call(#{ i: i, text: s }); }
    request.n
}
"""
BIG_PROVIDER = """
fn initialize(config) { config }
fn inference(state, request) { let body = http_get(`${state.base_url}/big`); #{ content: `${body.len()}` } }
"""
SERVER = """
import sys
from coordinator.bench.standin import Reply, StandinServer
body = b"x" * int(sys.argv[1])
server = StandinServer()
server.route("GET", "/v1/big", lambda request: Reply(200, {"Content-Type": "text/plain"}, body))
server.start()
print(server.base_url, flush=True)
sys.stdin.read()
"""

CONFIG = PoolConfig(workers=2, spares=1)
"""The defaults otherwise: with a smaller address space (RLIMIT_AS), 256 concurrent provider calls
cannot all map their stacks and a quiet tenant's call can fail with ``WorkerCrashed`` (MemoryError)."""
MB = 1 << 20


def _rss() -> int:
    return int(psutil.Process().memory_info().rss)


@contextlib.asynccontextmanager
async def _rss_peak() -> AsyncIterator[PeakSampler]:
    """Sample this process's RSS every 50 ms while the block runs."""
    sampler = PeakSampler(_rss, interval=0.05)
    task = asyncio.ensure_future(sampler.run())
    try:
        yield sampler
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        sampler.peak = max(sampler.peak, _rss())


def _spread(samples: list[float]) -> dict[str, float]:
    return {"p50_ms": percentile_ms(samples, 0.5), "p99_ms": percentile_ms(samples, 0.99), "n": len(samples)}


# -- a quiet tenant beside others ----------------------------------------------------------------


async def _quiet(pool: Pool, handle: ScriptHandle, seconds: float) -> list[float]:
    """A quiet tenant's calls for ``seconds``, one at a time, 5 ms apart (long enough to see a crash loop)."""
    samples: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.perf_counter()
        await pool.call(handle, "nap", 0, len(samples), tenant="quiet", timeout=30)
        samples.append(time.perf_counter() - started)
        await asyncio.sleep(0.005)
    return samples


async def _flood(pool: Pool, stop: asyncio.Event, errors: Counter[str]) -> None:
    """A tenant keeping 256 provider calls of 20 ms in flight until ``stop``."""
    handle = await pool.load(NAPPER, name="flood.rhai", kind="provider", tenant="flood")
    slots = asyncio.Semaphore(256)

    async def one(i: int) -> None:
        try:
            await pool.call(handle, "nap", 0.02, i, tenant="flood", timeout=60)
        except RhaipoolError as exc:
            errors[type(exc).__name__] += 1
        finally:
            slots.release()

    tasks, i = set(), 0
    while not stop.is_set():
        await slots.acquire()
        task = asyncio.ensure_future(one(i := i + 1))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)


async def _crasher(pool: Pool, stop: asyncio.Event, errors: Counter[str]) -> None:
    """A tenant calling a memory bomb in a loop, a new variant of the script each time."""
    variant = 0
    while not stop.is_set():
        variant += 1
        try:
            handle = await pool.load(
                KILLER + f"// variant {variant}", name=f"k{variant}.rhai", tenant="attacker"
            )
            await pool.call(handle, "bomb", tenant="attacker", timeout=30)
        except RhaipoolError as exc:
            errors[type(exc).__name__] += 1
        await asyncio.sleep(0)  # a refusal is immediate: never hog the loop


async def _beside(
    background: Callable[[Pool, asyncio.Event, Counter[str]], Awaitable[None]] | None, seconds: float
) -> dict[str, Any]:
    async with Pool(CONFIG) as pool:
        quiet = await pool.load(NAPPER, name="quiet.rhai", kind="provider", tenant="quiet")
        await _quiet(pool, quiet, 0.2)  # warm
        stop, errors = asyncio.Event(), Counter[str]()
        other = asyncio.ensure_future(background(pool, stop, errors)) if background else None
        exits0 = pool.statistics().exits
        if other is not None:
            await asyncio.sleep(1.0)  # let it get going
        samples = await _quiet(pool, quiet, seconds)
        stop.set()
        if other is not None:
            await other
        figures = _spread(samples) | {
            "worker_exits": pool.statistics().exits - exits0,
            "other_errors": dict(errors),
        }
    return figures


# -- coordinator memory ----------------------------------------------------------------------------


async def _scripts_flood(count: int, size: int) -> dict[str, Any]:
    """``count`` distinct scripts of ``size`` bytes, 100 per tenant (below each tenant's quotas)."""
    async with Pool(CONFIG) as pool:
        gc.collect()
        idle = _rss()
        padding = "// " + "p" * (size - 40) + "\n"
        slots, failed = asyncio.Semaphore(16), Counter[str]()

        async def load(i: int) -> None:
            async with slots:
                try:
                    await pool.load(
                        f"fn f(x) {{ x + {i} }}\n{padding}", name=f"s{i}.rhai", tenant=f"t{i // 100}"
                    )
                except RhaipoolError as exc:
                    failed[type(exc).__name__] += 1

        async with _rss_peak() as peak:
            await asyncio.gather(*(load(i) for i in range(count)))
        gc.collect()
        return {"idle_mb": idle / MB, "peak_mb": peak.peak / MB, "after_mb": _rss() / MB,
                "source_mb": count * size / MB, "failed": dict(failed)}  # fmt: skip


async def _big_responses(count: int, size: int) -> dict[str, Any]:
    """``count`` concurrent inferences, each fetching ``size`` bytes from a stand-in server (a child)."""
    from coordinator.egress import Egress
    from coordinator.providers.config import parse_config
    from coordinator.providers.executor import PoolExecutor
    from coordinator.providers.runtime import ProviderRuntime

    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(size)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert server.stdout is not None
    base_url = server.stdout.readline().strip()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            Path(tmp, "big.rhai").write_text(BIG_PROVIDER)
            provider = {
                "script": "big.rhai",
                "base_url": base_url,
                "egress_allow": ["127.0.0.1"],
                "max_response_bytes": size + MB,
            }
            config = parse_config(
                {"providers_dir": tmp, "tenants": True, "model_providers": {"big": provider}}
            )
            async with Pool(CONFIG) as pool, Egress() as egress:
                runtime = ProviderRuntime(PoolExecutor(pool), egress, config)
                request = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
                with contextlib.suppress(RhaipoolError):  # loaded, warm (a provider's strings stop at 2 MB:
                    await runtime.inference("big", request, tenant="t0")  # the script refuses a bigger body)
                gc.collect()
                idle, outcomes = _rss(), Counter[str]()

                async def one(i: int) -> None:
                    try:
                        reply = await runtime.inference("big", request, tenant=f"t{i}")
                        outcomes["ok" if str(size) in str(reply) else "short"] += 1
                    except RhaipoolError as exc:
                        outcomes[type(exc).__name__] += 1

                async with _rss_peak() as peak:
                    await asyncio.gather(*(one(i) for i in range(count)))
                gc.collect()
                return {"idle_mb": idle / MB, "peak_mb": peak.peak / MB, "after_mb": _rss() / MB,
                        "requested_mb": count * size / MB, "outcomes": dict(outcomes)}  # fmt: skip
    finally:
        server.kill()
        server.wait()


async def _unread_streams(count: int, chunk: int, chunks: int) -> dict[str, Any]:
    """``count`` streams of ``chunks`` chunks of ``chunk`` bytes that nobody reads for 3 s."""
    config = PoolConfig(workers=2, spares=1, limits=CONFIG.limits, provider_capacity=max(64, count))
    async with Pool(config) as pool:
        handle = await pool.load(STREAMER, name="streamer.rhai", kind="provider", tenant="t")
        gc.collect()
        idle = _rss()
        async with _rss_peak() as peak:
            streams = [
                pool.stream(handle, "stream", {}, {"n": chunks, "size": chunk}, tenant=f"t{i}", timeout=120)
                for i in range(count)
            ]
            await asyncio.sleep(3.0)
            held = pool.statistics().stream_bytes
            read = 0
            for stream in streams:
                read += sum([1 async for _ in stream])
        stats = pool.statistics()
        return {"idle_mb": idle / MB, "peak_mb": peak.peak / MB, "unread_mb": count * chunks * chunk / MB,
                "held_unread_mb": held / MB, "held_peak_mb": stats.stream_bytes_peak / MB,
                "budget_mb": config.stream_buffer_bytes / MB, "chunks_read": read}  # fmt: skip


# -- how many tenants at once ----------------------------------------------------------------------


async def _level(
    pool: Pool, handles: list[list[ScriptHandle]], seconds: float, pace: float
) -> dict[str, Any]:
    """Every tenant calls its scripts in turn, one call every ``pace`` seconds, for ``seconds``."""
    samples: list[float] = []
    refused: Counter[str] = Counter()

    async def tenant(k: int, mine: list[ScriptHandle]) -> None:
        await asyncio.sleep(pace * k / len(handles))  # spread the tenants over the period
        end, i = time.monotonic() + seconds, 0
        while time.monotonic() < end:
            started = time.perf_counter()
            try:
                await pool.call(mine[i % len(mine)], "nap", 0, i, tenant=f"r{k}", timeout=30)
                samples.append(time.perf_counter() - started)
            except RhaipoolError as exc:
                refused[type(exc).__name__] += 1
            i += 1
            await asyncio.sleep(max(0.0, pace - (time.perf_counter() - started)))

    await asyncio.gather(*(tenant(k, mine) for k, mine in enumerate(handles)))
    return _spread(samples) | {"refused": dict(refused)}


async def _ramp(scripts: int, pace: float, seconds: float, most: int) -> dict[str, Any]:
    levels: list[dict[str, Any]] = []
    stop = ""
    async with Pool(CONFIG) as pool:
        handles: list[list[ScriptHandle]] = []
        tenants = 8
        while tenants <= most:
            try:
                for k in range(len(handles), tenants):
                    source = NAPPER + f"// tenant {k}\n"
                    handles.append(
                        [
                            await pool.load(
                                f"{source}// {s}", name=f"r{k}-{s}.rhai", kind="provider", tenant=f"r{k}"
                            )
                            for s in range(scripts)
                        ]
                    )
            except RhaipoolError as exc:
                stop = f"loading refused at {tenants} tenants: {type(exc).__name__}: {exc}"
                break
            level = await _level(pool, handles, seconds, pace) | {
                "tenants": tenants,
                "scripts": tenants * scripts,
            }
            levels.append(level)
            if level["refused"]:
                stop = f"calls refused at {tenants} tenants: {level['refused']}"
                break
            if level["p99_ms"] > 3 * levels[0]["p99_ms"]:
                stop = f"p99 {level['p99_ms']:.1f} ms > 3x the first level's {levels[0]['p99_ms']:.1f} ms"
                break
            tenants *= 2
        else:
            stop = f"reached --most-tenants {most} with neither"
    return {"levels": levels, "stopped": stop}


# -- the run ---------------------------------------------------------------------------------------


def run_benchmark(
    *, seconds: float = 15.0, scripts: int = 2000, script_kb: int = 100, responses: int = 40,
    response_mb: int = 16, streams: int = 8, most_tenants: int = 4096, pace: float = 0.5,
) -> dict[str, Any]:  # fmt: skip
    """Run every scenario once; figures as a dict (``--json``)."""
    result: dict[str, Any] = {"load_start": load_average()}
    result["quiet_alone"] = asyncio.run(_beside(None, seconds))
    result["quiet_beside_flood"] = asyncio.run(_beside(_flood, seconds))
    result["quiet_beside_crasher"] = asyncio.run(_beside(_crasher, seconds))
    result["rss_scripts"] = asyncio.run(_scripts_flood(scripts, script_kb * 1000))
    result["rss_responses"] = asyncio.run(_big_responses(responses, response_mb * 1000 * 1000))
    result["rss_streams"] = asyncio.run(_unread_streams(streams, 900_000, 40))
    result["ramp"] = asyncio.run(_ramp(2, pace, 3.0, most_tenants))
    result["load_end"] = load_average()
    return result


def _table(r: dict[str, Any]) -> str:
    alone = r["quiet_alone"]
    lines = [
        f"load {r['load_start']:.1f} at start, {r['load_end']:.1f} at end; 2 workers + 1 spare",
        "",
        f"{'quiet tenant (provider call, sequential)':<44}{'p50 ms':>9}{'p99 ms':>9}{'p99/alone':>11}",
    ]
    scenarios = [
        ("quiet_alone", "alone (baseline)"),
        ("quiet_beside_flood", "beside a flood (256 in flight)"),
        ("quiet_beside_crasher", "beside a crasher (bomb, new variant each)"),
    ]
    for key, label in scenarios:
        f = r[key]
        extra = (
            f"  worker exits {f['worker_exits']}, other's errors {f['other_errors']}"
            if key != "quiet_alone"
            else ""
        )
        lines.append(
            f"{label:<44}{f['p50_ms']:>9.2f}{f['p99_ms']:>9.2f}{f['p99_ms'] / alone['p99_ms']:>10.1f}x{extra}"
        )
    s, b, t = r["rss_scripts"], r["rss_responses"], r["rss_streams"]
    lines += [
        "",
        "coordinator RSS (MB)                        idle     peak    after   asked of it",
        f"{'distinct scripts':<40}{s['idle_mb']:>8.0f}{s['peak_mb']:>9.0f}{s['after_mb']:>9.0f}   "
        f"{s['source_mb']:.0f} MB of source; failed {s['failed']}",
        f"{'concurrent big responses':<40}{b['idle_mb']:>8.0f}{b['peak_mb']:>9.0f}{b['after_mb']:>9.0f}   "
        f"{b['requested_mb']:.0f} MB of bodies; outcomes {b['outcomes']}",
        f"{'unread streams':<40}{t['idle_mb']:>8.0f}{t['peak_mb']:>9.0f}{'':>9}   "
        f"{t['unread_mb']:.0f} MB emitted; buffered {t['held_unread_mb']:.1f} MB "
        f"(peak {t['held_peak_mb']:.1f}, budget {t['budget_mb']:.0f}); {t['chunks_read']} chunks read after",
        "",
        f"{'tenants at once (2 scripts each, 1 call / pace)':<50}"
        f"{'scripts':>8}{'p50 ms':>9}{'p99 ms':>9}{'calls':>8}",
    ]
    for level in r["ramp"]["levels"]:
        lines.append(
            f"{level['tenants']:<50}{level['scripts']:>8}{level['p50_ms']:>9.2f}{level['p99_ms']:>9.2f}{level['n']:>8}"
        )
    lines.append(f"stopped: {r['ramp']['stopped']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """``rhaipool bench tenants [--seconds S] [--scripts N] [--responses N] [--streams N] [--json]``."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="rhaipool bench tenants", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--seconds", type=float, default=15.0, help="length of each latency scenario")
    parser.add_argument("--scripts", type=int, default=2000, help="distinct scripts loaded (100 per tenant)")
    parser.add_argument("--script-kb", type=int, default=100)
    parser.add_argument("--responses", type=int, default=40, help="concurrent big responses")
    parser.add_argument("--response-mb", type=int, default=16)
    parser.add_argument("--streams", type=int, default=8, help="unread streams")
    parser.add_argument("--most-tenants", type=int, default=4096, help="where the ramp stops at the latest")
    parser.add_argument(
        "--pace", type=float, default=0.5, help="seconds between one tenant's calls in the ramp"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run_benchmark(
        seconds=args.seconds, scripts=args.scripts, script_kb=args.script_kb, responses=args.responses,
        response_mb=args.response_mb, streams=args.streams, most_tenants=args.most_tenants, pace=args.pace,
    )  # fmt: skip
    print(json.dumps(result, indent=2) if args.json else _table(result))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
