"""Benchmark of the pool's own overhead, with same-run baselines (not a test).

    rhaipool bench            (click command ``coordinator.bench.pool:bench``)
    python -m coordinator.bench.pool [--calls N] [--json]

Measures, in one run: p50/p99 round trip of a trivial hook through the pool, the
same call on an in-process engine, a raw pyzmq ROUTER→DEALER echo (same topology
as the pool, no framing, blocking sockets), the same echo driven by asyncio,
``multiprocessing.Pool.apply``; pipelined throughput with 1 and 2 workers beside the raw
echo pipelined and an asyncio-driven pipelined echo; the CPU each side spends per call on
every path, one at a time and pipelined; and how long until a killed worker's slot is
served again (spare promoted) and until the spare is refilled.

Each of the issue's targets is printed with the floor that bounds it, measured in the
same run: the raw echo's own child already spends tens of µs of CPU per message (ZeroMQ's
I/O thread wake-ups), and no asyncio coordinator beats an asyncio echo that does nothing
but create a future, send, receive and resolve it.  (Over 400 lines: each baseline is kept
beside the scenario whose floor it measures, so that one file shows what is compared to what.)
"""

from __future__ import annotations

import asyncio
import itertools
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
import rhai
import zmq

from coordinator._core.config import PoolConfig
from coordinator._core.pool import Pool
from coordinator.bench.measure import cpu_seconds

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


class _Echo:
    """A ROUTER bound in a temporary directory and the echoing DEALER child behind it, with both sides'
    CPU clocks: ``cpu()`` is (this process, the child) in seconds, ZeroMQ I/O threads included."""

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        self._ctx = zmq.Context()
        self.router = self._ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.SNDHWM, 0)
        self.router.setsockopt(zmq.RCVHWM, 0)
        endpoint = f"ipc://{self._tmp.name}/echo.sock"
        self.router.bind(endpoint)
        self._child = subprocess.Popen([sys.executable, "-c", ECHO, endpoint])
        self.identity = self.router.recv_multipart()[0]

    def cpu(self) -> tuple[float, float]:
        return time.process_time(), cpu_seconds(self._child.pid)

    def per_call_us(self, since: tuple[float, float], n: int) -> dict[str, float]:
        """CPU per call of each side since ``since`` (a ``cpu()`` reading)."""
        now = self.cpu()
        return {"parent_cpu_us": (now[0] - since[0]) / n * 1e6, "child_cpu_us": (now[1] - since[1]) / n * 1e6}

    def close(self) -> None:
        self._child.kill()
        self._child.wait()
        self.router.close(0)
        self._ctx.term()
        self._tmp.cleanup()


def _raw_zmq(n: int) -> dict[str, float]:
    """One message at a time over blocking sockets: the transport's own floor per round trip."""
    echo = _Echo()
    try:
        router, identity, payload = echo.router, echo.identity, b"x" * 100

        def once() -> None:
            router.send_multipart([identity, payload])
            router.recv_multipart()

        _time_each(once, 500)
        since = echo.cpu()
        figures = _percentiles(_time_each(once, n))
        return figures | echo.per_call_us(since, n)
    finally:
        echo.close()


def _raw_zmq_pipelined(n: int, window: int = 256) -> dict[str, float]:
    """Calls/s of the same echo with ``window`` messages in flight: the ceiling pipelined calls compare to."""
    echo = _Echo()
    try:
        router, identity, payload = echo.router, echo.identity, b"x" * 100
        since, start = echo.cpu(), time.perf_counter()
        sent = received = 0
        while received < n:
            while sent < n and sent - received < window:
                router.send_multipart([identity, payload])
                sent += 1
            router.recv_multipart()
            received += 1
        return {"calls_per_s": n / (time.perf_counter() - start)} | echo.per_call_us(since, n)
    finally:
        echo.close()


