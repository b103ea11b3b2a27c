"""Benchmark: one, two and three coordinators over one PostgreSQL database behind HAProxy, and failover.

Every part real (coordinator/bench/cluster.py): ``rhaipool serve`` processes, the shipped HAProxy
configuration, a PostgreSQL server (``--database URL``, or one started here with ``initdb`` in a
temporary folder when the Debian package is installed), the stand-in API as the provider's upstream.
20 tenants each run a steady loop of a persistent-region write and an inference through the
balancer. Reported per row: calls answered per second, and CPU per call of the coordinator processes
(their workers apart) and of their workers; the baseline row is one coordinator on its SQLite file (no
lease, no fencing), so the difference is what sharing the database costs a call. The coordination's
own cost is also measured on its own: the CPU an idle coordinator spends renewing leases and reading
the membership, per second and per lease. Failover: ``--kills`` times, the coordinator holding the most
tenants is ``kill -9``ed under the load and restarted; for each of its tenants, the time from the kill
to its next answered call (p50/p99 over every kill).

    rhaipool bench coordinators [--seconds 10] [--kills 10] [--lease 2] [--database URL] [--json]

On a small machine the load generator, HAProxy, PostgreSQL and the coordinators share the cores: the
throughput then measures the machine, the CPU per call stays the steadier figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from coordinator.bench.cluster import Cluster, CountingUpstream, TenantLoad, run_loads
from coordinator.bench.measure import cpu_seconds, load_average, percentile_ms
from coordinator.bench.postgres import fresh_database, throwaway_postgres

__all__ = ["Row", "main"]

TENANTS = [f"t{i:02d}" for i in range(20)]


@dataclass(frozen=True, slots=True)
class Row:
    """One configuration's figures."""

    name: str
    coordinators: int
    calls_per_second: float
    coordinator_cpu_ms_per_call: float
    worker_cpu_ms_per_call: float
    failed_calls: int
    db_transactions_per_write: float | None
    """PostgreSQL's committed transactions per acknowledged write (renewals and reads included)."""


def _cpu(cluster: Cluster) -> tuple[float, float]:
    """CPU seconds so far of the live coordinators' own processes, and of their workers."""
    own = workers = 0.0
    for c in cluster.coordinators:
        if not c.alive():
            continue
        own += cpu_seconds(c.pid)
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(c.pid).children(recursive=True):
                workers += cpu_seconds(child.pid)
    return own, workers


def _measure(name: str, cluster: Cluster, count: int, seconds: float) -> Row:
    for i in range(count):
        cluster.start(i)
    cluster.start_haproxy()
    cluster.setup_tenants()
    run_loads([TenantLoad(cluster.url, t) for t in TENANTS], 2.0)  # warm: scripts compiled, leases taken
    loads = [TenantLoad(cluster.url, t) for t in TENANTS]
    commits0 = _commits(cluster.database_url)
    own0, work0 = _cpu(cluster)
    began = time.monotonic()
    run_loads(loads, seconds)
    elapsed = time.monotonic() - began
    own1, work1 = _cpu(cluster)
    commits1 = _commits(cluster.database_url)
    writes = sum(len(load.acked_writes) for load in loads)
    calls = sum(len(load.acked_writes) + len(load.acked_inferences) for load in loads)
    failed = sum(len(load.failures) for load in loads)
    return Row(
        name,
        count,
        calls / elapsed,
        (own1 - own0) / max(calls, 1) * 1000,
        (work1 - work0) / max(calls, 1) * 1000,
        failed,
        None if commits0 is None or commits1 is None else (commits1 - commits0) / max(writes, 1),
    )


def _commits(url: str) -> int | None:
    """Transactions committed in the database so far (PostgreSQL's statistics), or None (SQLite)."""
    if not url.startswith("postgresql://"):
        return None
    import psycopg

    with psycopg.connect(url, autocommit=True) as db:
        db.execute("SELECT pg_stat_force_next_flush()")
        row = db.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    return None if row is None else int(row[0])


def _idle_coordination(cluster: Cluster, seconds: float) -> dict[str, float]:
    """An idle coordinator holding 20 leases: its CPU per second (renewals, membership, token table)."""
    held = len([t for t, i in cluster.owners().items() if i == 0])
    before = cpu_seconds(cluster.coordinators[0].pid)
    time.sleep(seconds)
    spent = cpu_seconds(cluster.coordinators[0].pid) - before
    return {"leases_held": held, "cpu_ms_per_second": spent / seconds * 1000}


def _failover(cluster: Cluster, kills: int) -> list[float]:
    """Seconds from each kill to each of the dead coordinator's tenants' next answered call."""
    gaps: list[float] = []
    for _ in range(kills):
        owners = cluster.owners()
        counts = {i: list(owners.values()).count(i) for i in range(cluster.slots)}
        victim = max(counts, key=lambda i: counts[i])
        dead = [t for t, i in owners.items() if i == victim]
        loads = [TenantLoad(cluster.url, t, inferences=False) for t in TENANTS]
        moment: dict[str, float] = {}

        def kill(victim: int = victim, moment: dict[str, float] = moment) -> None:
            time.sleep(1.0)
            moment["at"] = time.monotonic()
            cluster.kill9(victim)
            time.sleep(cluster.lease_secs + 3.0)

        run_loads(loads, 0.5, during=kill)
        for load in loads:
            if load.tenant in dead:
                back = load.first_success_after(moment["at"])
                gaps.append(float("inf") if back is None else back - moment["at"])
        cluster.start(victim)
    return gaps


