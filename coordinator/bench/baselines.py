"""The HTTP baselines a provider benchmark is compared with, and their health.

``raw``: hand-written HTTP/1.1 over asyncio streams, one keep-alive socket per caller — next to no
client CPU, so it measures the server's ceiling. ``plain httpx``: ``httpx.AsyncClient`` as a careful
user would run it at this concurrency. One client with ``max_connections=256`` is *not* that:
httpcore's pool does work proportional to connections × waiting requests on every request, so a
single pool of 256 spends ~8 ms of CPU per GET here and managed 74 calls/s with a p99 of 12 s.
Small clients of ``CONNECTIONS_PER_CLIENT`` connections each, callers spread over them, keep every
connection alive and cost ~0.6 ms per GET (4 per client: also healthy at 1 024 callers, where
clients of 8 still opened ~29 new connections per 1 000 calls with a p99 of 4.8 s). A baseline
``plain aiohttp``: one ``aiohttp.ClientSession`` whose connector holds as many connections as there
are callers — the transport the pool's egress runs on, so "CPU the pool adds beyond the HTTP request
itself" is measured against it (its pool is one list of idle connections: no sharding needed). A
baseline is reported with its own health (new connections per 1 000 calls, p99 against p50, throughput
against the ceiling, its CPU use) so a ratio against a broken baseline is seen as such.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import httpx

from coordinator.bench.measure import percentile_ms
from coordinator.bench.standin import STATS_PATH

__all__ = [
    "CONNECTIONS_PER_CLIENT",
    "HttpShape",
    "PlainAiohttp",
    "PlainHttpx",
    "RawSockets",
    "Run",
    "drive",
    "health",
]

CONNECTIONS_PER_CLIENT = 4
Call = Callable[[], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class HttpShape:
    """The request every side sends: the one a provider script's ``http_get``/``http_post`` makes."""

    method: str
    path: str  # under the server's base URL (``.../v1``)
    body: bytes | None = None


@dataclass(frozen=True, slots=True)
class Run:
    """One side's latencies at one concurrency."""

    concurrency: int
    calls: int
    seconds: float
    latencies: list[float]

    @property
    def throughput(self) -> float:
        """Calls per second."""
        return self.calls / self.seconds

    @property
    def p50_ms(self) -> float:
        """Median latency."""
        return percentile_ms(self.latencies, 0.5)

    @property
    def p99_ms(self) -> float:
        """99th percentile latency."""
        return percentile_ms(self.latencies, 0.99)


async def drive(one: Call, concurrency: int, calls: int) -> Run:
    """``calls`` calls by ``concurrency`` concurrent callers (each awaits its call, then takes the next)."""
    latencies: list[float] = []
    remaining = iter(range(calls))

    async def caller() -> None:
        for _ in remaining:
            t0 = time.perf_counter()
            await one()
            latencies.append(time.perf_counter() - t0)

    start = time.perf_counter()
    async with asyncio.TaskGroup() as tasks:
        for _ in range(concurrency):
            tasks.create_task(caller())
    return Run(concurrency, calls, time.perf_counter() - start, latencies)


async def server_stats(base_url: str) -> dict[str, int]:
    """The stand-in's counters (accepted connections, requests served)."""
    async with httpx.AsyncClient(timeout=10) as client:
        root = base_url.rsplit("/v1", 1)[0]
        stats: dict[str, int] = (await client.get(root + STATS_PATH)).json()
        return stats


class RawSockets:
    """``async with RawSockets(base_url, shape) as one``: the ceiling client."""

    def __init__(self, base_url: str, shape: HttpShape) -> None:
        host_port = base_url.split("/")[2]
        self._host, port = host_port.rsplit(":", 1)
        self._port = int(port)
        prefix = "/" + base_url.split("/", 3)[3] if base_url.count("/") >= 3 else ""
        body = shape.body or b""
        length = b"Content-Length: %d\r\n" % len(body) if shape.body is not None else b""
        self._request = (
            b"%s %s%s HTTP/1.1\r\nHost: %s\r\n%s\r\n"
            % (shape.method.encode(), prefix.encode(), shape.path.encode(), host_port.encode(), length)
            + body
        )
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def _one(self) -> None:
        if self._idle:
            reader, writer = self._idle.pop()
        else:
            reader, writer = await asyncio.open_connection(self._host, self._port)
        writer.write(self._request)
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        await reader.readexactly(length)
        self._idle.append((reader, writer))

    async def __aenter__(self) -> Call:
        return self._one

    async def __aexit__(self, *exc: object) -> None:
        for _, writer in self._idle:
            writer.close()
        self._idle.clear()


class PlainHttpx:
    """``async with PlainHttpx(base_url, shape, concurrency) as one``: small clients, round-robin."""

    def __init__(
        self, base_url: str, shape: HttpShape, concurrency: int, per_client: int = CONNECTIONS_PER_CLIENT
    ) -> None:
        self._url = base_url + shape.path
        self._shape = shape
        n = max(1, concurrency // per_client)
        limits = httpx.Limits(max_connections=per_client, max_keepalive_connections=per_client)
        self._clients = [httpx.AsyncClient(limits=limits, timeout=120) for _ in range(n)]
        self._turn = 0

    async def _one(self) -> None:
        self._turn = (self._turn + 1) % len(self._clients)
        client = self._clients[self._turn]
        response = await client.request(self._shape.method, self._url, content=self._shape.body)
        response.raise_for_status()

    async def __aenter__(self) -> Call:
        return self._one

    async def __aexit__(self, *exc: object) -> None:
        for client in self._clients:
            await client.aclose()


class PlainAiohttp:
    """``async with PlainAiohttp(base_url, shape, concurrency) as one``: a connection per caller."""

    def __init__(self, base_url: str, shape: HttpShape, concurrency: int) -> None:
        self._url = base_url + shape.path
        self._shape = shape
        self._concurrency = concurrency
        self._session: aiohttp.ClientSession | None = None

    async def _one(self) -> None:
        assert self._session is not None
        async with self._session.request(self._shape.method, self._url, data=self._shape.body) as response:
            await response.read()
            response.raise_for_status()

    async def __aenter__(self) -> Call:
        connector = aiohttp.TCPConnector(limit=self._concurrency, limit_per_host=0)
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=120), trust_env=False
        )
        return self._one

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()


def health(run: Run, new_connections: int, cpu_seconds: float, ceiling: float | None) -> dict[str, Any]:
    """The figures that say whether a baseline is healthy, and the verdict with its reasons."""
    per_1000 = new_connections * 1000 / run.calls
    busy = cpu_seconds / run.seconds
    reasons = []
    if per_1000 > 10:
        reasons.append(f"opens {per_1000:.0f} connections per 1 000 calls")
    if run.p99_ms > 3 * run.p50_ms:
        reasons.append(f"p99 {run.p99_ms:.0f} ms > 3 x p50 {run.p50_ms:.0f} ms")
    near_ceiling = ceiling is None or run.throughput >= 0.8 * ceiling
    if not near_ceiling and busy < 0.5:  # neither at the server's pace nor busy with its own work
        reasons.append(f"below the ceiling yet only {busy:.0%} of a core busy: waiting on something")
    return {
        "new_connections_per_1000": per_1000,
        "cpu_ms_per_call": cpu_seconds / run.calls * 1000,
        "cpu_busy": busy,
        "of_ceiling": None if ceiling is None else run.throughput / ceiling,
        "healthy": not reasons,
        "why_not": reasons,
    }


def json_body(value: Any) -> bytes:
    """A request body as the scripts' ``to_json`` would send it."""
    return json.dumps(value).encode()
