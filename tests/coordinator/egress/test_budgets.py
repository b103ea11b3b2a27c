"""Egress holds a bounded number of bytes and requests, in total and per tenant (issue 10, points 2, 5)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from coordinator.bench.standin import StandinServer
from coordinator.egress import (
    Egress,
    EgressCapacityError,
    EgressLimits,
    EgressPolicy,
    HostError,
    ResponseBudgetExhausted,
    StreamBudgetExhausted,
    TenantRequestsExceeded,
    TenantResponseBytesExceeded,
)
from coordinator.egress.budgets import ByteBudget

from .conftest import Gate

POLICY = EgressPolicy.build("p", egress_allow=("127.0.0.1",), max_response_bytes=4 << 20)
KB = 1024


def run(coro: Awaitable[Any]) -> Any:
    async def main() -> Any:
        async with asyncio.timeout(60):
            return await coro

    return asyncio.run(main())


async def until(condition: Callable[[], bool]) -> None:
    """Wait (by polling) until ``condition`` holds; the test's own timeout bounds it."""
    while not condition():
        await asyncio.sleep(0.01)


def fetch(
    egress: Egress, server: StandinServer, size: int, tenant: str = "default", declared: bool = False
) -> Any:
    query = "?declared=1" if declared else ""
    return asyncio.ensure_future(
        egress.fetch(POLICY, "GET", f"{server.url}/hold/{size}{query}", tenant=tenant, timeout=30)
    )


def assert_nothing_held(egress: Egress) -> None:
    budgets = egress.budgets
    assert (budgets.responses.used, budgets.streams.used) == (0, 0)
    assert budgets.responses.idle and budgets.streams.idle
    assert not budgets._bytes and not budgets._requests  # no tenant entry outlives its requests


def test_the_global_response_budget_bounds_bodies_in_flight(held: StandinServer, gate: Gate) -> None:
    """A read body counts twice at the end (bytes and text): 400 KB needs 800 KB of the budget."""
    limits = EgressLimits(response_bytes=1024 * KB, tenant_response_bytes=None, wait=0.2)

    async def scenario() -> None:
        async with Egress(limits=limits) as egress:
            first = fetch(egress, held, 400 * KB, declared=True)
            await until(lambda: egress.budgets.responses.used == 400 * KB)
            with pytest.raises(ResponseBudgetExhausted) as info:  # another tenant: a global bound
                await fetch(egress, held, 700 * KB, tenant="other", declared=True)
            value = info.value.value
            assert value["kind"] == "transport" and value["transient"] is True
            assert "EgressLimits.response_bytes" in value["message"]
            gate.open()
            assert len(await first) == 400 * KB
            assert len(await fetch(egress, held, 500 * KB, declared=True)) == 500 * KB
            assert_nothing_held(egress)

    run(scenario())


def test_undeclared_bodies_are_counted_as_they_are_read(held: StandinServer, gate: Gate) -> None:
    """Two chunked bodies that each fit but not together: each holds part of the budget and waits
    for more, so the younger one gives way at once and the older one finishes."""
    limits = EgressLimits(response_bytes=1024 * KB, tenant_response_bytes=None, wait=20)

    async def scenario() -> None:
        async with Egress(limits=limits) as egress:
            bodies = [fetch(egress, held, 500 * KB), fetch(egress, held, 500 * KB, tenant="other")]
            await until(lambda: egress.budgets.responses.used >= 500 * KB)  # both half read
            gate.open()
            results = await asyncio.gather(*bodies, return_exceptions=True)
            assert len(results[0]) == 500 * KB and isinstance(results[1], ResponseBudgetExhausted), results
            assert_nothing_held(egress)

    run(scenario())


def test_a_waiting_body_gets_the_room_others_hand_back(held: StandinServer, gate: Gate) -> None:
    """Three bodies hold 900 KB of 1 MB, a fourth waits for room. When they finish they each need
    room for their text: the youngest gives way, the others finish, and the fourth gets its turn."""
    limits = EgressLimits(response_bytes=1024 * KB, tenant_response_bytes=None, wait=20)

    async def scenario() -> None:
        async with Egress(limits=limits) as egress:
            bodies = []
            for _ in range(3):
                bodies.append(fetch(egress, held, 300 * KB, declared=True))
                await until(lambda: egress.budgets.responses.used == 300 * KB * len(bodies))
            bodies.append(fetch(egress, held, 300 * KB, declared=True))
            await until(lambda: len(egress.budgets.responses._waiters) == 1)
            gate.open()
            results = await asyncio.gather(*bodies, return_exceptions=True)
            assert isinstance(results[2], ResponseBudgetExhausted), results
            assert [len(r) for i, r in enumerate(results) if i != 2] == [300 * KB] * 3
            assert_nothing_held(egress)

    run(scenario())


def test_a_body_bigger_than_the_whole_budget_fails_at_once(held: StandinServer, gate: Gate) -> None:
    gate.open()
    limits = EgressLimits(response_bytes=100 * KB, wait=30)

    async def scenario() -> None:
        async with Egress(limits=limits) as egress:
            with pytest.raises(ResponseBudgetExhausted):
                await asyncio.wait_for(fetch(egress, held, 200 * KB, declared=True), 10)
            assert_nothing_held(egress)

    run(scenario())


