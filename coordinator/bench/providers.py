"""Benchmark: inferences through the pool vs plain ``httpx.AsyncClient`` against the same slow local API.

The stand-in API runs in its own process and answers every chat completion after ``--delay`` seconds.
In the same run, N concurrent callers drive it (a) with a plain ``httpx.AsyncClient`` posting the same
body the seed's groq script builds, and (b) through the pool running the unmodified groq script.
Run with::

    python -m coordinator.bench.providers [--concurrency 256] [--calls 2048] [--delay 0.1] \
        [--workers 4] [--json]

Prints throughput of both and their ratio, p50/p99 latency, p50 added latency per call measured one
call at a time, and the total memory (RSS) of coordinator + workers.
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
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

from coordinator.providers.config import parse_config
from coordinator._cli.demo import GROQ_SCRIPT
from coordinator.providers.runtime import ProviderRuntime
from coordinator.providers.session import open_runtime

__all__ = ["main", "run_benchmark", "Side"]

MESSAGES = [{"role": "user", "content": "Reply with exactly: PONG"}]


@dataclass(frozen=True, slots=True)
class Side:
    """One side's figures."""

    calls: int
    seconds: float
    throughput: float
    p50_ms: float
    p99_ms: float
    sequential_p50_ms: float


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def _drive(one: Callable[[], Awaitable[Any]], concurrency: int, calls: int, sequential: int) -> Side:
    """``calls`` calls by ``concurrency`` workers, then ``sequential`` calls one at a time."""
    latencies: list[float] = []
    remaining = iter(range(calls))

    async def worker() -> None:
        for _ in remaining:
            t0 = time.perf_counter()
            await one()
            latencies.append(time.perf_counter() - t0)

    start = time.perf_counter()
    async with asyncio.TaskGroup() as tasks:
        for _ in range(concurrency):
            tasks.create_task(worker())
    elapsed = time.perf_counter() - start
    solo = []
    for _ in range(sequential):
        t0 = time.perf_counter()
        await one()
        solo.append(time.perf_counter() - t0)
    return Side(calls, elapsed, calls / elapsed, _pct(latencies, 0.5), _pct(latencies, 0.99), _pct(solo, 0.5))