class _AsyncEcho:
    """The echo driven the way the pool drives its socket (asyncio ``add_reader`` on zmq's edge-triggered
    FD): per call a future, a send, a receive and the future resolved — what any asyncio coordinator pays,
    nothing else."""

    def __init__(self, echo: _Echo) -> None:
        self.echo = echo
        self._loop = asyncio.get_running_loop()
        self._waiting: dict[bytes, asyncio.Future[None]] = {}
        self._keys = itertools.count()
        self._loop.add_reader(echo.router.FD, self._readable)

    def _readable(self) -> None:
        router = self.echo.router
        while int(router.getsockopt(zmq.EVENTS)) & zmq.POLLIN:
            _, key = router.recv_multipart(zmq.NOBLOCK)
            self._waiting.pop(key).set_result(None)

    async def call(self) -> None:
        key = b"%d" % next(self._keys) + b"x" * 90
        future = self._waiting[key] = self._loop.create_future()
        self.echo.router.send_multipart([self.echo.identity, key], zmq.NOBLOCK)
        self._readable()  # a send can consume the edge that announced a reply
        await future

    def close(self) -> None:
        self._loop.remove_reader(self.echo.router.FD)
        self.echo.close()


async def _asyncio_zmq(n: int) -> dict[str, float]:
    """One call at a time through ``_AsyncEcho``: the round trip and CPU floor of an asyncio coordinator."""
    driver = _AsyncEcho(_Echo())
    try:
        for _ in range(500):
            await driver.call()
        samples, since = [], driver.echo.cpu()
        for _ in range(n):
            t = time.perf_counter()
            await driver.call()
            samples.append(time.perf_counter() - t)
        return _percentiles(samples) | driver.echo.per_call_us(since, n)
    finally:
        driver.close()


async def _asyncio_zmq_pipelined(calls: int) -> dict[str, float]:
    """``calls`` echo calls at once through ``asyncio.gather``, as the pool's pipelined scenario is driven:
    the throughput ceiling of an asyncio coordinator on this transport."""
    driver = _AsyncEcho(_Echo())
    try:
        await asyncio.gather(*(driver.call() for _ in range(2000)))
        since, start = driver.echo.cpu(), time.perf_counter()
        await asyncio.gather(*(driver.call() for _ in range(calls)))
        return {"calls_per_s": calls / (time.perf_counter() - start)} | driver.echo.per_call_us(since, calls)
    finally:
        driver.close()


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
        worker = pool.workers()[0].pid
        samples = []
        cpu0, worker0 = time.process_time(), cpu_seconds(worker)
        for _ in range(n):
            t = time.perf_counter()
            await pool.call(handle, "f", 1)
            samples.append(time.perf_counter() - t)
        figures = _percentiles(samples)
        # CPU per call of each side, ZeroMQ I/O threads included: where the time goes on a busy core.
        figures["coordinator_cpu_us"] = (time.process_time() - cpu0) / n * 1e6
        figures["worker_cpu_us"] = (cpu_seconds(worker) - worker0) / n * 1e6
        return figures


async def _paired(n: int) -> dict[str, float]:
    """The pool's trivial hook and the raw echo's round trip, alternating one of each: both meet the
    same moment's load and CPU placement, which moves either one's p50 by up to 2x from run to run."""
    echo = _Echo()
    try:
        router, identity, payload = echo.router, echo.identity, b"x" * 100
        async with Pool(workers=1, spares=0) as pool:
            handle = await pool.load(TRIVIAL, name="trivial.rhai")
            raw, pooled = [], []
            for i in range(n + 300):
                t = time.perf_counter()
                router.send_multipart([identity, payload])
                router.recv_multipart()
                t1 = time.perf_counter()
                await pool.call(handle, "f", 1)
                t2 = time.perf_counter()
                if i >= 300:  # the first ones warm both sides up
                    raw.append(t1 - t)
                    pooled.append(t2 - t1)
        return {"raw_p50_us": statistics.median(raw) * 1e6, "pool_p50_us": statistics.median(pooled) * 1e6}
    finally:
        echo.close()