def _fence_cost(url: str, writes: int = 1500) -> dict[str, float]:
    """CPU per write of one statement through :class:`Storage` on PostgreSQL, unfenced (one coordinator's
    semantics, no lease) and fenced (the lease's epoch checked in the same transaction): what the
    coordination adds to each durable write, measured in this process."""
    from coordinator.service.storage import Storage

    async def per_write(storage: Storage) -> float:
        began = time.process_time()
        for i in range(writes):
            await storage.put_script("bench", "region_hook", f"s{i % 50}", f"// {i}")
        return (time.process_time() - began) / writes * 1000

    async def both() -> dict[str, float]:
        plain = Storage(fresh_database(url))
        fenced = Storage(fresh_database(url), owner="bench-coordinator")
        try:
            await fenced.acquire("bench")
            a, b = await per_write(plain), await per_write(fenced)
            a, b = min(a, await per_write(plain)), min(b, await per_write(fenced))
        finally:
            plain.close()
            fenced.close()
        return {"unfenced_cpu_ms_per_write": a, "fenced_cpu_ms_per_write": b}

    import asyncio

    return asyncio.run(both())


@contextlib.contextmanager
def _postgres(url: str | None) -> Iterator[str]:
    """The given database, or a throw-away server's (``coordinator.bench.postgres``)."""
    if url is not None:
        yield url
        return
    with throwaway_postgres() as server:
        yield server.url


def run_benchmark(seconds: float, kills: int, lease: float, database: str | None) -> dict[str, Any]:
    """Every row, the idle coordination cost and the failover times."""
    rows: list[Row] = []
    report: dict[str, Any] = {"load_average_before": load_average()}
    with _postgres(database) as server, CountingUpstream() as upstream, tempfile.TemporaryDirectory() as tmp:
        plan = [("sqlite, 1 coordinator", 1, "state/rhaipool.db")] + [
            (f"postgresql, {n} coordinator{'s' if n > 1 else ''}", n, "") for n in (1, 2, 3)
        ]
        for name, count, where in plan:
            cluster = Cluster(
                Path(tmp) / f"r{len(rows)}",
                where or fresh_database(server),
                upstream.base_url,
                TENANTS,
                slots=count,
                lease_secs=lease,
            )
            try:
                rows.append(_measure(name, cluster, count, seconds))
                print(_line(rows[-1]), file=sys.stderr)
                if count == 1 and where == "":
                    report["idle_coordination"] = _idle_coordination(cluster, 5.0)
                    report["fence"] = _fence_cost(server)
                if count == 3 and kills:
                    gaps = _failover(cluster, kills)
                    finite = [g for g in gaps if g != float("inf")]
                    report["failover"] = {
                        "kills": kills,
                        "tenants_moved": len(gaps),
                        "never_answered": len(gaps) - len(finite),
                        "p50_s": statistics.median(finite) if finite else None,
                        "p99_s": percentile_ms(finite, 0.99) / 1000 if finite else None,
                        "max_s": max(finite) if finite else None,
                        "lease_secs": lease,
                    }
            finally:
                cluster.stop()
    report["rows"] = [asdict(r) for r in rows]
    report["load_average_after"] = load_average()
    return report


def _line(row: Row) -> str:
    return (
        f"{row.name:<28} {row.calls_per_second:8.0f} calls/s   coordinator CPU "
        f"{row.coordinator_cpu_ms_per_call:6.3f} ms/call   workers {row.worker_cpu_ms_per_call:6.3f} ms/call"
        f"   failed {row.failed_calls}"
        + (
            ""
            if row.db_transactions_per_write is None
            else f"   {row.db_transactions_per_write:.1f} tx/write"
        )
    )


def _print(report: dict[str, Any]) -> None:
    print(
        f"load average {report['load_average_before']:.1f} before, {report['load_average_after']:.1f} after"
    )
    base = report["rows"][0]["coordinator_cpu_ms_per_call"]
    for raw in report["rows"]:
        row = Row(**raw)
        print(_line(row) + f"   ({(row.coordinator_cpu_ms_per_call / base - 1) * 100:+.1f} % CPU vs sqlite)")
    idle = report.get("idle_coordination")
    if idle:
        print(
            f"idle coordinator holding {idle['leases_held']} leases: "
            f"{idle['cpu_ms_per_second']:.2f} ms of CPU per second"
        )
    fence = report.get("fence")
    if fence:
        print(
            "one write through the storage on PostgreSQL: "
            f"{fence['unfenced_cpu_ms_per_write']:.3f} ms of CPU unfenced, "
            f"{fence['fenced_cpu_ms_per_write']:.3f} ms fenced by the lease's epoch"
        )
    failover = report.get("failover")
    if failover and failover["p50_s"] is not None:
        print(
            f"failover over {failover['kills']} kill -9s ({failover['tenants_moved']} tenants moved, "
            f"lease {failover['lease_secs']:g} s): p50 {failover['p50_s']:.2f} s, p99 "
            f"{failover['p99_s']:.2f} s, max {failover['max_s']:.2f} s, "
            f"{failover['never_answered']} never answered"
        )


def main(argv: list[str] | None = None) -> None:
    """Command-line entry (``rhaipool bench coordinators``)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="load per configuration")
    parser.add_argument("--kills", type=int, default=10, help="kill -9s for the failover times (0: none)")
    parser.add_argument("--lease", type=float, default=2.0, help="[serve] lease_secs of the coordinators")
    parser.add_argument("--database", help="a PostgreSQL server's URL (default: start one with initdb)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.kills < 0 or args.lease <= 0:
        parser.error("--seconds and --lease must be positive, --kills at least 0")
    if shutil.which("haproxy") is None:
        sys.exit("haproxy is not installed (deploy/quickstart installs it: apt-get install haproxy)")
    try:
        report = run_benchmark(args.seconds, args.kills, args.lease, args.database)
    except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
        sys.exit(f"bench coordinators: {exc}")
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print(report)
