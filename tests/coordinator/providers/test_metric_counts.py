"""The counters the service exports: egress requests by provider and status class, rate-limit waits."""

from __future__ import annotations

import asyncio
import contextlib
import socket

import pytest

from coordinator.bench.standin import StandinServer
from coordinator.egress import Egress, EgressPolicy, HostError
from coordinator.providers.clock import ManualClock
from coordinator.providers.config import RateLimit
from coordinator.providers.ratelimit import Backoff429, RateLimiter


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_egress_counts_requests_by_provider_and_status_class(server: StandinServer) -> None:
    allowed = EgressPolicy.build("local", egress_allow=("127.0.0.1",))
    strict = EgressPolicy.build("strict", urls=(server.base_url,))  # loopback not allowed: denied

    async def main() -> dict[tuple[str, str], int]:
        async with Egress() as egress:
            await egress.fetch(allowed, "GET", server.base_url + "/models")
            for policy, url in (
                (allowed, server.url + "/no/such/path"),
                (allowed, f"http://127.0.0.1:{_closed_port()}/"),
                (strict, server.base_url + "/models"),
            ):
                with contextlib.suppress(HostError):
                    await egress.fetch(policy, "GET", url)
            return dict(egress.responses)

    counts = asyncio.run(main())
    assert counts[("local", "2xx")] == 1 and counts[("local", "4xx")] == 1
    assert counts[("local", "error")] >= 1  # a refused connection is retried, each attempt counted
    assert counts[("strict", "denied")] >= 1


def test_rate_limiter_counts_window_waits_once_per_request_with_their_seconds() -> None:
    async def main() -> RateLimiter:
        clock = ManualClock(start=0.0)
        limiter = RateLimiter(RateLimit(2, 10**9), clock)
        for _ in range(3):
            await limiter.acquire()
        return limiter

    limiter = asyncio.run(main())
    assert limiter.waits == 1 and limiter.waited_seconds == pytest.approx(60.05)


def test_backoff_counts_each_429_and_the_seconds_slept() -> None:
    backoff = Backoff429()
    delays = [backoff.on_429(None), backoff.on_429(3), backoff.on_429(None)]
    assert delays == [1.0, 3.0, 4.0]
    assert backoff.waits == 3 and backoff.waited_seconds == 8.0
    backoff.on_success()
    assert backoff.waits == 3  # the schedule resets, the count does not
