"""Benchmark of the pool's own overhead, with same-run baselines (not a test).

    rhaipool bench            (click command ``coordinator.bench.pool:bench``)
    python -m coordinator.bench.pool [--calls N] [--json]

Measures, in one run: p50/p99 round trip of a trivial hook through the pool, the
same call on an in-process engine, a raw pyzmq ROUTER→DEALER echo (same topology
as the pool, no framing, blocking sockets), ``multiprocessing.Pool.apply``; the
CPU each side of the pool spends per call; pipelined throughput with 1 and 2 workers;
and how long until a killed worker's slot is served again (spare promoted) and until
the spare is refilled.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import click
import psutil
import rhai
import zmq

from coordinator._core.config import PoolConfig
from coordinator._core.pool import Pool

__all__ = ["bench", "run_benchmark"]

TRIVIAL = "fn f(x) { x }"
ECHO = """
import sys, zmq
ctx = zmq.Context(); s = ctx.socket(zmq.DEALER); s.connect(sys.argv[1])
s.send(b"ready")
while True:
    s.send_multipart(s.recv_multipart())
"""


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_us": statistics.median(ordered) * 1e6,
        "p99_us": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e6,
        "n": len(ordered),
    }


def _time_each(fn: Callable[[], Any], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def _in_process(n: int) -> dict[str, float]:
    script = rhai.Engine(max_operations=100_000, json_functions=False).compile(TRIVIAL)
    _time_each(lambda: script.call("f", 1), 200)
    return _percentiles(_time_each(lambda: script.call("f", 1), n))


def _raw_zmq(n: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        ctx = zmq.Context()
        router = ctx.socket(zmq.ROUTER)
        router.bind(f"ipc://{tmp}/echo.sock")
        child = subprocess.Popen([sys.executable, "-c", ECHO, f"ipc://{tmp}/echo.sock"])
        try:
            identity, _ = router.recv_multipart()
            payload = b"x" * 100

            def once() -> None:
                router.send_multipart([identity, payload])
                router.recv_multipart()

            _time_each(once, 500)
            return _percentiles(_time_each(once, n))
        finally:
            child.kill()
            child.wait()
            router.close(0)
            ctx.term()


def _raw_zmq_pipelined(n: int, window: int = 256) -> float:
    """Calls/s of the same echo with ``window`` messages in flight: the ceiling pipelined calls compare to."""
    with tempfile.TemporaryDirectory() as tmp:
        ctx = zmq.Context()
        router = ctx.socket(zmq.ROUTER)
        router.setsockopt(zmq.SNDHWM, 0)
        router.setsockopt(zmq.RCVHWM, 0)
        router.bind(f"ipc://{tmp}/echo.sock")
        child = subprocess.Popen([sys.executable, "-c", ECHO, f"ipc://{tmp}/echo.sock"])
        try:
            identity, _ = router.recv_multipart()
            payload = b"x" * 100
            start = time.perf_counter()
            sent = received = 0
            while received < n:
                while sent < n and sent - received < window:
                    router.send_multipart([identity, payload])
                    sent += 1
                router.recv_multipart()
                received += 1
            return n / (time.perf_counter() - start)
        finally:
            child.kill()
            child.wait()
            router.close(0)
            ctx.term()


async def _asyncio_zmq(n: int) -> dict[str, float]:
    """The same echo driven the way the pool drives its socket: asyncio ``add_reader`` on zmq's FD."""
    with tempfile.TemporaryDirectory() as tmp:
        ctx = zmq.Context()
        router = ctx.socket(zmq.ROUTER)
        router.bind(f"ipc://{tmp}/echo.sock")
        child = subprocess.Popen([sys.executable, "-c", ECHO, f"ipc://{tmp}/echo.sock"])
        loop = asyncio.get_running_loop()
        waiting: list[asyncio.Future[None]] = []

        def readable() -> None:
            while int(router.getsockopt(zmq.EVENTS)) & zmq.POLLIN:
                router.recv_multipart(zmq.NOBLOCK)
                if waiting and not waiting[0].done():
                    waiting.pop().set_result(None)

        try:
            identity, _ = router.recv_multipart()
            loop.add_reader(router.FD, readable)
            samples = []
            for i in range(n + 500):
                waiting.append(loop.create_future())
                t = time.perf_counter()
                router.send_multipart([identity, b"x" * 100], zmq.NOBLOCK)
                readable()
                if waiting:
                    await waiting[0]
                if i >= 500:
                    samples.append(time.perf_counter() - t)
            loop.remove_reader(router.FD)
            return _percentiles(samples)
        finally:
            child.kill()
            child.wait()
            router.close(0)
            ctx.term()


