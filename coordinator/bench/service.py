"""Benchmark: a trivial region hook and a mock inference through ``rhaipool serve`` vs the in-process API.

Same run, same machine, same worker count: (a) the library (``open_region(...).render`` and
``ProviderRuntime.inference`` on a ``Pool``), (b) the service over HTTP on 127.0.0.1 (``POST
/api/regions/{name}/render`` and ``POST /api/providers/{name}/inference``) driven by an
``httpx.AsyncClient``. Each is measured one call at a time (added p50 latency) and with N concurrent
clients (p50 and throughput). Run with::

    rhaipool bench service [--concurrency 64] [--calls 4000] [--workers 2] [--json]

The load generator shares the machine with the service: on a small box its CPU is part of the figure.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

__all__ = ["Side", "main"]

HOOK = 'fn render(ctx) { "ok" }'
MOCK = 'fn initialize(config) { #{} }\nfn inference(state, request) { #{ content: "ok" } }'
REQUEST = {"model": "mock", "messages": [{"role": "user", "content": "hi"}]}

Call = Callable[[], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Side:
    """One side's figures for one operation."""

    sequential_p50_ms: float
    concurrent_p50_ms: float
    throughput: float


def _p50(values: list[float]) -> float:
    return sorted(values)[len(values) // 2] * 1000


async def _measure(call: Call, calls: int, concurrency: int) -> Side:
    for _ in range(50):  # warm caches, connections and workers
        await call()
    sequential = []
    for _ in range(min(500, calls)):
        begun = time.perf_counter()
        await call()
        sequential.append(time.perf_counter() - begun)
    latencies: list[float] = []
    remaining = [calls]

    async def client() -> None:
        while remaining[0] > 0:
            remaining[0] -= 1
            begun = time.perf_counter()
            await call()
            latencies.append(time.perf_counter() - begun)

    begun = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    elapsed = time.perf_counter() - begun
    return Side(_p50(sequential), _p50(latencies), calls / elapsed)


async def _in_process(workers: int, calls: int, concurrency: int) -> dict[str, Side]:
    from coordinator._core.pool import Pool
    from coordinator.egress import Egress
    from coordinator.providers import PoolExecutor, ProviderRuntime
    from coordinator.providers.config import parse_config
    from coordinator.regions import open_region

    with tempfile.TemporaryDirectory(prefix="rhaipool-bench-") as tmp:
        (Path(tmp) / "hook.rhai").write_text(HOOK)
        (Path(tmp) / "mock.rhai").write_text(MOCK)
        async with Pool(workers=workers) as pool, Egress() as egress:
            region = await open_region(pool, "bench", "hook.rhai", budget=1000, base_dir=tmp)
            runtime = ProviderRuntime(PoolExecutor(pool), egress, parse_config({"providers_dir": tmp}))
            return {
                "hook": await _measure(region.render, calls, concurrency),
                "inference": await _measure(lambda: runtime.inference("mock", REQUEST), calls, concurrency),
            }


def _start_service(folder: Path, workers: int) -> tuple[subprocess.Popen[bytes], str, str]:
    token = secrets.token_urlsafe(16)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sha = hashlib.sha256(token.encode()).hexdigest()
    config = folder / "serve.toml"
    config.write_text(
        f'[serve]\nlisten = "127.0.0.1:{port}"\ndatabase = "b.db"\nworkers = {workers}\n'
        f'[tenants.bench]\ntoken_sha256 = "{sha}"\n'
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "coordinator", "serve", "--config", str(config)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(url + "/readyz").status_code == 200:
                return process, url, token
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    process.kill()
    raise RuntimeError("rhaipool serve did not become ready")


async def _through_service(url: str, token: str, calls: int, concurrency: int) -> dict[str, Side]:
    """Each operation with a fresh client: idle pooled connections left by one phase cost the next."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    headers = {"Authorization": f"Bearer {token}"}

    def client() -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=60)

    async with client() as http:
        await http.put("/api/scripts/region_hook/hook", json={"content": HOOK})
        await http.put("/api/scripts/provider/mock", json={"content": MOCK})
        await http.post("/api/regions", json={"name": "bench", "script": "hook", "budget": 1000})
    calls_by_op = {
        "hook": ("POST", "/api/regions/bench/render", {}),
        "inference": ("POST", "/api/providers/mock/inference", REQUEST),
        "floor": ("GET", "/healthz", None),  # the HTTP client's own cost: no gate, no auth, no pool
    }
    sides = {}
    for op, (method, path, body) in calls_by_op.items():
        async with client() as http:

            async def call(method: str = method, path: str = path, body: Any = body) -> None:
                (await http.request(method, path, json=body)).raise_for_status()

            sides[op] = await _measure(call, calls, concurrency)
    return sides


def run_benchmark(workers: int, calls: int, concurrency: int) -> dict[str, Any]:
    """Both sides, then the service's added p50 and its throughput relative to the library."""
    library = asyncio.run(_in_process(workers, calls, concurrency))
    with tempfile.TemporaryDirectory(prefix="rhaipool-bench-serve-") as tmp:
        process, url, token = _start_service(Path(tmp), workers)
        try:
            service = asyncio.run(_through_service(url, token, calls, concurrency))
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(60)
    floor = service["floor"].sequential_p50_ms
    report: dict[str, Any] = {"concurrency": concurrency, "calls": calls, "workers": workers}
    report["client_floor_p50_ms"] = round(floor, 3)
    for op in ("hook", "inference"):
        lib, svc = library[op], service[op]
        report[op] = {
            "library": asdict(lib),
            "service": asdict(svc),
            "added_sequential_p50_ms": round(svc.sequential_p50_ms - lib.sequential_p50_ms, 3),
            "added_beyond_client_floor_p50_ms": round(
                svc.sequential_p50_ms - floor - lib.sequential_p50_ms, 3
            ),
            "added_concurrent_p50_ms": round(svc.concurrent_p50_ms - lib.concurrent_p50_ms, 3),
            "throughput_ratio": round(svc.throughput / lib.throughput, 3),
        }
    return report


def main(argv: list[str] | None = None) -> None:
    """Command-line entry (``rhaipool bench service``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = run_benchmark(args.workers, args.calls, args.concurrency)
    if args.json:
        print(json.dumps(report))
        return
    print(f"{args.concurrency} concurrent clients, {args.calls} calls, {args.workers} workers")
    print(
        f"client floor: GET /healthz p50 {report['client_floor_p50_ms']:.3f} ms one at a time"
        " (the benchmark's own httpx client; no gate, auth or pool behind it)"
    )
    for op in ("hook", "inference"):
        r = report[op]
        lib, svc = r["library"], r["service"]
        print(
            f"{op:<10} library p50 {lib['sequential_p50_ms']:.3f} ms (one at a time) / "
            f"{lib['concurrent_p50_ms']:.2f} ms ({args.concurrency} clients), {lib['throughput']:.0f}/s; "
            f"service p50 {svc['sequential_p50_ms']:.3f} / {svc['concurrent_p50_ms']:.2f} ms, "
            f"{svc['throughput']:.0f}/s; added p50 {r['added_sequential_p50_ms']:.3f} ms one at a time, "
            f"{r['added_concurrent_p50_ms']:.2f} ms at {args.concurrency}; "
            f"throughput x{r['throughput_ratio']:.2f}; added beyond the client floor "
            f"{r['added_beyond_client_floor_p50_ms']:.3f} ms"
        )


if __name__ == "__main__":
    main()