async def _plain(base_url: str, args: argparse.Namespace) -> Side:
    limits = httpx.Limits(max_connections=args.concurrency, max_keepalive_connections=args.concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        one = _plain_one(client, base_url)
        await one()
        return await _drive(one, args.concurrency, args.calls, args.sequential)


async def _raw(base_url: str, args: argparse.Namespace) -> Side:
    """The server's ceiling: hand-written HTTP/1.1 over asyncio streams, one keep-alive socket per caller."""
    host_port = base_url.split("/")[2]
    host, port = host_port.rsplit(":", 1)
    body = json.dumps({"model": "standin-small", "messages": MESSAGES}).encode()
    request = b"POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n%s" % (
        host_port.encode(),
        len(body),
        body,
    )
    sockets: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def one() -> None:
        reader, writer = sockets.pop() if sockets else await asyncio.open_connection(host, int(port))
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        await reader.readexactly(length)
        sockets.append((reader, writer))

    try:
        return await _drive(one, args.concurrency, args.calls, args.sequential)
    finally:
        for _, writer in sockets:
            writer.close()


def _memory(server_pid: int) -> int:
    """Proportional set size (shared pages split, so the sum is honest) of this process and its children,
    minus the stand-in server; RSS where PSS is not available."""
    me = psutil.Process()
    procs = [me] + [c for c in me.children(recursive=True) if c.pid != server_pid]
    total = 0
    for proc in procs:
        try:
            info = proc.memory_full_info()
            total += getattr(info, "pss", info.rss)
        except psutil.Error:
            pass
    return total


async def _interleaved(
    plain: Callable[[], Awaitable[Any]], pooled: Callable[[], Awaitable[Any]], n: int
) -> float:
    """Median of (pool − plain) latency over ``n`` back-to-back pairs: robust to load on a shared machine."""
    deltas = []
    for _ in range(n):
        t0 = time.perf_counter()
        await plain()
        t1 = time.perf_counter()
        await pooled()
        t2 = time.perf_counter()
        deltas.append((t2 - t1) - (t1 - t0))
    return statistics.median(deltas) * 1000


def _plain_one(client: httpx.AsyncClient, base_url: str) -> Callable[[], Awaitable[None]]:
    body = json.dumps({"model": "standin-small", "messages": MESSAGES, "max_tokens": 16, "temperature": 0.7})
    headers = {"Authorization": "Bearer bench", "Content-Type": "application/json"}

    async def one() -> None:
        response = await client.post(f"{base_url}/chat/completions", content=body, headers=headers)
        assert json.loads(response.text)["choices"][0]["message"]["content"] == "PONG"

    return one


async def _pooled(base_url: str, args: argparse.Namespace, server_pid: int) -> tuple[Side, int, float]:
    with tempfile.TemporaryDirectory(prefix="rhaipool-bench-") as tmp:
        Path(tmp, "groq.rhai").write_text(GROQ_SCRIPT.read_text())
        config = parse_config(
            {
                "providers_dir": tmp,
                "model_providers": {
                    "groq": {"api_key": "bench", "base_url": base_url, "egress_allow": ["127.0.0.1"]}
                },
            }
        )
        async with open_runtime(config, workers=args.workers, spares=0) as runtime:
            request = {"model": "standin-small", "messages": MESSAGES, "max_tokens": 16}

            async def one() -> None:
                response = await runtime.inference("groq", request)
                assert response.content == "PONG"

            await _warm(runtime, one, args.workers * 4)
            sampler = _Sampler(lambda: _memory(server_pid))
            async with asyncio.TaskGroup() as tasks:
                task = tasks.create_task(sampler.run())
                try:
                    side = await _drive(one, args.concurrency, args.calls, args.sequential)
                finally:
                    task.cancel()
            async with httpx.AsyncClient(timeout=60) as client:
                added = await _interleaved(_plain_one(client, base_url), one, args.sequential)
            return side, sampler.peak, added


class _Sampler:
    """Samples memory every 200 ms and keeps the peak."""

    def __init__(self, measure: Callable[[], int]) -> None:
        self.measure = measure
        self.peak = 0

    async def run(self) -> None:
        while True:
            self.peak = max(self.peak, self.measure())
            await asyncio.sleep(0.2)


async def _warm(runtime: ProviderRuntime, one: Callable[[], Awaitable[None]], n: int) -> None:
    await runtime.get("groq")
    await asyncio.gather(*(one() for _ in range(n)))


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
    """Both sides against one server process; returns the figures."""
    proc, base_url = _start_server(args.delay)
    try:
        pooled, memory, added = await _pooled(base_url, args, proc.pid)  # first: nothing else inflates memory
        raw = await _raw(base_url, args)
        plain = await _plain(base_url, args)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return {
        "delay_ms": args.delay * 1000,
        "concurrency": args.concurrency,
        "workers": args.workers,
        "ceiling": asdict(raw),
        "plain": asdict(plain),
        "pool": asdict(pooled),
        "throughput_ratio": pooled.throughput / plain.throughput,
        "added_p50_ms": added,
        "memory_mb": memory / 2**20,
    }


def _print(result: dict[str, Any]) -> None:
    p, q = result["plain"], result["pool"]
    print(
        f"{result['concurrency']} concurrent callers, API delay {result['delay_ms']:.0f} ms, "
        f"{result['workers']} workers"
    )
    for label, side in (("raw sockets", result["ceiling"]), ("plain httpx", p), ("pool+groq.rhai", q)):
        print(
            f"  {label:<15} {side['throughput']:8.1f} calls/s  p50 {side['p50_ms']:7.1f} ms  "
            f"p99 {side['p99_ms']:7.1f} ms  sequential p50 {side['sequential_p50_ms']:6.2f} ms"
        )
    print(
        f"  throughput ratio pool/plain: {result['throughput_ratio']:.1%}   (target >= 60%); "
        f"pool/raw-socket ceiling: {q['throughput'] / result['ceiling']['throughput']:.1%}"
    )
    print(
        f"  added p50 latency per call:  {result['added_p50_ms']:.2f} ms  (target <= 2 ms; median of "
        "interleaved one-at-a-time pairs)"
    )
    print(f"  memory coordinator+workers:  {result['memory_mb']:.0f} MB peak PSS  (target <= 400 MB)")


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description="pool vs plain httpx against a slow local API")
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--calls", type=int, default=2048)
    parser.add_argument("--sequential", type=int, default=100)
    parser.add_argument("--delay", type=float, default=0.1)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = asyncio.run(run_benchmark(args))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print(result)


if __name__ == "__main__":
    main()