async def _throughput(workers: int, calls: int) -> dict[str, float]:
    """Pipelined calls/s, and CPU per call of the coordinator and of its workers under that load."""
    async with Pool(PoolConfig(workers=workers, spares=0, queue_size=calls + 10)) as pool:
        handle = await pool.load(TRIVIAL, name="trivial.rhai")
        await asyncio.gather(*(pool.call(handle, "f", i) for i in range(2000)))
        pids = [w.pid for w in pool.workers()]
        cpu0, workers0 = time.process_time(), sum(map(cpu_seconds, pids))
        t = time.perf_counter()
        await asyncio.gather(*(pool.call(handle, "f", i) for i in range(calls)))
        elapsed = time.perf_counter() - t
        return {
            "calls_per_s": calls / elapsed,
            "coordinator_cpu_us": (time.process_time() - cpu0) / calls * 1e6,
            "worker_cpu_us": (sum(map(cpu_seconds, pids)) - workers0) / calls * 1e6,
        }


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
        "asyncio_zmq_pipelined": asyncio.run(_asyncio_zmq_pipelined(throughput_calls)),
        "mp_pool_apply": _mp_apply(calls),
        "pool": asyncio.run(_pool_round_trip(calls)),
        "paired": asyncio.run(_paired(calls)),
        "throughput_1_worker": asyncio.run(_throughput(1, throughput_calls)),
        "throughput_2_workers": asyncio.run(_throughput(2, throughput_calls)),
        "replacement": asyncio.run(_replacement(rounds)),
    }
    raw, asyncio_echo = result["raw_zmq_echo"], result["asyncio_zmq_echo"]
    raw_pipelined = result["raw_zmq_pipelined"]["calls_per_s"]
    asyncio_pipelined = result["asyncio_zmq_pipelined"]["calls_per_s"]
    two_workers = result["throughput_2_workers"]["calls_per_s"]
    paired = result["paired"]
    ratio = paired["pool_p50_us"] / paired["raw_p50_us"]
    result["targets"] = {
        "pool_p50_over_raw_echo_p50": ratio,
        "pool_p50_le_1_5x_echo": ratio <= 1.5,
        "pool_p50_over_raw_echo_p50_apart": result["pool"]["p50_us"] / raw["p50_us"],
        "echo_p99_over_p50": raw["p99_us"] / raw["p50_us"],
        "pipelined_2_workers_of_raw": two_workers / raw_pipelined,
        "pool_p50_over_asyncio_echo_p50": result["pool"]["p50_us"] / asyncio_echo["p50_us"],
        "worker_cpu_le_40us": result["pool"]["worker_cpu_us"] <= 40,
        "replacement_le_50ms": result["replacement"]["ready_median_ms"] <= 50,
    }
    result["floors"] = {  # what bounds each target, measured in the same run
        "asyncio_echo_p50_over_raw_echo_p50": asyncio_echo["p50_us"] / raw["p50_us"],
        "raw_echo_child_cpu_us": raw["child_cpu_us"],
        "raw_echo_parent_cpu_us": raw["parent_cpu_us"],
        "asyncio_pipelined_of_raw_pipelined": asyncio_pipelined / raw_pipelined,
        "pipelined_2_workers_of_asyncio_pipelined": two_workers / asyncio_pipelined,
        "pipelined_1_worker_of_asyncio_pipelined": result["throughput_1_worker"]["calls_per_s"]
        / asyncio_pipelined,
    }
    return result


