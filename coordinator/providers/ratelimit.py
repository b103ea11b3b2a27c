"""Per-provider rate limits owned by the coordinator: RPM and TPM windows, 429 backoff
(docs/scripts/errors.md#rate-limits).

One limiter per provider name, shared by every call in the coordinator whatever worker runs it, so
the limits are global. Unlike the reference, ``tokens_per_minute`` is enforced: an attempt waits while
the last 60 s already hold the allowed number of tokens.
"""

from __future__ import annotations

import asyncio
from collections import deque

from coordinator.providers.clock import Clock, MonotonicClock
from coordinator.providers.config import RateLimit

__all__ = ["WINDOW_SECS", "Backoff429", "RateLimiter"]

WINDOW_SECS = 60.0
_SLACK = 0.05


class RateLimiter:
    """Sliding 60 s windows of request times and of ``total_tokens`` per successful response."""

    def __init__(self, limit: RateLimit, clock: Clock | None = None) -> None:
        self.limit = limit
        self.clock = clock or MonotonicClock()
        self._requests: deque[float] = deque()
        self._tokens: deque[tuple[float, int]] = deque()
        self._lock = asyncio.Lock()
        self.waits = 0
        """Requests that had to wait for room in a window (for metrics)."""
        self.waited_seconds = 0.0

    def _prune(self, now: float) -> None:
        while self._requests and self._requests[0] <= now - WINDOW_SECS:
            self._requests.popleft()
        while self._tokens and self._tokens[0][0] <= now - WINDOW_SECS:
            self._tokens.popleft()

    def _wait_needed(self, now: float) -> float:
        """Seconds until both windows have room, or 0 when they have it now."""
        self._prune(now)
        waits = [0.0]
        if len(self._requests) >= self.limit.requests_per_minute:
            waits.append(self._requests[0] + WINDOW_SECS + _SLACK - now)
        used = sum(n for _, n in self._tokens)
        if used >= self.limit.tokens_per_minute:
            for when, n in self._tokens:
                used -= n
                if used < self.limit.tokens_per_minute:
                    waits.append(when + WINDOW_SECS + _SLACK - now)
                    break
        return max(waits)

    async def acquire(self) -> None:
        """Wait (first come, first served) until one more request fits, then record it."""
        async with self._lock:
            waited = False
            while True:
                wait = self._wait_needed(self.clock.now())
                if wait <= 0:
                    self._requests.append(self.clock.now())
                    return
                self.waits += 0 if waited else 1
                self.waited_seconds += wait
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
