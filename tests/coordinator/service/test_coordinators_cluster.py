"""Three ``rhaipool serve`` coordinators over one real PostgreSQL behind a real HAProxy (the shipped
deploy/haproxy/haproxy.cfg), 20 tenants spread over them by the balancer's hash, a steady load of
writes and inferences from every tenant, and an upstream on 127.0.0.1 counting the requests it gets
by the id in their body (coordinator/bench/cluster.py).

Under that load one coordinator is ``kill -9``ed and another is paused (SIGSTOP) past its leases and
resumed: every acknowledged write is there exactly once; the paused coordinator writes nothing under
its lost lease when it comes back (a write sent to it is refused, or passed on to the owner, which
keeps the tenant: a tenant is never served by two at once); the dead one's tenants answer again
within 5 s (p99); no upstream request is sent twice for one inference. A coordinator cut off from the
database turns not ready and leaves the balancer instead of writing.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import shutil
import signal
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from postgres_server import PostgresServer
from test_coordinators_postgres import _Link

from coordinator.bench.cluster import (
    ADMIN_TOKEN,
    Cluster,
    Coordinator,
    CountingUpstream,
    TenantLoad,
    run_loads,
    tenant_token,
)

pytestmark = pytest.mark.skipif(
    shutil.which("haproxy") is None, reason="HAProxy is not installed (deploy/quickstart installs it)"
)

TENANTS = [f"t{i:02d}" for i in range(20)]
LEASE = 2.0


def _entries(cluster: Cluster, tenant: str) -> list[str]:
    headers = {"Authorization": f"Bearer {tenant_token(tenant)}"}
    deadline = time.monotonic() + 20
    while True:
        r = httpx.get(f"{cluster.url}/api/regions/log", headers=headers, timeout=10)
        if r.status_code == 200:
            return [e["content"] for e in r.json()["entries"]]
        assert time.monotonic() < deadline, f"{tenant}: {r.status_code} {r.text}"
        time.sleep(0.1)


def _wait(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s: {what}")


def _taken_by(coordinator: Coordinator, tenant: str) -> bool:
    """Whether ``coordinator`` serves the tenant within a few seconds (it takes the lease once it ran
    out; a write the paused owner had begun holds the lease row until it resumes and commits)."""
    headers = {"Authorization": f"Bearer {tenant_token(tenant)}"}
    deadline = time.monotonic() + 5 * LEASE
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.TransportError):
            r = httpx.get(
                f"{coordinator.url}/api/regions/log",
                headers=headers,
                timeout=max(0.1, min(3.0, deadline - time.monotonic())),
            )
            if r.status_code == 200:
                return True
        time.sleep(0.1)
    return False


def _check_exactly_once(cluster: Cluster, loads: list[TenantLoad], upstream: CountingUpstream) -> None:
    for load in loads:
        entries = _entries(cluster, load.tenant)
        assert len(entries) == len(set(entries)), f"{load.tenant}: an entry is there twice"
        missing = set(load.acked_writes) - set(entries)
        assert not missing, f"{load.tenant}: acknowledged writes lost: {sorted(missing)}"
        assert set(entries) <= set(load.acked_writes) | set(load.maybe_writes)
        for text in load.acked_inferences:
            assert upstream.counts[text] == 1, f"{text}: sent upstream {upstream.counts[text]} times"
        for text in load.lost_inferences:
            assert upstream.counts[text] <= 1, f"{text}: sent upstream {upstream.counts[text]} times"


@pytest.mark.slow
def test_kill_9_and_a_pause_under_load_lose_nothing_and_serve_each_tenant_once(
    tmp_path: Path, postgres: PostgresServer
) -> None:
    with CountingUpstream() as upstream:
        cluster = Cluster(tmp_path, postgres.fresh(), upstream.base_url, TENANTS, lease_secs=LEASE)
        try:
            for i in range(3):
                cluster.start(i)
            cluster.start_haproxy()
            cluster.setup_tenants()
            loads = [TenantLoad(cluster.url, t) for t in TENANTS]
            events: dict[str, float] = {}
            owned: dict[str, dict[str, int]] = {}
            late: list[httpx.Response] = []
            taken: list[str] = []

            def faults() -> None:
                time.sleep(3.0)
                owned["before"] = cluster.owners()
                assert set(owned["before"].values()) == {0, 1, 2}, owned["before"]
                events["kill"] = time.monotonic()
                cluster.kill9(0)
                time.sleep(3.0 * LEASE)
                paused = cluster.coordinators[1]
                assert paused.process is not None
                mine = [t for t, i in cluster.owners().items() if i == 1]
                paused.process.send_signal(signal.SIGSTOP)
                events["pause"] = time.monotonic()
                time.sleep(LEASE)  # its leases run out; coordinator 2 takes its tenants
                with concurrent.futures.ThreadPoolExecutor(len(mine)) as pool:
                    took = list(pool.map(lambda t: _taken_by(cluster.coordinators[2], t), mine))
                taken.extend(t for t, ok in zip(mine, took, strict=True) if ok)
                paused.process.send_signal(signal.SIGCONT)
                for tenant in taken:  # straight to it, past the balancer: never written under its epoch
                    late.append(
                        httpx.post(
                            f"{paused.url}/api/regions/log/write",
                            json={"content": f"{tenant}-stale", "tokens": 1},
                            headers={"Authorization": f"Bearer {tenant_token(tenant)}"},
                            timeout=10,
                        )
                    )
                owned["after_pause"] = cluster.owners()
                # Its tenants that coordinator 2 took stay there (the lease is renewed, and a tenant
                # taken from another coordinator is not handed over for HOLD_LEASES leases) while the
                # balancer's hash sends them back to it: it passes their requests on to the owner.
                time.sleep(2.0)

            run_loads(loads, 1.0, during=faults)
            assert taken, "coordinator 2 took none of the paused coordinator's tenants"
            # Refused (503, nothing written), or passed on to the owner, which wrote it under its own
            # lease: either way the tenant stayed with coordinator 2, never served by both.
            refused = {t for t, r in zip(taken, late, strict=True) if r.status_code == 503}
            assert all(
                (r.status_code == 503 and "served by another coordinator" in r.text) or r.status_code == 200
                for r in late
            ), [(r.status_code, r.text) for r in late]
            assert all(owned["after_pause"].get(t) == 2 for t in taken), owned["after_pause"]
            by_tenant = {load.tenant: load for load in loads}
            for tenant, r in zip(taken, late, strict=True):
                if r.status_code == 200:
                    by_tenant[tenant].acked_writes.append(f"{tenant}-stale")
            dead = [t for t, i in owned["before"].items() if i == 0]
            gaps = []
            for load in loads:
                if load.tenant in dead:
                    back = load.first_success_after(events["kill"])
                    assert back is not None, f"{load.tenant} never answered after the kill"
                    gaps.append(back - events["kill"])
            gaps.sort()
            p99 = gaps[min(len(gaps) - 1, int(0.99 * len(gaps)))]
            print(
                f"dead coordinator's {len(gaps)} tenants answered again after (s): "
                + " ".join(f"{g:.2f}" for g in gaps)
                + f"; p50 {statistics.median(gaps):.2f}, p99 {p99:.2f}"
            )
            assert p99 < 5.0, gaps
            _check_exactly_once(cluster, loads, upstream)
            for tenant in refused:
                assert f"{tenant}-stale" not in _entries(cluster, tenant)
            assert sum(len(load.acked_writes) for load in loads) > 100
            assert sum(len(load.acked_inferences) for load in loads) > 100
            assert all(f"tenant {t} dropped" in cluster.coordinators[1].log() for t in taken)
        finally:
            cluster.stop()


def test_a_coordinator_cut_off_from_the_database_leaves_the_balancer_and_writes_nothing(
    tmp_path: Path, postgres: PostgresServer
) -> None:
    url = postgres.fresh()
    link = _Link(postgres.port)
    with CountingUpstream() as upstream:
        cluster = Cluster(tmp_path, url, upstream.base_url, TENANTS[:6], slots=2, lease_secs=LEASE)
        try:
            cluster.start(0)
            cluster.database_url = url.replace(f":{postgres.port}/", f":{link.port}/")
            cluster.start(1)
            cluster.database_url = url
            cluster.start_haproxy()
            cluster.setup_tenants()
            loads = [TenantLoad(cluster.url, t, inferences=False) for t in TENANTS[:6]]
            cut: dict[str, float] = {}

            def partition() -> None:
                time.sleep(2.0)
                assert 1 in cluster.owners().values()
                cut["at"] = time.monotonic()
                link.partition()
                _wait(
                    lambda: httpx.get(cluster.coordinators[1].url + "/readyz").status_code == 503,
                    20,
                    "readiness false",
                )
                cut["ready_false"] = time.monotonic()
                time.sleep(3.0 * LEASE)

            run_loads(loads, 1.0, during=partition)
            assert not [f for load in loads for f in load.failures], [
                f for load in loads for f in load.failures
            ]
            assert set(cluster.owners().values()) == {0}, "the cut-off coordinator still holds tenants"
            after = [t for load in loads for t in load.successes if t > cut["ready_false"] + 2 * LEASE]
            assert len(after) > 20, "tenants not served by the other coordinator after the partition"
            _check_exactly_once(cluster, loads, upstream)
        finally:
            cluster.stop()
            link.close()


def test_a_coordinator_added_under_load_takes_its_tenants_and_fails_no_call(
    tmp_path: Path, postgres: PostgresServer
) -> None:
    """A third coordinator joins while every tenant calls: the balancer's hash sends it some tenants at
    once; it passes their requests on to their owners, which hand those tenants over to it
    (handover.py), so it serves them itself within a few leases, each moved once; no call fails, and
    every acknowledged write is there once."""
    with CountingUpstream() as upstream:
        cluster = Cluster(tmp_path, postgres.fresh(), upstream.base_url, TENANTS, slots=3, lease_secs=LEASE)
        try:
            for i in range(2):
                cluster.start(i)
            cluster.start_haproxy()
            cluster.setup_tenants()
            loads = [TenantLoad(cluster.url, t) for t in TENANTS]
            joined: dict[str, float] = {}
            seen: dict[str, dict[str, int]] = {}

            def join() -> None:
                time.sleep(2.0)
                cluster.start(2)
                joined["at"] = time.monotonic()
                time.sleep(3.0 * LEASE)
                seen["owners"] = cluster.owners()
                time.sleep(1.0)

            run_loads(loads, 1.0, during=join)
            failures = [f for load in loads for f in load.failures]
            assert not failures, failures
            served_after = [t for load in loads for t in load.successes if t > joined["at"] + 1.0]
            assert len(served_after) > 40
            _check_exactly_once(cluster, loads, upstream)
            metrics = httpx.get(
                f"{cluster.coordinators[2].url}/metrics", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
            ).text
            answered = sum(
                float(line.rsplit(" ", 1)[1])
                for line in metrics.splitlines()
                if line.startswith("rhaipool_calls_total{")
            )
            assert answered > 10, "the balancer sent the new coordinator nothing"
            owners = seen["owners"]
            newcomers = [t for t, i in owners.items() if i == 2]
            assert newcomers, f"the new coordinator took no tenant within {3 * LEASE} s: {owners}"
            logs = cluster.coordinators[0].log() + cluster.coordinators[1].log()
            for tenant in newcomers:
                assert logs.count(f"tenant {tenant}: handed over to") == 1, tenant
            assert "handed over to" not in cluster.coordinators[2].log(), "a tenant went back"
        finally:
            cluster.stop()
