"""Rate limits, 429 backoff and the retry schedule on an injectable clock (docs/scripts/errors.md#retries,
docs/scripts/errors.md#rate-limits; PF8, PF11)."""

from __future__ import annotations

import asyncio

import pytest

from coordinator.providers.clock import ManualClock
from coordinator.providers.config import RateLimit
from coordinator.providers.failures import (
    ApiError,
    ProviderError,
    RateLimitExceeded,
    RequestFailed,
    UnclassifiedProviderError,
)
from coordinator.providers.ratelimit import Backoff429, RateLimiter
from coordinator.providers.retry import InferenceRetryPolicy, run_with_retries


def test_pf8_rpm_sixth_waits_until_a_minute_after_the_first() -> None:
    async def scenario() -> list[float]:
        clock = ManualClock(start=0.0)
        limiter = RateLimiter(RateLimit(5, 10**9), clock)
        times = []
        for _ in range(6):
            await limiter.acquire()
            times.append(clock.now())
            clock.time += 1.0
        return times

    times = asyncio.run(scenario())
    assert times[:5] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert times[5] == pytest.approx(60.05)


def test_tpm_is_enforced() -> None:
    async def scenario() -> tuple[list[float], int]:
        clock = ManualClock(start=0.0)
        limiter = RateLimiter(RateLimit(1000, 100), clock)
        await limiter.acquire()
        limiter.record_tokens(60)
        clock.time = 10.0
        await limiter.acquire()  # 60 < 100: room
        limiter.record_tokens(50)  # window now holds 110
        clock.time = 20.0
        await limiter.acquire()  # must wait until the first 60 leave the window (t = 60.05)
        return [clock.now()], limiter.tokens_in_window()

    times, left = asyncio.run(scenario())
    assert times == [pytest.approx(60.05)]
    assert left == 50


def test_concurrent_acquires_are_served_in_order() -> None:
    async def scenario() -> list[int]:
        clock = ManualClock(start=0.0)
        limiter = RateLimiter(RateLimit(2, 10**9), clock)
        order: list[int] = []

        async def one(i: int) -> None:
            await limiter.acquire()
            order.append(i)

        await asyncio.gather(*(one(i) for i in range(5)))
        return order

    assert asyncio.run(scenario()) == [0, 1, 2, 3, 4]


def test_429_backoff_schedule() -> None:
    b = Backoff429()
    assert [b.on_429(None) for _ in range(8)] == [1, 2, 4, 8, 16, 32, 32, 32]
    assert b.on_429(7) == 7
    b.on_success()
    assert b.on_429(None) == 1


def retry(
    errors: list[ProviderError], policy: InferenceRetryPolicy
) -> tuple[list[float], int, BaseException | None]:
    clock = ManualClock()
    calls = 0

    async def attempt(_n: int) -> str:
        nonlocal calls
        calls += 1
        if calls <= len(errors):
            raise errors[calls - 1]
        return "ok"

    try:
        asyncio.run(run_with_retries(attempt, policy, clock))
        failure = None
    except ProviderError as exc:
        failure = exc
    return clock.sleeps, calls, failure


def test_pf11_transient_schedule() -> None:
    sleeps, calls, failure = retry([RequestFailed("x")] * 4, InferenceRetryPolicy(4, 1000))
    assert sleeps == [1.0, 2.0, 4.0] and calls == 4 and isinstance(failure, RequestFailed)


def test_pf11_capacity_schedule_and_permanent() -> None:
    sleeps, _, _ = retry([RateLimitExceeded("r", capacity=True)] * 4, InferenceRetryPolicy(4, 1000))
    assert sleeps == [15.0, 30.0, 60.0]
    sleeps, _, _ = retry(
        [ApiError("HTTP 529 overloaded", transient=True, capacity=True)] * 4, InferenceRetryPolicy(4, 1000)
    )
    assert sleeps == [15.0, 30.0, 60.0]
    sleeps, calls, failure = retry([UnclassifiedProviderError("no")], InferenceRetryPolicy(4, 1000))
    assert sleeps == [] and calls == 1 and isinstance(failure, UnclassifiedProviderError)
    sleeps, calls, failure = retry([RequestFailed("x")] * 2, InferenceRetryPolicy(4, 1000))
    assert calls == 3 and failure is None and sleeps == [1.0, 2.0]


def test_pf11_total_sleep_never_exceeds_300s() -> None:
    sleeps, calls, _ = retry([RateLimitExceeded("r", capacity=True)] * 20, InferenceRetryPolicy(20, 1000))
    assert sum(sleeps) == pytest.approx(300.0)
    assert calls == 20
    sleeps, _, _ = retry([RequestFailed("x")] * 12, InferenceRetryPolicy(12, 100_000))
    assert sum(sleeps) <= 300.0
    sleeps, _, _ = retry(
        [RateLimitExceeded("r", capacity=True, retry_after=90)] * 2, InferenceRetryPolicy(2, 1000)
    )
    assert sleeps == [60.0]
