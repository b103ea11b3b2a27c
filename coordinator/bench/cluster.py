"""Several ``rhaipool serve`` coordinators over one PostgreSQL database behind HAProxy, on 127.0.0.1.

What ``rhaipool bench coordinators`` measures and what the several-coordinators tests drive: every
part real -- the coordinators are processes started here (``python -m coordinator serve``), HAProxy
runs the shipped ``deploy/haproxy/haproxy.cfg`` (its ``server`` lines replaced by the coordinators'
addresses), and the provider's upstream is the stand-in API in a thread, counting the requests it
receives by the text of their last message (:class:`CountingUpstream`), so a request sent twice for one
inference shows. Tenants ``t00``, ``t01``, … each store the seed's groq provider script (the operator's
``groq`` table, granted to all) and a persistent region ``log``.

:class:`TenantLoad` is one tenant's client: writes carry an ``Idempotency-Key`` and are retried until
acknowledged (a retry applies once); an inference is retried only when nothing can have reached the
upstream (a 503 before the call: another coordinator's tenant, no server ready; a refused connection),
otherwise it is lost, never sent twice by the client.

Past 400 lines: the cluster (database, coordinators, balancer, upstream) and the load that checks it
are one harness, shared by the bench and the tests, so both drive exactly the same parts.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from coordinator.bench.measure import free_port
from coordinator.bench.standin import Request, StandinServer

__all__ = [
    "ADMIN_TOKEN",
    "GROQ_SCRIPT",
    "HAPROXY_CONFIG",
    "Cluster",
    "Coordinator",
    "CountingUpstream",
    "TenantLoad",
    "haproxy_config",
    "tenant_token",
]

ROOT = Path(__file__).resolve().parents[2]
HAPROXY_CONFIG = ROOT / "deploy" / "haproxy" / "haproxy.cfg"
GROQ_SCRIPT = ROOT / "examples" / "providers" / "groq.rhai"
ADMIN_TOKEN = "cluster-admin-token"
HOOK = "fn render(ctx) { `${ctx.entries.len()}` }"
_SERVER_LINE = re.compile(r"^\s*server \S+ .*$", re.MULTILINE)


def tenant_token(tenant: str) -> str:
    """The bearer token of tenant ``tenant`` in the cluster's config."""
    return f"token-of-{tenant}"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class CountingUpstream(StandinServer):
    """The stand-in API, counting chat completions by their last message's text (the call's id)."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()

    def __enter__(self) -> CountingUpstream:
        self.start()
        return self

    def record(self, request: Request) -> None:
        """Count the request by its id, then keep it as the stand-in does."""
        body = request.json() if request.path.endswith("/chat/completions") else None
        if isinstance(body, dict) and body.get("messages"):
            last = body["messages"][-1]
            if isinstance(last, dict) and isinstance(last.get("content"), str):
                with self._lock:
                    self.counts[last["content"]] += 1
        super().record(request)


def haproxy_config(listen: str, backends: list[str]) -> str:
    """The shipped HAProxy configuration with its ``server`` lines for these backends (host:port)."""
    shipped = HAPROXY_CONFIG.read_text()
    if not _SERVER_LINE.search(shipped):
        raise RuntimeError(f"{HAPROXY_CONFIG}: no server line to replace")
    servers = "\n".join(f"    server coordinator-{i + 1} {b}" for i, b in enumerate(backends))
    first = True

    def one(_match: re.Match[str]) -> str:
        nonlocal first
        text, first = (servers if first else ""), False
        return text

    text = _SERVER_LINE.sub(one, shipped)
    return re.sub(r"\n{3,}", "\n\n", text).replace('"${RHAIPOOL_LISTEN}"', listen)


@dataclass
class Coordinator:
    """One ``rhaipool serve`` process of the cluster."""

    index: int
    port: int
    folder: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return -1 if self.process is None else self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log(self) -> str:
        path = self.folder / "service.log"
        return path.read_text(errors="replace") if path.exists() else ""


@dataclass
class Cluster:
    """``slots`` coordinator places behind one HAProxy (those not started are down to its checks)."""

    folder: Path
    database_url: str
    upstream_url: str
    tenants: list[str]
    slots: int = 3
    lease_secs: float = 2.0
    workers: int = 1
    coordinators: list[Coordinator] = field(default_factory=list)
    haproxy: subprocess.Popen[bytes] | None = None
    haproxy_port: int = 0

    @property
    def url(self) -> str:
        """The balancer's address: what clients use."""
        return f"http://127.0.0.1:{self.haproxy_port}"

    def config_text(self, port: int) -> str:
        lines = [
            "[serve]",
            f'listen = "127.0.0.1:{port}"',
            f'database = "{self.database_url}"',
            f"lease_secs = {self.lease_secs}",
            f'admin_token_sha256 = "{_sha(ADMIN_TOKEN)}"',
            f"workers = {self.workers}",
            "grace_secs = 3",
        ]
        for tenant in self.tenants:
            lines += [f"[tenants.{tenant}]", f'token_sha256 = "{_sha(tenant_token(tenant))}"']
            lines.append('providers = ["groq"]')
        lines += [
            "[model_providers.groq]",
            'api_key = "test-key"',
            f'base_url = "{self.upstream_url}"',
            'egress_allow = ["127.0.0.1"]',
        ]
        return "\n".join(lines) + "\n"

    def __post_init__(self) -> None:
        for i in range(self.slots):
            folder = self.folder / f"c{i}"
            folder.mkdir(parents=True, exist_ok=True)
            self.coordinators.append(Coordinator(i, free_port(), folder))

    def start(self, index: int, *, wait: float = 90.0) -> Coordinator:
        """Start coordinator ``index`` and wait until it is ready."""
        c = self.coordinators[index]
        config = c.folder / "serve.toml"
        config.write_text(self.config_text(c.port))
        with (c.folder / "service.log").open("ab") as log:
            c.process = subprocess.Popen(
                [sys.executable, "-m", "coordinator", "serve", "--config", str(config), "--log-json"],
                stdout=log, stderr=log, cwd=c.folder, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if c.process.poll() is not None:
                raise RuntimeError(f"coordinator {index} exited: {c.log()[-2000:]}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(c.url + "/readyz", timeout=1.0).status_code == 200:
                    return c
            time.sleep(0.05)
        raise RuntimeError(f"coordinator {index} not ready within {wait} s: {c.log()[-2000:]}")

    def start_haproxy(self) -> None:
        """HAProxy with the shipped configuration over every slot."""
        self.haproxy_port = free_port()
        path = self.folder / "haproxy.cfg"
        path.write_text(
            haproxy_config(
                f"127.0.0.1:{self.haproxy_port}", [f"127.0.0.1:{c.port}" for c in self.coordinators]
            )
        )
        with (self.folder / "haproxy.log").open("ab") as log:
            self.haproxy = subprocess.Popen(["haproxy", "-db", "-f", str(path)], stdout=log, stderr=log)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.haproxy.poll() is not None:
                raise RuntimeError(f"haproxy exited: {(self.folder / 'haproxy.log').read_text()[-2000:]}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(self.url + "/readyz", timeout=1.0).status_code == 200:
                    return
            time.sleep(0.1)
        raise RuntimeError("haproxy routes to no ready coordinator within 20 s")

    def kill9(self, index: int) -> None:
        """``kill -9`` coordinator ``index`` (its workers follow it: they die with their parent)."""
        c = self.coordinators[index]
        if c.process is not None and c.process.poll() is None:
            c.process.send_signal(signal.SIGKILL)
            c.process.wait(30)

    def stop(self) -> None:
        """Stop everything started (coordinators by SIGTERM, then SIGKILL if they linger; HAProxy)."""
        for c in self.coordinators:
            if c.process is not None and c.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    c.process.send_signal(signal.SIGCONT)
                c.process.terminate()
        for c in self.coordinators:
            if c.process is not None:
                try:
                    c.process.wait(30)
                except subprocess.TimeoutExpired:
                    c.process.kill()
                    c.process.wait(10)
        if self.haproxy is not None and self.haproxy.poll() is None:
            self.haproxy.terminate()
            self.haproxy.wait(10)

    def setup_tenants(self, url: str | None = None) -> None:
        """Each tenant's provider script and persistent region, through the balancer (or ``url``)."""
        script = GROQ_SCRIPT.read_text()
        for tenant in self.tenants:
            headers = {"Authorization": f"Bearer {tenant_token(tenant)}"}
            with httpx.Client(base_url=url or self.url, headers=headers, timeout=30) as http:
                for method, path, body in (
                    ("PUT", "/api/scripts/provider/groq", {"content": script}),
                    ("PUT", "/api/scripts/region_hook/log", {"content": HOOK}),
                    (
                        "POST",
                        "/api/regions",
                        {"name": "log", "script": "log", "budget": 10**7, "persistent": True},
                    ),
                ):
                    _until_ok(lambda m=method, p=path, b=body: http.request(m, p, json=b))

    def owners(self) -> dict[str, int]:
        """Which coordinator (index) holds each tenant's unexpired lease, from the database."""
        import psycopg

        by_pid = {str(c.pid): c.index for c in self.coordinators if c.process is not None}
        with psycopg.connect(self.database_url, autocommit=True) as db:
            rows = db.execute(
                "SELECT tenant, owner FROM leases WHERE expires_at > extract(epoch from clock_timestamp())"
            ).fetchall()
        found = {}
        for tenant, owner in rows:
            pid = str(owner).split("/")[1] if str(owner).count("/") >= 2 else ""
            if pid in by_pid:
                found[str(tenant)] = by_pid[pid]
        return found


def _until_ok(send: Any, timeout: float = 60.0) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        try:
            response: httpx.Response = send()
        except httpx.TransportError:
            response = httpx.Response(599)
        if response.status_code < 300 or response.status_code == 409:
            return response
        if (
            response.status_code < 500 and response.status_code not in (429, 599)
        ) or time.monotonic() > deadline:
            raise RuntimeError(f"no success within {timeout} s: {response.status_code} {response.text[:300]}")
        time.sleep(0.1)


@dataclass
class TenantLoad:
    """One tenant's steady load through the balancer: a write, then an inference, again and again."""

    url: str
    tenant: str
    acked_writes: list[str] = field(default_factory=list)
    maybe_writes: list[str] = field(default_factory=list)
    acked_inferences: list[str] = field(default_factory=list)
    lost_inferences: list[str] = field(default_factory=list)
    successes: list[float] = field(default_factory=list)
    """The monotonic time of every acknowledged call."""
    failures: list[str] = field(default_factory=list)
    """Calls that ended without an answer the client could use (status and why)."""
    inferences: bool = True
    first: int = 0
    """The number of the first write (``<tenant>-w<n>``): another load of the same tenant starts past
    the last one's, so that every write's text stays unique."""

    async def run(self, stop: asyncio.Event) -> None:
        headers = {"Authorization": f"Bearer {tenant_token(self.tenant)}"}
        limits = httpx.Limits(max_connections=2)
        async with httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30, limits=limits) as http:
            n = self.first
            while not stop.is_set():
                await self._write(http, f"{self.tenant}-w{n}")
                if self.inferences:
                    await self._infer(http, f"{self.tenant}-i{n}-{uuid.uuid4().hex[:6]}")
                n += 1

    async def _write(self, http: httpx.AsyncClient, content: str) -> None:
        key = {"Idempotency-Key": uuid.uuid4().hex}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                r = await http.post(
                    "/api/regions/log/write", json={"content": content, "tokens": 1}, headers=key
                )
            except httpx.TransportError:
                await asyncio.sleep(0.05)
                continue
            if r.status_code == 200:
                self.acked_writes.append(content)
                self.successes.append(time.monotonic())
                return
            if r.status_code == 409 and "may or may not have applied" in r.text:
                # cut short where the answer was lost (a coordinator died or lost its database
                # mid-commit): look, then write again under a new key if it is not there
                present = await self._present(http, content)
                if present is None:
                    break
                if present:
                    self.acked_writes.append(content)
                    self.successes.append(time.monotonic())
                    return
                key = {"Idempotency-Key": uuid.uuid4().hex}
                continue
            if r.status_code not in (502, 503, 504):
                self.failures.append(f"write {content}: {r.status_code} {r.text[:200]}")
                self.maybe_writes.append(content)
                return
            await asyncio.sleep(0.05)
        self.failures.append(f"write {content}: not acknowledged within 30 s")
        self.maybe_writes.append(content)

    async def _present(self, http: httpx.AsyncClient, content: str) -> bool | None:
        """Whether the region holds ``content``; None when it could not be read within 30 s."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.TransportError):
                r = await http.get("/api/regions/log")
                if r.status_code == 200:
                    return content in [e["content"] for e in r.json()["entries"]]
            await asyncio.sleep(0.05)
        return None

    async def _infer(self, http: httpx.AsyncClient, text: str) -> None:
        body = {"model": "standin-small", "messages": [{"role": "user", "content": text}]}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                r = await http.post("/api/providers/groq/inference", json=body)
            except httpx.ConnectError:
                await asyncio.sleep(0.05)  # never reached a coordinator
                continue
            except httpx.TransportError as exc:
                self.lost_inferences.append(text)
                self.failures.append(f"inference {text}: {type(exc).__name__}")
                return
            if r.status_code == 200:
                self.acked_inferences.append(text)
                self.successes.append(time.monotonic())
                return
            if r.status_code == 503 and _refused_before_calling(r):
                await asyncio.sleep(0.05)
                continue
            self.lost_inferences.append(text)
            self.failures.append(f"inference {text}: {r.status_code} {r.text[:200]}")
            return
        self.lost_inferences.append(text)
        self.failures.append(f"inference {text}: not answered within 30 s")

    def first_success_after(self, moment: float) -> float | None:
        later = [t for t in self.successes if t >= moment]
        return min(later) if later else None


def _refused_before_calling(response: httpx.Response) -> bool:
    """A 503 that says nothing was called: another coordinator's tenant, the database out of reach, a
    or the balancer with no server ready (HAProxy's own page)."""
    text = response.text
    return (
        "served by another coordinator" in text
        or "nothing changed" in text
        or "No server is available" in text
    )


def run_loads(loads: list[TenantLoad], seconds: float, during: Any = None) -> None:
    """Run every tenant's load for ``seconds`` while ``during()`` (a blocking function) runs in a thread."""

    async def main() -> None:
        stop = asyncio.Event()
        tasks = [asyncio.create_task(load.run(stop)) for load in loads]
        side = None
        if during is not None:
            side = asyncio.get_running_loop().run_in_executor(None, during)
        await asyncio.sleep(seconds)
        if side is not None:
            await side
        stop.set()
        await asyncio.gather(*tasks)

    asyncio.run(main())