def _noop(x: int) -> int:
    return x


def _mp_apply(n: int) -> dict[str, float]:
    with multiprocessing.get_context("fork").Pool(1) as mp:
        _time_each(lambda: mp.apply(_noop, (1,)), 200)
        return _percentiles(_time_each(lambda: mp.apply(_noop, (1,)), n))


async def _pool_round_trip(n: int) -> dict[str, float]:
    async with Pool(workers=1, spares=0) as pool:
        handle = await pool.load(TRIVIAL, name="trivial.rhai")
        for _ in range(300):
            await pool.call(handle, "f", 1)
        worker = psutil.Process(pool.workers()[0].pid)
        samples = []
        cpu0, worker0 = time.process_time(), sum(worker.cpu_times()[:2])
        for _ in range(n):
            t = time.perf_counter()
            await pool.call(handle, "f", 1)
            samples.append(time.perf_counter() - t)
        figures = _percentiles(samples)
        # CPU per call of each side, ZeroMQ I/O threads included: where the time goes on a busy core.
        figures["coordinator_cpu_us"] = (time.process_time() - cpu0) / n * 1e6
        figures["worker_cpu_us"] = (sum(worker.cpu_times()[:2]) - worker0) / n * 1e6
        return figures


async def _throughput(workers: int, calls: int) -> float:
    async with Pool(PoolConfig(workers=workers, spares=0, queue_size=calls + 10)) as pool:
        handle = await pool.load(TRIVIAL, name="trivial.rhai")
        await asyncio.gather(*(pool.call(handle, "f", i) for i in range(2000)))
        t = time.perf_counter()
        await asyncio.gather(*(pool.call(handle, "f", i) for i in range(calls)))
        return calls / (time.perf_counter() - t)


async def _replacement(rounds: int) -> dict[str, float]:
    promoted, refilled = [], []
    async with Pool(workers=2, spares=1) as pool:
        handle = await pool.load(TRIVIAL, name="trivial.rhai")
        for _ in range(rounds):
            while sum(w.state == "spare" for w in pool.workers()) < 1:
                await asyncio.sleep(0.01)
            victim = next(w for w in pool.workers() if w.state == "active")
            t = time.perf_counter()
            os.kill(victim.pid, signal.SIGKILL)
            while (
                victim.pid in {w.pid for w in pool.workers()}
                or sum(w.state == "active" for w in pool.workers()) < 2
            ):
                await asyncio.sleep(0.0005)
            await pool.call(handle, "f", 1)
            promoted.append(time.perf_counter() - t)
            while sum(w.state == "spare" for w in pool.workers()) < 1:
                await asyncio.sleep(0.001)
            refilled.append(time.perf_counter() - t)
    return {
        "ready_median_ms": statistics.median(promoted) * 1e3,
        "spare_refilled_median_ms": statistics.median(refilled) * 1e3,
    }


