"""A coordinator added to the set takes the tenants whose requests it receives (handover.py), with two
``rhaipool serve`` processes over one real PostgreSQL and the counting upstream (coordinator/bench/
cluster.py): the owner hands each tenant over once its requests keep arriving forwarded by the
newcomer, while the tenants write and infer. Every acknowledged write is there once and in order, no
call fails (no 404 for a region right after the take-over), no inference reaches the upstream twice,
and a tenant moves once: sent back to its old owner (a flapping balancer), it stays where it went for
the hold. A round-robin balancer, or a client writing the forward's header itself, moves nothing."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import httpx
import psycopg
from postgres_server import PostgresServer

from coordinator.bench.cluster import Cluster, CountingUpstream, TenantLoad, run_loads, tenant_token
from coordinator.service.handover import HOLD_LEASES

TENANTS = ["t00", "t01", "t02", "t03"]
LEASE = 2.0


def _epochs(cluster: Cluster) -> dict[str, int]:
    with psycopg.connect(cluster.database_url, autocommit=True) as db:
        return {str(t): int(e) for t, e in db.execute("SELECT tenant, epoch FROM leases").fetchall()}


def _entries(url: str, tenant: str) -> list[str]:
    r = httpx.get(
        f"{url}/api/regions/log", headers={"Authorization": f"Bearer {tenant_token(tenant)}"}, timeout=30
    )
    assert r.status_code == 200, r.text
    return [e["content"] for e in r.json()["entries"]]


def _check(cluster: Cluster, loads: list[list[TenantLoad]], upstream: CountingUpstream) -> None:
    """Every acknowledged write once and in order, nothing else; every acknowledged inference sent
    upstream once; no call failed."""
    failures = [f for rounds in loads for load in rounds for f in load.failures]
    assert not failures, failures
    for rounds in zip(*loads, strict=True):
        tenant = rounds[0].tenant
        acked = [w for load in rounds for w in load.acked_writes]
        assert _entries(cluster.coordinators[0].url, tenant) == acked, tenant
        for load in rounds:
            for text in load.acked_inferences:
                assert upstream.counts[text] == 1, f"{text}: sent upstream {upstream.counts[text]} times"


def test_a_newcomer_takes_the_tenants_it_receives_once_and_keeps_them(
    tmp_path: Path, postgres: PostgresServer
) -> None:
    with CountingUpstream() as upstream:
        cluster = Cluster(tmp_path, postgres.fresh(), upstream.base_url, TENANTS, slots=2, lease_secs=LEASE)
        try:
            old, new = cluster.start(0), None
            cluster.setup_tenants(old.url)
            assert set(cluster.owners()) == set(TENANTS) and set(cluster.owners().values()) == {0}
            before = _epochs(cluster)
            new = cluster.start(1)
            # The balancer's hash now sends these tenants to the newcomer.
            first = [TenantLoad(new.url, t) for t in TENANTS]
            moved: dict[str, float] = {}

            def watch() -> None:
                begun = time.monotonic()
                while time.monotonic() < begun + 5 * LEASE and len(moved) < len(TENANTS):
                    for tenant, index in cluster.owners().items():
                        if index == 1:
                            moved.setdefault(tenant, time.monotonic() - begun)
                    time.sleep(0.02)
                time.sleep(LEASE)  # and served there for a while

            run_loads(first, 0.5, during=watch)
            failures = [f for load in first for f in load.failures]
            assert not failures, failures
            print("newcomer took the tenants after (s):", " ".join(f"{moved[t]:.2f}" for t in sorted(moved)))
            assert set(moved) == set(TENANTS), moved
            assert max(moved.values()) < 3 * LEASE, moved
            after = _epochs(cluster)
            assert all(after[t] > before[t] for t in TENANTS), (before, after)
            for tenant in TENANTS:  # once, and never back
                assert old.log().count(f"tenant {tenant}: handed over to") == 1
            assert "handed over to" not in new.log()
            served_there = [t for load in first for t in load.successes if t > time.monotonic() - LEASE]
            assert len(served_there) > 10

            # The balancer flaps back: the old owner gets the tenants' requests again and passes them on;
            # the newcomer holds them (no hand-over back within HOLD_LEASES leases).
            back = [
                TenantLoad(old.url, load.tenant, first=len(load.acked_writes) + len(load.maybe_writes))
                for load in first
            ]
            assert 2 * LEASE < HOLD_LEASES * LEASE
            run_loads(back, 2 * LEASE)
            assert set(cluster.owners().values()) == {1}
            assert "handed over to" not in new.log(), "handed back within the hold"
            assert all(old.log().count(f"tenant {t}: handed over to") == 1 for t in TENANTS)
            _check(cluster, [first, back], upstream)
        finally:
            cluster.stop()


def test_round_robin_and_a_forged_forward_header_move_nothing(
    tmp_path: Path, postgres: PostgresServer
) -> None:
    with CountingUpstream() as upstream:
        cluster = Cluster(
            tmp_path, postgres.fresh(), upstream.base_url, TENANTS[:1], slots=2, lease_secs=LEASE
        )
        try:
            a = cluster.start(0)
            cluster.setup_tenants(a.url)
            b = cluster.start(1)
            auth = {"Authorization": f"Bearer {tenant_token('t00')}"}
            served_by = httpx.get(f"{b.url}/api/regions/log", headers=auth).headers["rhaipool-served-by"]
            written = []
            with httpx.Client(headers=auth, timeout=30) as http:
                ends = itertools.cycle([a.url, b.url])  # a round-robin balancer
                deadline = time.monotonic() + 2 * LEASE
                n = 0
                while time.monotonic() < deadline:
                    r = http.post(
                        f"{next(ends)}/api/regions/log/write", json={"content": f"rr{n}", "tokens": 1}
                    )
                    assert r.status_code == 200, r.text
                    written.append(f"rr{n}")
                    n += 1
                # Straight to the owner, claiming to come from b: served, but counted as sent directly.
                forged = {"rhaipool-forwarded-by": served_by.replace(f"/{a.pid}/", f"/{b.pid}/")}
                deadline = time.monotonic() + 2 * LEASE
                while time.monotonic() < deadline:
                    r = http.post(
                        f"{a.url}/api/regions/log/write",
                        json={"content": f"f{n}", "tokens": 1},
                        headers={**forged, "rhaipool-forward-proof": "0" * 64},
                    )
                    assert r.status_code == 200, r.text
                    written.append(f"f{n}")
                    n += 1
            assert n > 2 * 8
            assert cluster.owners() == {"t00": 0}
            assert "handed over" not in a.log()
            assert _entries(a.url, "t00") == written
        finally:
            cluster.stop()
