"""Benchmark (not a test): the most tenants, regions and scripts one rhaipool serve holds within its bounds.

Issue 22's capacity figure, on this machine.

A real service is started with small per-tenant quotas (``max_regions``, ``max_scripts``). API tenants
are added in steps through the admin API (``PUT /api/admin/tenants/{id}``); each stores its quota of
scripts and opens its quota of regions, a few of them persistent with a few entries. After each step:
the coordinator's RSS (the serve process and its workers apart), its descriptors, the database (with
its WAL), the time the step took, whether one region past the quota is refused, and a quiet tenant B's
render p50/p99 against B's baseline of the same run (step 0). The run stops at the first step that
crosses a bound: the memory ceiling, B's p99 over max(3× baseline, baseline + 250 ms), or any refusal
of a request within the quotas. The largest step reached is then restarted: time to ready, and B's
data (and the last tenant's) intact. Run with::

    rhaipool bench tenants --service --capacity [--max-tenants 3000] [--max-rss-mib 1024] [--json]

Past 400 lines: a benchmark with its own service set-up, step driver, measurement and report.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

from coordinator.bench.measure import free_port, load_average, percentile_ms
from coordinator.errors import ServiceFamilyError
from coordinator.service.auth import token_sha256

__all__ = ["main", "run_benchmark"]

ADMIN_TOKEN = "bench-capacity-admin"
QUIET_TOKEN = "bench-capacity-quiet"
MIB = 1 << 20
STEPS = (10, 100, 1000, 3000)
KINDS = ("tenant", "script", "region", "write")
"""The requests that fill a tenant: its admin PUT, script PUTs, region opens, persistent writes."""
B_HOOK = 'fn render(ctx) { ctx.entries.map(|e| e.content).reduce(|a, b| a + "|" + b, "") }'
SERVE = """
header_timeout_secs = 5
idle_timeout_secs = 30
max_connections_per_address = 512
"""


def _tenant_token(i: int) -> str:
    return f"bench-capacity-tenant-{i}"


@dataclass(frozen=True)
class Shape:
    """What each API tenant holds: its quotas, filled."""

    max_regions: int = 5
    max_scripts: int = 3
    persistent: int = 2
    entries: int = 3


class _NotServed(ServiceFamilyError):
    """A request within the quotas was not answered 2xx (or not answered at all); caught where it
    ends the benchmark's step."""


