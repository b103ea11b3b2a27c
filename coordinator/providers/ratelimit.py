"""Per-provider rate limits owned by the coordinator: RPM and TPM windows, 429 backoff
(docs/scripts/errors.md#rate-limits).

One limiter per provider name, shared by every call in the coordinator whatever worker runs it, so
the limits are global. Unlike the reference, ``tokens_per_minute`` is enforced: an attempt waits while
the last 60 s already hold the allowed number of tokens.

With several coordinators, a limit shared by several tenants (an operator's table granted to many,
:class:`SharedLimiters`) is divided among the live coordinators: each enforces its share
(:meth:`RateLimiter.set_share`, :func:`share_of`), so the sum of the shares is the limit. A share
changes when a coordinator joins or leaves; the windows keep what they hold, so a sliding minute sees
at most one coordinator's share more than the limit around a change (docs/scaling.md).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from coordinator.providers.clock import Clock, MonotonicClock
from coordinator.providers.config import ProviderTable, RateLimit

__all__ = ["WINDOW_SECS", "Backoff429", "RateLimiter", "SharedLimiters", "share_of"]

WINDOW_SECS = 60.0
_SLACK = 0.05
_RECHECK_SECS = 1.0
"""A divided limiter's longest sleep: a waiting request sees a re-division within a second."""


def share_of(total: int, rank: int, count: int) -> int:
    """Coordinator ``rank``'s part of ``total`` among ``count``: an even split, the remainder one each
    to the first ranks, so the parts add up to ``total`` exactly."""
    if count < 1 or not 0 <= rank < count:
        raise ValueError(f"rank {rank} is not one of {count} coordinators")
    return total // count + (1 if rank < total % count else 0)


class RateLimiter:
    """Sliding 60 s windows of request times and of ``total_tokens`` per successful response."""

    def __init__(self, limit: RateLimit, clock: Clock | None = None) -> None:
        self.limit = limit
        self.requests_allowed = limit.requests_per_minute
        self.tokens_allowed = limit.tokens_per_minute
        self.divided = False
        """Whether this limiter holds a coordinator's share of the limit (:meth:`set_share`)."""
        self.clock = clock or MonotonicClock()
        self._requests: deque[float] = deque()
        self._tokens: deque[tuple[float, int]] = deque()
        self._lock = asyncio.Lock()
        self.waits = 0
        """Requests that had to wait for room in a window (for metrics)."""
        self.waited_seconds = 0.0

    def set_share(self, rank: int, count: int) -> None:
        """Enforce coordinator ``rank``'s share of the limit among ``count`` live ones (0 of 1: all).
        What the windows hold stays: requests already sent count against the new share."""
        self.requests_allowed = share_of(self.limit.requests_per_minute, rank, count)
        self.tokens_allowed = share_of(self.limit.tokens_per_minute, rank, count)
        self.divided = count > 1

    def _prune(self, now: float) -> None:
        while self._requests and self._requests[0] <= now - WINDOW_SECS:
            self._requests.popleft()
        while self._tokens and self._tokens[0][0] <= now - WINDOW_SECS:
            self._tokens.popleft()

    def _wait_needed(self, now: float) -> float:
        """Seconds until both windows have room, or 0 when they have it now."""
        self._prune(now)
        waits = [0.0]
        if len(self._requests) >= self.requests_allowed:
            waits.append(self._requests[0] + WINDOW_SECS + _SLACK - now if self._requests else WINDOW_SECS)
        used = sum(n for _, n in self._tokens)
        if used >= self.tokens_allowed:
            waits.append(WINDOW_SECS)  # a share of 0 tokens: until a re-division gives this one some
            for when, n in self._tokens:
                used -= n
                if used < self.tokens_allowed:
                    waits[-1] = when + WINDOW_SECS + _SLACK - now
                    break
        wait = max(waits)
        return min(wait, _RECHECK_SECS) if self.divided and wait > 0 else wait

    async def acquire(self) -> float:
        """Wait (first come, first served) until one more request fits, then record it; the seconds
        waited (0.0 when there was room)."""
        async with self._lock:
            waited = False
            slept = 0.0
            while True:
                wait = self._wait_needed(self.clock.now())
                if wait <= 0:
                    self._requests.append(self.clock.now())
                    return slept
                self.waits += 0 if waited else 1
                self.waited_seconds += wait
                slept += wait
                waited = True
                await self.clock.sleep(wait)

    def record_tokens(self, total_tokens: int) -> None:
        """Count a successful response's tokens toward the TPM window."""
        if total_tokens > 0:
            self._tokens.append((self.clock.now(), total_tokens))

    def tokens_in_window(self) -> int:
        """Tokens recorded in the last 60 s."""
        self._prune(self.clock.now())
        return sum(n for _, n in self._tokens)


class Backoff429:
    """Consecutive-429 counter of the broker: Retry-After if given, else 1, 2, 4 ... 32 s."""

    def __init__(self) -> None:
        self.count = 0
        self.waits = 0
        """429s slept on, and the seconds slept (for metrics)."""
        self.waited_seconds = 0.0

    def on_429(self, retry_after: int | None) -> float:
        """Count one more 429 and return how long to sleep before the script sees it."""
        self.count += 1
        backoff = min(2 ** (min(self.count, 6) - 1), 60)
        delay = float(retry_after if retry_after is not None else backoff)
        self.waits += 1
        self.waited_seconds += delay
        return delay

    def on_success(self) -> None:
        """Any 2xx resets the schedule."""
        self.count = 0


class SharedLimiters:
    """The limiters of tables several tenants share (the operator's, granted to many): one per
    provider, whichever tenant's runtime calls it, divided among the live coordinators (:meth:`divide`).

    ``shared(name, table)`` says whether a table is one of those (the service's: it equals the
    operator's table of that name); a tenant's own table keeps a limiter of its own, in its runtime.
    Only the windows are shared: each runtime keeps its own 429 backoff and counts its own waits.
    """

    def __init__(self, shared: Callable[[str, ProviderTable], bool], clock: Clock | None = None) -> None:
        self.shared = shared
        self.clock = clock or MonotonicClock()
        self.rank, self.count = 0, 1
        self._limiters: dict[str, tuple[RateLimit, RateLimiter]] = {}

    def get(self, name: str, table: ProviderTable) -> RateLimiter | None:
        """The shared limiter of this table (made at its first call, at this coordinator's share), or
        None when the table is not shared or has no ``rate_limit``."""
        limit = table.rate_limit
        if limit is None or not self.shared(name, table):
            return None
        entry = self._limiters.get(name)
        if entry is None or entry[0] != limit:
            limiter = RateLimiter(limit, self.clock)
            limiter.set_share(self.rank, self.count)
            entry = self._limiters[name] = (limit, limiter)
        return entry[1]

    def divide(self, rank: int, count: int) -> None:
        """This coordinator is ``rank`` of ``count`` live ones: every shared limit takes that share."""
        share_of(0, rank, count)  # the same check
        if (rank, count) == (self.rank, self.count):
            return
        self.rank, self.count = rank, count
        for _limit, limiter in self._limiters.values():
            limiter.set_share(rank, count)
