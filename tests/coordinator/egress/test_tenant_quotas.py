"""Per-tenant egress quotas set live (``Egress.set_tenant_quotas``): defaults, per-tenant overrides,
and changes that apply to requests already waiting (contracts: ``egress_max_inflight``,
``egress_max_bytes``). A real loopback server holds its answers until the test opens the gate."""

from __future__ import annotations

import asyncio

import pytest

from coordinator.bench.standin import StandinServer
from coordinator.egress import (
    Egress,
    EgressLimits,
    EgressQuota,
    TenantRequestsExceeded,
    TenantResponseBytesExceeded,
)

from .conftest import Gate
from .test_budgets import KB, assert_nothing_held, fetch, run, until


def test_defaults_and_overrides_apply_per_tenant(held: StandinServer, gate: Gate) -> None:
    async def scenario() -> None:
        async with Egress(limits=EgressLimits(request_wait=0.2, wait=0.2)) as egress:
            egress.set_tenant_quotas(EgressQuota(1, None), {"big": EgressQuota(3, None)})
            small = fetch(egress, held, 10 * KB, tenant="small")
            big = [fetch(egress, held, 10 * KB, tenant="big") for _ in range(3)]
            await until(lambda: egress.budgets.in_flight()["requests"] == 4)
            with pytest.raises(TenantRequestsExceeded, match="egress_max_inflight"):
                await fetch(egress, held, 10 * KB, tenant="small")
            with pytest.raises(TenantRequestsExceeded):
                await fetch(egress, held, 10 * KB, tenant="big")
            gate.open()
            assert [len(t) for t in await asyncio.gather(small, *big)] == [10 * KB] * 4
            assert_nothing_held(egress)

    run(scenario())


def test_raising_a_quota_live_lets_a_waiting_request_in(held: StandinServer, gate: Gate) -> None:
    async def scenario() -> None:
        async with Egress(limits=EgressLimits(request_wait=20)) as egress:
            egress.set_tenant_quotas(EgressQuota(1, None))
            first = fetch(egress, held, 10 * KB, tenant="t")
            await until(lambda: egress.budgets.in_flight()["requests"] == 1)
            second = fetch(egress, held, 10 * KB, tenant="t")
            await asyncio.sleep(0.2)
            assert egress.budgets.in_flight()["requests"] == 1  # waiting for the tenant's slot
            egress.set_tenant_quotas(EgressQuota(2, None))
            await until(lambda: egress.budgets.in_flight()["requests"] == 2)
            gate.open()
            assert [len(t) for t in await asyncio.gather(first, second)] == [10 * KB] * 2
            assert_nothing_held(egress)

    run(scenario())


def test_a_lowered_bytes_quota_applies_to_the_next_body(held: StandinServer, gate: Gate) -> None:
    async def scenario() -> None:
        async with Egress(limits=EgressLimits(wait=0.2)) as egress:
            first = fetch(egress, held, 400 * KB, tenant="t", declared=True)
            await until(lambda: egress.budgets.responses.used == 400 * KB)
            egress.set_tenant_quotas(EgressQuota(None, 500 * KB))  # the 400 KB already held stay held
            with pytest.raises(TenantResponseBytesExceeded, match="egress_max_bytes"):
                await fetch(egress, held, 200 * KB, tenant="t", declared=True)
            egress.set_tenant_quotas(EgressQuota(None, None), {"other": EgressQuota(None, 100 * KB)})
            gate.open()
            assert len(await first) == 400 * KB
            assert len(await fetch(egress, held, 800 * KB, tenant="t", declared=True)) == 800 * KB
            assert_nothing_held(egress)

    run(scenario())


@pytest.mark.parametrize("bad", [EgressQuota(0, None), (None, -1), (True, None), (1.5, None)])
def test_a_bad_quota_is_refused_and_nothing_changes(bad: tuple[int | None, int | None]) -> None:
    egress = Egress()
    before = egress.budgets.quota("t")
    with pytest.raises(ValueError, match="egress_max_"):
        egress.set_tenant_quotas(EgressQuota(5, 5), {"t": bad})
    assert egress.budgets.quota("t") == before
    egress.set_tenant_quotas((4, None), {"t": (2, 1024)})  # plain tuples are accepted
    assert (egress.budgets.quota("x"), egress.budgets.quota("t")) == (EgressQuota(4, None), (2, 1024))
