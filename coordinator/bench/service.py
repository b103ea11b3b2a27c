"""Benchmark: a trivial region hook and a mock inference through ``rhaipool serve`` vs the in-process API.

Same run, same machine, same worker count: (a) the library (``open_region(...).render`` and
``ProviderRuntime.inference`` on a ``Pool``), (b) the service over HTTP on 127.0.0.1 (``POST
/api/regions/{name}/render`` and ``POST /api/providers/{name}/inference``), driven by two load
generators in turn: ``httpx.AsyncClient`` (what a Python user runs; ~0.3–0.6 ms of client CPU per
request) and a raw-socket keep-alive HTTP/1.1 client (next to no client CPU, so the service's own cost
shows). Each is measured one call at a time (added p50 latency) and with N concurrent clients (p50 and
throughput). Run with::

    rhaipool bench service [--concurrency 64] [--calls 4000] [--workers 2] [--rounds 3] [--json]

The load generator shares the machine with the service, so latency on a small busy box carries its
CPU; the steadier figure is CPU per call: the service process's own (read from the kernel per thread,
its workers apart) against the in-process coordinator's, whose difference is the CPU the service adds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import httpx
import psutil

from coordinator.bench.measure import cpu_seconds, free_port
from coordinator.service.auth import token_sha256

__all__ = ["RawHttp", "Side", "main"]

HOOK = 'fn render(ctx) { "ok" }'
MOCK = 'fn initialize(config) { #{} }\nfn inference(state, request) { #{ content: "ok" } }'
REQUEST = {"model": "mock", "messages": [{"role": "user", "content": "hi"}]}
LOADERS = ("httpx", "raw")

Call = Callable[[], Awaitable[Any]]
CpuReader = Callable[[], tuple[float, float]]
"""CPU seconds so far of (the process answering calls, its worker processes)."""


@dataclass(frozen=True, slots=True)
class Side:
    """One side's figures for one operation (CPU per call: of the concurrent phase, and one at a time)."""

    sequential_p50_ms: float
    concurrent_p50_ms: float
    throughput: float
    cpu_ms_per_call: float
    workers_cpu_ms_per_call: float
    sequential_cpu_ms_per_call: float


def _p50(values: list[float]) -> float:
    return sorted(values)[len(values) // 2] * 1000


def cpu_reader(pid: int) -> CpuReader:
    """Reads ``pid``'s CPU and its descendants' (the pool's workers) separately."""

    def read() -> tuple[float, float]:
        try:
            children = psutil.Process(pid).children(recursive=True)
        except psutil.Error:
            children = []
        return cpu_seconds(pid), sum(cpu_seconds(c.pid) for c in children)

    return read


async def _measure(call: Call, calls: int, concurrency: int, cpu: CpuReader) -> Side:
    for _ in range(50):  # warm caches, connections and workers
        await call()
    sequential = []
    own0, _ = cpu()
    for _ in range(min(500, calls)):
        begun = time.perf_counter()
        await call()
        sequential.append(time.perf_counter() - begun)
    own1, _ = cpu()
    sequential_cpu = (own1 - own0) * 1000 / len(sequential)
    latencies: list[float] = []
    remaining = [calls]

    async def client() -> None:
        while remaining[0] > 0:
            remaining[0] -= 1
            begun = time.perf_counter()
            await call()
            latencies.append(time.perf_counter() - begun)

    own0, workers0 = cpu()
    begun = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    elapsed = time.perf_counter() - begun
    own1, workers1 = cpu()
    per_call = 1000 / calls
    return Side(
        _p50(sequential),
        _p50(latencies),
        calls / elapsed,
        (own1 - own0) * per_call,
        (workers1 - workers0) * per_call,
        sequential_cpu,
    )


@asynccontextmanager
async def _in_process(workers: int) -> AsyncIterator[dict[str, Call]]:
    """The library side: a region's render and a provider's inference on an in-process ``Pool``."""
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
            yield {"hook": region.render, "inference": lambda: runtime.inference("mock", REQUEST)}


class RawHttp:
    """A keep-alive HTTP/1.1 client over raw sockets: one connection per concurrent caller, reused.

    It writes a prepared request and reads a ``Content-Length`` reply (the service sends no chunked
    body on these paths), so its CPU per call is a small fraction of httpx's.
    """

    def __init__(self, url: str, token: str) -> None:
        self._host, port = url.split("/")[2].rsplit(":", 1)
        self._port = int(port)
        self._auth = f"Authorization: Bearer {token}\r\n".encode()
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    def call(self, method: str, path: str, body: Any) -> Call:
        """One prepared request, sent on an idle connection (or a new one); raises on a 4xx/5xx."""
        payload = b"" if body is None else json.dumps(body).encode()
        kind = b"Content-Type: application/json\r\n" if body is not None else b""
        request = (
            b"%s %s HTTP/1.1\r\nHost: %s\r\n%s%sContent-Length: %d\r\n\r\n"
            % (method.encode(), path.encode(), self._host.encode(), self._auth, kind, len(payload))
            + payload
        )

        async def one() -> None:
            reader, writer = self._idle.pop() if self._idle else await self._connect()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            if status >= 400:
                raise RuntimeError(f"{method} {path}: HTTP {status}")
            self._idle.append((reader, writer))

        return one

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(self._host, self._port)

    async def aclose(self) -> None:
        """Close the idle connections."""
        for _, writer in self._idle:
            writer.close()
        self._idle.clear()


def _start_service(folder: Path, workers: int) -> tuple[subprocess.Popen[bytes], str, str]:
    token = secrets.token_urlsafe(16)
    port = free_port()
    sha = token_sha256(token)
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


CALLS_BY_OP: dict[str, tuple[str, str, Any]] = {
    "hook": ("POST", "/api/regions/bench/render", {}),
    "inference": ("POST", "/api/providers/mock/inference", REQUEST),
    "floor": ("GET", "/healthz", None),  # the client's own cost and the bare HTTP hop: no gate, auth or pool
}


@asynccontextmanager
async def _loader(kind: str, url: str, token: str, concurrency: int) -> AsyncIterator[Callable[..., Call]]:
    """A fresh load generator (idle pooled connections left by one phase cost the next)."""
    if kind == "raw":
        raw = RawHttp(url, token)
        try:
            yield raw.call
        finally:
            await raw.aclose()
        return
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=60) as http:

        def call(method: str, path: str, body: Any) -> Call:
            async def one() -> None:
                (await http.request(method, path, json=body)).raise_for_status()

            return one

        yield call