def _cpu_table(r: dict[str, Any]) -> list[str]:
    """CPU per call on each side of every path, one at a time and pipelined (what a host pays)."""
    rows = [
        ("raw pyzmq echo, one at a time", r["raw_zmq_echo"], "parent_cpu_us", "child_cpu_us"),
        ("raw pyzmq echo, pipelined (256)", r["raw_zmq_pipelined"], "parent_cpu_us", "child_cpu_us"),
        ("asyncio echo, one at a time", r["asyncio_zmq_echo"], "parent_cpu_us", "child_cpu_us"),
        ("asyncio echo, pipelined", r["asyncio_zmq_pipelined"], "parent_cpu_us", "child_cpu_us"),
        ("rhaipool, one at a time", r["pool"], "coordinator_cpu_us", "worker_cpu_us"),
        ("rhaipool, pipelined, 1 worker", r["throughput_1_worker"], "coordinator_cpu_us", "worker_cpu_us"),
        ("rhaipool, pipelined, 2 workers", r["throughput_2_workers"], "coordinator_cpu_us", "worker_cpu_us"),
    ]
    lines = [f"{'CPU per call, µs (ZeroMQ I/O threads included)':<48}{'sender':>8}{'echo/worker':>13}"]
    lines += [
        f"{label:<48}{figures[mine]:>8.0f}{figures[theirs]:>13.0f}" for label, figures, mine, theirs in rows
    ]
    return lines


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
    t, f = r["targets"], r["floors"]
    lines += [
        "",
        f"baseline health: raw echo p99/p50 {t['echo_p99_over_p50']:.1f}x; load {os.getloadavg()[0]:.1f}",
        (
            f"pool p50 / raw echo p50        {t['pool_p50_over_raw_echo_p50']:.2f}x   "
            f"(target <= 1.5x: {t['pool_p50_le_1_5x_echo']}; alternating one call of each: "
            f"{r['paired']['pool_p50_us']:.1f} vs {r['paired']['raw_p50_us']:.1f} µs; "
            f"measured apart, the rows above: {t['pool_p50_over_raw_echo_p50_apart']:.2f}x)"
            f"   floor: the asyncio echo's own p50 is {f['asyncio_echo_p50_over_raw_echo_p50']:.2f}x"
        ),
        f"pool p50 / asyncio echo p50    {t['pool_p50_over_asyncio_echo_p50']:.2f}x",
        (
            f"pool CPU per call              coordinator {r['pool']['coordinator_cpu_us']:.0f} µs, "
            f"worker {r['pool']['worker_cpu_us']:.0f} µs (ZeroMQ I/O threads included; "
            f"target worker <= 40 µs: {t['worker_cpu_le_40us']})"
            f"   floor: the raw echo's child spends {f['raw_echo_child_cpu_us']:.0f} µs, "
            f"its parent {f['raw_echo_parent_cpu_us']:.0f} µs"
        ),
        (
            f"raw pyzmq echo, pipelined      {r['raw_zmq_pipelined']['calls_per_s']:,.0f} calls/s "
            "(256 in flight)"
        ),
        (
            f"asyncio echo, pipelined        {r['asyncio_zmq_pipelined']['calls_per_s']:,.0f} calls/s "
            f"(all in flight, as the pool's pipelined runs)"
        ),
        (
            f"pipelined, 1 worker            {r['throughput_1_worker']['calls_per_s']:,.0f} calls/s   "
            f"{f['pipelined_1_worker_of_asyncio_pipelined']:.0%} of the asyncio pipelined echo"
        ),
        (
            f"pipelined, 2 workers           {r['throughput_2_workers']['calls_per_s']:,.0f} calls/s   "
            f"{t['pipelined_2_workers_of_raw']:.0%} of the raw pipelined echo (target >= 60%)"
            f"   ceiling: the asyncio pipelined echo reaches {f['asyncio_pipelined_of_raw_pipelined']:.0%}"
            f" of it; the pool reaches {f['pipelined_2_workers_of_asyncio_pipelined']:.0%} of that echo"
        ),
        (
            f"replacement ready after kill   {r['replacement']['ready_median_ms']:.1f} ms median   "
            f"(target <= 50 ms: {t['replacement_le_50ms']})"
        ),
        f"spare refilled (cold spawn)    {r['replacement']['spare_refilled_median_ms']:.1f} ms median",
        "",
        *_cpu_table(r),
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
