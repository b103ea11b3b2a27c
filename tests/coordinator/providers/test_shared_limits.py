"""A rate limit several tenants share, divided among the live coordinators (docs/scaling.md,
"Limits across coordinators"): the shares add up to the limit, a sliding minute never sees more than the
limit plus one coordinator's share around a join or a departure, and every tenant's runtime of one
coordinator takes the same limiter for the operator's table (a tenant's own table keeps its own)."""

from __future__ import annotations

import asyncio

import pytest

from coordinator.providers.config import ProviderTable, RateLimit
from coordinator.providers.ratelimit import WINDOW_SECS, RateLimiter, SharedLimiters, share_of


class _Full(Exception):
    """The limiter asked to wait: this step's window is used up."""


class _StepClock:
    """Time moved by the test; a limiter that must wait gives up for this step instead."""

    def __init__(self) -> None:
        self.time = 0.0

    def now(self) -> float:
        return self.time

    async def sleep(self, seconds: float) -> None:
        raise _Full


def _send_all(limiter: RateLimiter) -> int:
    """Every request the limiter lets through now."""

    async def run() -> int:
        sent = 0
        while True:
            try:
                await limiter.acquire()
            except _Full:
                return sent
            sent += 1

    return asyncio.run(run())


@pytest.mark.parametrize(("total", "count"), [(100, 3), (7, 3), (2, 3), (1000, 7), (5, 1)])
def test_shares_add_up_to_the_limit(total: int, count: int) -> None:
    parts = [share_of(total, rank, count) for rank in range(count)]
    assert sum(parts) == total
    assert max(parts) - min(parts) <= 1


def test_a_rank_outside_the_membership_is_refused() -> None:
    with pytest.raises(ValueError, match="rank 3 is not one of 3"):
        share_of(10, 3, 3)


def _simulate(limit: int, timeline: dict[float, int], until: float) -> list[tuple[float, int]]:
    """Coordinators sending as fast as their shares allow; ``timeline`` says from when how many are
    live (the last ones leave first, a newcomer comes last). Returns every request (time, coordinator)."""
    clock = _StepClock()
    limiters: list[RateLimiter] = []
    sent: list[tuple[float, int]] = []
    live = 0
    step = 0.25
    while clock.time < until:
        if clock.time in timeline:
            live = timeline[clock.time]
            while len(limiters) < live:
                limiters.append(RateLimiter(RateLimit(limit, 10**9), clock))
            for rank in range(live):
                limiters[rank].set_share(rank, live)
        for rank in range(live):
            sent += [(clock.time, rank)] * _send_all(limiters[rank])
        clock.time += step
    return sent


def _busiest_minute(sent: list[tuple[float, int]]) -> int:
    times = [t for t, _ in sent]
    return max(sum(1 for u in times if s <= u < s + WINDOW_SECS) for s in set(times))


def test_three_coordinators_never_exceed_the_limit_in_a_steady_state() -> None:
    sent = _simulate(90, {0.0: 3}, until=200.0)
    assert _busiest_minute(sent) == 90
    assert {r for _, r in sent} == {0, 1, 2}


def test_a_departure_or_a_join_exceeds_the_limit_by_at_most_one_share() -> None:
    left = _simulate(90, {0.0: 3, 100.0: 2}, until=250.0)  # one leaves: the others take 45 each
    assert 90 < _busiest_minute(left) <= 90 + 30
    joined = _simulate(90, {0.0: 2, 100.0: 3}, until=250.0)  # one joins: 30 each
    assert 90 < _busiest_minute(joined) <= 90 + 30
    late = [t for t, _ in joined if t >= 170.0]
    assert late and _busiest_minute([(t, 0) for t in late]) <= 90


def test_a_waiting_request_sees_a_re_division_within_a_second() -> None:
    clock = _StepClock()
    limiter = RateLimiter(RateLimit(1, 10**9), clock)
    limiter.set_share(1, 2)  # 1 request a minute over 2 coordinators: this one has none
    waits: list[float] = []

    class _Recording(_StepClock):
        async def sleep(self, seconds: float) -> None:
            waits.append(seconds)
            limiter.set_share(0, 1)  # the other left while this request waited

    limiter.clock = _Recording()
    asyncio.run(limiter.acquire())
    assert waits == [1.0]


def test_tenants_of_one_coordinator_share_the_operators_table_and_not_their_own() -> None:
    operator = ProviderTable("groq", rate_limit=RateLimit(10, 1000))
    own = ProviderTable("groq", rate_limit=RateLimit(10, 1000), forwarded=(("base_url", "x"),))
    shared = SharedLimiters(lambda name, table: table == operator)
    first, second = shared.get("groq", operator), shared.get("groq", operator)
    assert first is not None and first is second
    assert shared.get("groq", own) is None
    shared.divide(1, 3)
    assert (first.requests_allowed, first.tokens_allowed) == (3, 333)
    assert ProviderTable("other").rate_limit is None and shared.get("other", ProviderTable("other")) is None