def run_benchmark(calls: int = 3000, throughput_calls: int = 20000, rounds: int = 10) -> dict[str, Any]:
    """Run every scenario once and return the figures (and whether the issue's targets are met)."""
    result: dict[str, Any] = {
        "in_process": _in_process(calls),
        "raw_zmq_echo": _raw_zmq(calls),
        "raw_zmq_pipelined": _raw_zmq_pipelined(throughput_calls),
        "asyncio_zmq_echo": asyncio.run(_asyncio_zmq(calls)),
        "mp_pool_apply": _mp_apply(calls),
        "pool": asyncio.run(_pool_round_trip(calls)),
        "throughput_1_worker": asyncio.run(_throughput(1, throughput_calls)),
        "throughput_2_workers": asyncio.run(_throughput(2, throughput_calls)),
        "replacement": asyncio.run(_replacement(rounds)),
    }
    ratio = result["pool"]["p50_us"] / result["raw_zmq_echo"]["p50_us"]
    result["targets"] = {
        "pool_p50_over_raw_echo_p50": ratio,
        "pool_p50_le_1_5x_echo": ratio <= 1.5,
        "echo_p99_over_p50": result["raw_zmq_echo"]["p99_us"] / result["raw_zmq_echo"]["p50_us"],
        "pipelined_2_workers_of_raw": result["throughput_2_workers"] / result["raw_zmq_pipelined"],
        "pool_p50_over_asyncio_echo_p50": result["pool"]["p50_us"] / result["asyncio_zmq_echo"]["p50_us"],
        "worker_cpu_le_40us": result["pool"]["worker_cpu_us"] <= 40,
        "replacement_le_50ms": result["replacement"]["ready_median_ms"] <= 50,
    }
    return result


def _table(r: dict[str, Any]) -> str:
    rows = [("path", "p50 µs", "p99 µs")]
    for key, label in [
        ("in_process", "in-process engine call"),
        ("raw_zmq_echo", "raw pyzmq ROUTER/DEALER echo"),
        ("asyncio_zmq_echo", "same echo driven by asyncio"),
        ("mp_pool_apply", "multiprocessing.Pool.apply"),
        ("pool", "rhaipool call (trivial hook)"),
    ]:
        rows.append((label, f"{r[key]['p50_us']:.1f}", f"{r[key]['p99_us']:.1f}"))
    lines = [f"{a:<34}{b:>10}{c:>10}" for a, b, c in rows]
    t = r["targets"]
    lines += [
        "",
        f"baseline health: raw echo p99/p50 {t['echo_p99_over_p50']:.1f}x; load {os.getloadavg()[0]:.1f}",
        (
            f"pool p50 / raw echo p50        {t['pool_p50_over_raw_echo_p50']:.2f}x   "
            f"(target <= 1.5x: {t['pool_p50_le_1_5x_echo']})"
        ),
        f"pool p50 / asyncio echo p50    {t['pool_p50_over_asyncio_echo_p50']:.2f}x",
        (
            f"pool CPU per call              coordinator {r['pool']['coordinator_cpu_us']:.0f} µs, "
            f"worker {r['pool']['worker_cpu_us']:.0f} µs (ZeroMQ I/O threads included; "
            f"target worker <= 40 µs: {t['worker_cpu_le_40us']})"
        ),
        f"raw pyzmq echo, pipelined      {r['raw_zmq_pipelined']:,.0f} calls/s (256 in flight)",
        f"pipelined, 1 worker            {r['throughput_1_worker']:,.0f} calls/s",
        (
            f"pipelined, 2 workers           {r['throughput_2_workers']:,.0f} calls/s   "
            f"{t['pipelined_2_workers_of_raw']:.0%} of the raw pipelined echo (target >= 60%)"
        ),
        (
            f"replacement ready after kill   {r['replacement']['ready_median_ms']:.1f} ms median   "
            f"(target <= 50 ms: {t['replacement_le_50ms']})"
        ),
        f"spare refilled (cold spawn)    {r['replacement']['spare_refilled_median_ms']:.1f} ms median",
    ]
    return "\n".join(lines)


@click.command("bench")
@click.option("--calls", default=3000, show_default=True, help="Round trips per latency scenario.")
@click.option("--throughput-calls", default=20000, show_default=True)
@click.option("--rounds", default=10, show_default=True, help="Kills for the replacement scenario.")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def bench(calls: int, throughput_calls: int, rounds: int, as_json: bool) -> None:
    """Measure pool overhead against same-run baselines (round trip, throughput, replacement)."""
    result = run_benchmark(calls, throughput_calls, rounds)
    click.echo(json.dumps(result, indent=2) if as_json else _table(result))


if __name__ == "__main__":
    bench()