class Service:
    """One ``rhaipool serve`` process on a config of this run, stopped and started again on demand."""

    def __init__(self, folder: Path, workers: int, shape: Shape) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.database = folder / "capacity.db"
        (folder / "serve.toml").write_text(
            f'[serve]\nlisten = "127.0.0.1:{self.port}"\ndatabase = "{self.database.name}"\n'
            f'admin_token_sha256 = "{token_sha256(ADMIN_TOKEN)}"\n'
            f"workers = {workers}\ngrace_secs = 5\n{SERVE}"
            f"[serve.tenant_defaults]\nmax_regions = {shape.max_regions}\nmax_scripts = {shape.max_scripts}\n"
            f'[tenants.b]\ntoken_sha256 = "{token_sha256(QUIET_TOKEN)}"\n'
        )
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        """Start and wait for ``/readyz``; the seconds it took."""
        started = time.perf_counter()
        with (self.folder / "service.log").open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "coordinator", "serve", "--config", str(self.folder / "serve.toml"),
                 "--log-json"],
                stdout=log, stderr=log, cwd=self.folder,
            )  # fmt: skip
        while time.perf_counter() - started < 300:
            if self.process.poll() is not None:
                raise RuntimeError(f"rhaipool serve exited {self.process.returncode}: {self._log_tail()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=2.0).status_code == 200:
                    return time.perf_counter() - started
            except httpx.TransportError:
                pass
            time.sleep(0.02)
        self.process.kill()
        raise RuntimeError("rhaipool serve did not become ready within 300 s")

    def stop(self) -> float:
        """SIGTERM and wait (workers included); the seconds it took."""
        assert self.process is not None
        started = time.perf_counter()
        children = psutil.Process(self.process.pid).children(recursive=True)
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(120)
        _gone, alive = psutil.wait_procs(children, timeout=10)
        for child in alive:
            child.kill()
        return time.perf_counter() - started

    def usage(self) -> dict[str, float]:
        """RSS of the serve process and of its workers (MiB), its descriptors, database + WAL (MiB)."""
        assert self.process is not None
        serve = psutil.Process(self.process.pid)
        workers = 0
        for child in serve.children(recursive=True):
            try:
                workers += child.memory_info().rss
            except psutil.Error:
                pass
        disk = sum(p.stat().st_size for p in self.folder.glob(self.database.name + "*") if p.is_file())
        return {
            "serve_rss_mib": serve.memory_info().rss / MIB,
            "workers_rss_mib": workers / MIB,
            "fds": serve.num_fds(),
            "database_mib": disk / MIB,
        }

    def _log_tail(self) -> str:
        return (self.folder / "service.log").read_text(errors="replace")[-2000:]


def _must(response: httpx.Response, what: str) -> httpx.Response:
    if response.status_code >= 300:
        raise _NotServed(f"{what}: {response.status_code} {response.text[:200]}")
    return response


class Filler:
    """Adds API tenants and fills their quotas, from a few threads (each with its own connections)."""

    def __init__(self, url: str, shape: Shape, concurrency: int) -> None:
        self.url = url
        self.shape = shape
        self.concurrency = concurrency
        self.local = threading.local()
        self.latencies: dict[str, list[float]] = {kind: [] for kind in KINDS}

    def _client(self) -> httpx.Client:
        client: httpx.Client | None = getattr(self.local, "client", None)
        if client is None:
            client = self.local.client = httpx.Client(base_url=self.url, timeout=120.0)
        return client

    def _send(self, kind: str, method: str, path: str, body: dict[str, Any], token: str) -> None:
        started = time.perf_counter()
        response = self._client().request(
            method, path, json=body, headers={"Authorization": f"Bearer {token}"}
        )
        self.latencies[kind].append(time.perf_counter() - started)  # list.append holds under threads
        _must(response, f"{kind} {method} {path}")

    def add(self, i: int) -> None:
        """Tenant ``t{i}``: added, its scripts stored, its regions opened, its persistent ones written."""
        token = _tenant_token(i)
        self._send(
            "tenant", "PUT", f"/api/admin/tenants/t{i}", {"token_sha256": token_sha256(token)}, ADMIN_TOKEN
        )
        shape = self.shape
        for s in range(shape.max_scripts):
            hook = {"content": f"// tenant {i} script {s}\n{B_HOOK}"}
            self._send("script", "PUT", f"/api/scripts/region_hook/s{s}", hook, token)
        for r in range(shape.max_regions):
            persistent = r < shape.persistent
            region = {"name": f"r{r}", "script": f"s{r % shape.max_scripts}", "budget": 1000}
            self._send("region", "POST", "/api/regions", {**region, "persistent": persistent}, token)
            for e in range(shape.entries if persistent else 0):
                entry = {"content": f"t{i} r{r} entry {e}", "tokens": 3}
                self._send("write", "POST", f"/api/regions/r{r}/write", entry, token)

    def fill(self, first: int, last: int) -> dict[str, float]:
        """Tenants ``first`` … ``last - 1``: each kind of request's p50 (ms); :class:`_NotServed` or
        ``httpx.HTTPError`` at the first refusal."""
        self.latencies = {kind: [] for kind in KINDS}
        with ThreadPoolExecutor(self.concurrency) as pool:
            list(pool.map(self.add, range(first, last)))  # re-raises the first refusal
        return {f"{kind}_p50_ms": percentile_ms(self.latencies[kind], 0.5) for kind in KINDS}

    def over_quota_refused(self, i: int) -> bool:
        """One region past tenant ``t{i}``'s quota is refused with a 4xx (the quota holds)."""
        own = {"Authorization": f"Bearer {_tenant_token(i)}"}
        body = {"name": "extra", "script": "s0", "budget": 10}
        return 400 <= self._client().post("/api/regions", json=body, headers=own).status_code < 500

    def tenant_intact(self, i: int) -> bool:
        """Tenant ``t{i}`` still holds its regions and its persistent entries."""
        own = {"Authorization": f"Bearer {_tenant_token(i)}"}
        regions = self._client().get("/api/regions", headers=own).json()["regions"]
        kept = {r["name"]: r["entry_count"] for r in regions if r["persistent"]}
        return len(kept) == self.shape.persistent and all(n == self.shape.entries for n in kept.values())


class Quiet:
    """Tenant B: renders of one persistent region of five entries, one call at a time."""

    def __init__(self, url: str) -> None:
        self.http = httpx.Client(
            base_url=url, timeout=60.0, headers={"Authorization": f"Bearer {QUIET_TOKEN}"}
        )

    def setup(self) -> None:
        """B's script and its region of five entries."""
        _must(self.http.put("/api/scripts/region_hook/journal", json={"content": B_HOOK}), "B script")
        region = {"name": "journal", "script": "journal", "budget": 1000, "persistent": True}
        _must(self.http.post("/api/regions", json=region), "B region")
        for i in range(5):
            _must(
                self.http.post("/api/regions/journal/write", json={"content": f"note {i}", "tokens": 5}), "B"
            )

    def rendered(self) -> Any:
        """B's rendered region (what must survive a restart)."""
        return _must(self.http.post("/api/regions/journal/render", json={}), "B render").json()["system"]

    def measure(self, seconds: float, at_least: int) -> dict[str, Any]:
        latencies: list[float] = []
        failed = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end or len(latencies) < at_least:
            started = time.perf_counter()
            try:
                r = self.http.post("/api/regions/journal/render", json={})
                ok = r.status_code == 200 and r.json()["fallback"] is False
            except httpx.HTTPError:
                ok = False
            latencies.append(time.perf_counter() - started)
            failed += not ok
            time.sleep(0.002)
        listed: list[float] = []
        for _ in range(20):  # B's own listing: it must not cost the other tenants' regions
            started = time.perf_counter()
            self.http.get("/api/regions")
            listed.append(time.perf_counter() - started)
        return {
            "calls": len(latencies),
            "failed": failed,
            "p50_ms": percentile_ms(latencies, 0.5),
            "p99_ms": percentile_ms(latencies, 0.99),
            "list_p50_ms": percentile_ms(listed, 0.5),
        }


def _p99_bound(baseline_p99: float) -> float:
    return max(3 * baseline_p99, baseline_p99 + 250.0)


def run_benchmark(
    *,
    steps: tuple[int, ...],
    max_rss_mib: float,
    seconds: float,
    workers: int,
    concurrency: int,
    shape: Shape,
) -> dict[str, Any]:
    """Step 0 (B alone) then each step in turn until a bound is crossed; then a restart at the last."""
    with tempfile.TemporaryDirectory(prefix="rhaipool-capacity-") as tmp:
        service = Service(Path(tmp), workers, shape)
        first_ready = service.start()
        rows: list[dict[str, Any]] = []
        stopped_by: str | None = None
        restart: dict[str, Any] = {}
        try:
            quiet = Quiet(service.url)
            quiet.setup()
            quiet.measure(1.0, at_least=30)  # warm: B's script compiled, its connection open
            baseline = quiet.measure(seconds, at_least=100)
            rows.append({"tenants": 0, "create_secs": 0.0, "quota_held": None, **service.usage(), **baseline})
            bound = _p99_bound(baseline["p99_ms"])
            filler = Filler(service.url, shape, concurrency)
            have = 0
            for target in steps:
                started = time.perf_counter()
                try:
                    requests = filler.fill(have, target)
                except (_NotServed, httpx.HTTPError) as exc:
                    stopped_by = f"refusal at step {target}: {type(exc).__name__}: {exc}"
                    break
                created = time.perf_counter() - started
                have = target
                usage = service.usage()
                figures = quiet.measure(seconds, at_least=100)
                held = filler.over_quota_refused(target - 1)
                rows.append(
                    {
                        "tenants": target,
                        "create_secs": created,
                        "quota_held": held,
                        **requests,
                        **usage,
                        **figures,
                    }
                )
                rss = usage["serve_rss_mib"] + usage["workers_rss_mib"]
                print(  # progress, so a long run that is cut short still says how far it got
                    f"step {target} tenants: created in {created:.1f} s, "
                    f"serve {usage['serve_rss_mib']:.0f} MiB, workers {usage['workers_rss_mib']:.0f} MiB, "
                    f"db {usage['database_mib']:.1f} MiB, "
                    f"B p99 {figures['p99_ms']:.1f} ms (bound {bound:.0f}), quota held {held}, "
                    f"load {load_average():.1f}",
                    file=sys.stderr,
                    flush=True,
                )
                if rss > max_rss_mib:
                    stopped_by = f"memory: {rss:.0f} MiB > {max_rss_mib:.0f} MiB at {target} tenants"
                elif figures["p99_ms"] > bound:
                    stopped_by = f"B's p99 {figures['p99_ms']:.0f} ms > {bound:.0f} ms at {target} tenants"
                elif figures["failed"]:
                    stopped_by = f"B failed {figures['failed']} calls at {target} tenants"
                if stopped_by:
                    break
            before = quiet.rendered()
            quiet.http.close()
            stop_secs = service.stop()
            ready_secs = service.start()
            quiet = Quiet(service.url)
            filler = Filler(service.url, shape, concurrency)
            restart = {
                "tenants": have,
                "stop_secs": stop_secs,
                "ready_secs": ready_secs,
                "b_intact": quiet.rendered() == before,
                "last_tenant_intact": filler.tenant_intact(have - 1) if have else None,
                **service.usage(),
                **quiet.measure(seconds, at_least=100),
            }
            quiet.http.close()
        finally:
            if service.process is not None and service.process.poll() is None:
                service.stop()
    return {
        "workers": workers,
        "load_average": load_average(),
        "shape": {
            "max_regions": shape.max_regions, "max_scripts": shape.max_scripts,
            "persistent": shape.persistent, "entries": shape.entries,
        },
        "first_ready_secs": first_ready,
        "max_rss_mib": max_rss_mib,
        "p99_bound_ms": bound,
        "steps": rows,
        "stopped_by": stopped_by,
        "restart": restart,
    }  # fmt: skip


def _print(report: dict[str, Any]) -> None:
    shape = report["shape"]
    print(
        f"each tenant: {shape['max_scripts']} scripts, {shape['max_regions']} regions "
        f"({shape['persistent']} persistent × {shape['entries']} entries); {report['workers']} workers, "
        f"load average {report['load_average']:.1f}; bounds: RSS {report['max_rss_mib']:.0f} MiB, "
        f"B's p99 {report['p99_bound_ms']:.0f} ms"
    )
    base = report["steps"][0]
    print(
        f"{'tenants':>7} {'regions':>7} {'create s':>8} {'serve MiB':>9} {'workers MiB':>11} {'fds':>5} "
        f"{'db MiB':>7} {'B p50 ms':>8} {'x':>5} {'B p99 ms':>8} {'x':>5} {'B list ms':>9} {'quota':>5}"
    )
    for row in report["steps"]:
        quota = {None: "-", True: "held", False: "NOT"}[row["quota_held"]]
        print(
            f"{row['tenants']:7d} {row['tenants'] * shape['max_regions']:7d} {row['create_secs']:8.1f} "
            f"{row['serve_rss_mib']:9.0f} {row['workers_rss_mib']:11.0f} {row['fds']:5d} "
            f"{row['database_mib']:7.1f} {row['p50_ms']:8.1f} {row['p50_ms'] / base['p50_ms']:5.2f} "
            f"{row['p99_ms']:8.1f} {row['p99_ms'] / base['p99_ms']:5.2f} {row['list_p50_ms']:9.1f} {quota:>5}"
        )
    print("each step's requests, p50 ms: " + "; ".join(
        f"{row['tenants']} tenants: " + ", ".join(f"{k} {row[k + '_p50_ms']:.1f}" for k in KINDS)
        for row in report["steps"][1:]
    ))  # fmt: skip
    print(f"stopped by: {report['stopped_by'] or 'nothing (every step within its bounds)'}")
    r = report["restart"]
    if r:
        print(
            f"restart at {r['tenants']} tenants: stop {r['stop_secs']:.1f} s, ready {r['ready_secs']:.1f} s "
            f"(first start {report['first_ready_secs']:.1f} s); B intact: {r['b_intact']}, last tenant "
            f"intact: {r['last_tenant_intact']}; serve {r['serve_rss_mib']:.0f} MiB, "
            f"db {r['database_mib']:.1f} MiB;\n  B p50 {r['p50_ms']:.1f} ms "
            f"(x{r['p50_ms'] / base['p50_ms']:.2f}), "
            f"p99 {r['p99_ms']:.1f} ms (x{r['p99_ms'] / base['p99_ms']:.2f})"
        )


def main(argv: list[str] | None = None) -> None:
    """Command-line entry (``rhaipool bench tenants --service --capacity``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", action="store_true", help=argparse.SUPPRESS)  # how the CLI names it
    parser.add_argument("--steps", default=",".join(map(str, STEPS)), help="tenant counts, comma-separated")
    parser.add_argument("--max-tenants", type=int, default=None, help="cap the steps at this many tenants")
    parser.add_argument("--max-rss-mib", type=float, default=1024.0, help="serve + workers RSS ceiling")
    parser.add_argument("--seconds", type=float, default=2.0, help="B's measurement at each step")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=4, help="threads adding tenants")
    parser.add_argument("--max-regions", type=int, default=Shape.max_regions)
    parser.add_argument("--max-scripts", type=int, default=Shape.max_scripts)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    steps = tuple(sorted({int(s) for s in args.steps.split(",") if s.strip()}))
    if args.max_tenants is not None:
        steps = (*(s for s in steps if s < args.max_tenants), args.max_tenants)
    shape = Shape(
        max_regions=args.max_regions,
        max_scripts=args.max_scripts,
        persistent=min(Shape.persistent, args.max_regions),
    )
    report = run_benchmark(
        steps=steps,
        max_rss_mib=args.max_rss_mib,
        seconds=args.seconds,
        workers=args.workers,
        concurrency=args.concurrency,
        shape=shape,
    )
    if args.json:
        print(json.dumps(report))
    else:
        _print(report)


if __name__ == "__main__":
    main()