async def _prepare_service(url: str, token: str) -> None:
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"}) as http:
        for put in (
            http.put("/api/scripts/region_hook/hook", json={"content": HOOK}),
            http.put("/api/scripts/provider/mock", json={"content": MOCK}),
            http.post("/api/regions", json={"name": "bench", "script": "hook", "budget": 1000}),
        ):
            (await put).raise_for_status()


Rounds = dict[str, dict[str, list[Side]]]
"""``{side: {op: [one Side per round]}}``; sides: ``library`` and each load generator."""


async def _rounds(
    workers: int, url: str, token: str, pid: int, calls: int, concurrency: int, rounds: int
) -> Rounds:
    """The library and the service measured in turn, ``rounds`` times: a change in the machine's load
    lands on both sides rather than on one."""
    await _prepare_service(url, token)
    out: Rounds = {side: {} for side in ("library", *LOADERS)}
    async with _in_process(workers) as library:
        for _ in range(rounds):
            for op, call in library.items():
                side = await _measure(call, calls, concurrency, cpu_reader(os.getpid()))
                out["library"].setdefault(op, []).append(side)
            for kind in LOADERS:
                for op, (method, path, body) in CALLS_BY_OP.items():
                    async with _loader(kind, url, token, concurrency) as prepare:
                        side = await _measure(
                            prepare(method, path, body), calls, concurrency, cpu_reader(pid)
                        )
                    out[kind].setdefault(op, []).append(side)
    return out


def _median(sides: list[Side]) -> Side:
    return Side(*(statistics.median(getattr(s, f.name) for s in sides) for f in fields(Side)))


def _compare(lib: Side, svc: Side, floor: Side, per_round: list[float]) -> dict[str, Any]:
    return {
        "added_sequential_p50_ms_by_round": per_round,
        "library": asdict(lib),
        "service": asdict(svc),
        "added_sequential_p50_ms": round(svc.sequential_p50_ms - lib.sequential_p50_ms, 3),
        "added_beyond_client_floor_p50_ms": round(
            svc.sequential_p50_ms - floor.sequential_p50_ms - lib.sequential_p50_ms, 3
        ),
        "added_concurrent_p50_ms": round(svc.concurrent_p50_ms - lib.concurrent_p50_ms, 3),
        "throughput_ratio": round(svc.throughput / lib.throughput, 3),
        "added_cpu_ms_per_call": round(svc.cpu_ms_per_call - lib.cpu_ms_per_call, 3),
        "added_sequential_cpu_ms_per_call": round(
            svc.sequential_cpu_ms_per_call - lib.sequential_cpu_ms_per_call, 3
        ),
    }