def test_a_tenants_response_bytes_quota_leaves_other_tenants_alone(held: StandinServer, gate: Gate) -> None:
    limits = EgressLimits(tenant_response_bytes=1024 * KB, wait=0.2)

    async def scenario() -> None:
        async with Egress(limits=limits) as egress:
            first = fetch(egress, held, 400 * KB, tenant="greedy", declared=True)
            await until(lambda: egress.budgets.responses.used == 400 * KB)
            with pytest.raises(TenantResponseBytesExceeded) as info:
                await fetch(egress, held, 700 * KB, tenant="greedy", declared=True)
            assert info.value.tenant == "greedy" and "greedy" in str(info.value)
            assert egress.budgets.refusals == {"tenant_response_bytes": 1}
            quiet = fetch(egress, held, 500 * KB, tenant="quiet", declared=True)
            await until(lambda: egress.budgets.responses.used == 900 * KB)
            gate.open()
            assert [len(t) for t in await asyncio.gather(first, quiet)] == [400 * KB, 500 * KB]
            assert_nothing_held(egress)

    run(scenario())


def test_a_tenants_requests_in_flight_quota(held: StandinServer, gate: Gate) -> None:
    limits = EgressLimits(tenant_requests=2, request_wait=0.2)

    async def scenario() -> None:
        async with Egress(limits=limits) as egress:
            busy = [fetch(egress, held, 10 * KB, tenant="busy") for _ in range(2)]
            await until(lambda: egress.budgets.in_flight()["requests"] == 2)
            with pytest.raises(TenantRequestsExceeded) as info:
                await fetch(egress, held, 10 * KB, tenant="busy")
            assert isinstance(info.value, EgressCapacityError) and isinstance(info.value, HostError)
            quiet = fetch(egress, held, 10 * KB, tenant="quiet")
            await until(lambda: egress.budgets._requests.get("quiet") is not None)
            gate.open()
            assert [len(t) for t in await asyncio.gather(*busy, quiet)] == [10 * KB] * 3
            assert_nothing_held(egress)

    run(scenario())


def test_stream_buffers_have_their_own_global_budget(held: StandinServer, gate: Gate) -> None:
    limits = EgressLimits(stream_bytes=1024 * KB, tenant_response_bytes=None, wait=0.2)

    async def first_event(egress: Egress, tenant: str) -> str:
        url = f"{held.url}/hold-sse/{700 * KB}"
        events = egress.stream(POLICY, url, body="{}", tenant=tenant, timeout=30)
        async with contextlib.aclosing(events):  # as the host handler does: closed when done
            async for payload in events:
                return payload
        raise AssertionError("no event")

    async def scenario() -> None:
        async with Egress(limits=limits) as egress:
            first = asyncio.ensure_future(first_event(egress, "a"))
            await until(lambda: egress.budgets.streams.used >= 350 * KB)
            await until(lambda: egress.budgets.streams.used >= 700 * KB)  # its partial event, held
            with pytest.raises(StreamBudgetExhausted) as info:  # the first still holds its bytes
                await first_event(egress, "b")
            assert info.value.tenant == "b" and "EgressLimits.stream_bytes" in str(info.value)
            gate.open()
            assert len(await first) == 700 * KB
            assert egress.budgets.responses.used == 0  # streams never touch the response budget
            assert_nothing_held(egress)

    run(scenario())


def test_byte_budget_is_first_come_first_served() -> None:
    async def scenario() -> list[str]:
        budget, order = ByteBudget(10), []
        assert await budget.acquire(8, 0)
        assert not await budget.acquire(11, 30)  # never fits: refused without waiting
        assert not await budget.acquire(5, 0.01) and budget.used == 8  # no room in time: nothing held

        async def take(name: str, n: int) -> None:
            assert await budget.acquire(n, 30)
            order.append(name)

        big = asyncio.ensure_future(take("big", 9))
        await asyncio.sleep(0)
        small = asyncio.ensure_future(take("small", 1))  # fits now, but the big one came first
        await asyncio.sleep(0.01)
        assert order == []
        budget.release(8)
        await asyncio.gather(big, small)
        return order

    assert run(scenario()) == ["big", "small"]


def test_byte_budget_breaks_a_deadlock_by_refusing_the_youngest_holder() -> None:
    async def scenario() -> list[bool]:
        budget = ByteBudget(10)
        assert await budget.acquire(5, 0, ticket=1) and await budget.acquire(5, 0, ticket=2)
        old = asyncio.ensure_future(budget.acquire(3, 30, held=5, ticket=1))
        await asyncio.sleep(0)
        young = await budget.acquire(3, 30, held=5, ticket=2)  # both stuck: refused at once
        assert not old.done()
        budget.release(5)  # what the refused one does next: give its bytes back
        return [await old, young]

    assert run(scenario()) == [True, False]