def run_benchmark(workers: int, calls: int, concurrency: int, rounds: int = 3) -> dict[str, Any]:
    """Both sides in turn, then per load generator the medians of the rounds: the service's added p50,
    CPU and relative throughput (and the added p50 of each round, to show the spread)."""
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="rhaipool-bench-serve-") as tmp:
        process, url, token = _start_service(Path(tmp), workers)
        try:
            measured = asyncio.run(_rounds(workers, url, token, process.pid, calls, concurrency, rounds))
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(60)
    load.append(os.getloadavg()[0])
    report: dict[str, Any] = {"concurrency": concurrency, "calls": calls, "workers": workers}
    report["rounds"], report["load_average"] = rounds, load
    library = {op: _median(sides) for op, sides in measured["library"].items()}
    report["library"] = {op: asdict(side) for op, side in library.items()}
    for kind in LOADERS:
        sides = {op: _median(each) for op, each in measured[kind].items()}
        report[kind] = {"floor": asdict(sides["floor"])}
        for op in ("hook", "inference"):
            per_round = [
                round(svc.sequential_p50_ms - lib.sequential_p50_ms, 3)
                for svc, lib in zip(measured[kind][op], measured["library"][op], strict=True)
            ]
            report[kind][op] = _compare(library[op], sides[op], sides["floor"], per_round)
    return report


def _print(report: dict[str, Any]) -> None:
    n = report["concurrency"]
    print(
        f"{n} concurrent clients, {report['calls']} calls, {report['workers']} workers, medians of "
        f"{report['rounds']} rounds (library and service in turn); "
        f"load {report['load_average'][0]:.2f} → {report['load_average'][1]:.2f}"
    )
    for op, lib in report["library"].items():
        print(
            f"in-process {op:<9} p50 {lib['sequential_p50_ms']:.3f} ms one at a time / "
            f"{lib['concurrent_p50_ms']:.2f} ms at {n}, {lib['throughput']:.0f}/s; CPU per call at {n} "
            f"{lib['cpu_ms_per_call']:.3f} ms coordinator, {lib['workers_cpu_ms_per_call']:.3f} ms workers; "
            f"coordinator CPU one at a time {lib['sequential_cpu_ms_per_call']:.3f} ms"
        )
    for kind in LOADERS:
        floor = report[kind]["floor"]
        print(
            f"[{kind}] floor GET /healthz p50 {floor['sequential_p50_ms']:.3f} ms one at a time, "
            f"{floor['throughput']:.0f}/s at {n}; service CPU {floor['cpu_ms_per_call']:.3f} ms per GET"
        )
        for op in ("hook", "inference"):
            r = report[kind][op]
            svc = r["service"]
            print(
                f"[{kind}] {op:<9} service p50 {svc['sequential_p50_ms']:.3f} / "
                f"{svc['concurrent_p50_ms']:.2f} ms, {svc['throughput']:.0f}/s: added p50 "
                f"{r['added_sequential_p50_ms']:.3f} ms one at a time "
                f"({r['added_beyond_client_floor_p50_ms']:.3f} beyond the floor), "
                f"{r['added_concurrent_p50_ms']:.2f} ms at {n}; throughput x{r['throughput_ratio']:.2f}; "
                f"service CPU {svc['cpu_ms_per_call']:.3f} ms per call at {n} "
                f"(added {r['added_cpu_ms_per_call']:.3f}), "
                f"{svc['sequential_cpu_ms_per_call']:.3f} ms one at a time "
                f"(added {r['added_sequential_cpu_ms_per_call']:.3f}); added p50 by round "
                + ", ".join(f"{v:.3f}" for v in r["added_sequential_p50_ms_by_round"])
            )


def main(argv: list[str] | None = None) -> None:
    """Command-line entry (``rhaipool bench service``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="library and service measured in turn")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = run_benchmark(args.workers, args.calls, args.concurrency, args.rounds)
    if args.json:
        print(json.dumps(report))
    else:
        _print(report)


if __name__ == "__main__":
    main()
