"""The retry loop around ``inference`` attempts: which errors retry, how long to wait
(docs/scripts/errors.md#retries).

Retrying is safe only because the coordinator performs all egress and re-runs the script from
scratch; a script must tolerate repeated ``inference`` calls, as the reference requires.

A failure the pool blames on the call's own script (its worker crashed running it, it ran out of a
budget, memory kills included, or missed its deadline) is never retried, whatever else marks it
transient: another attempt would only kill another worker and bill another request. A worker lost
for a reason outside the call (``WorkerLost``) is not retried either: the pool already re-runs such
a call, serving the re-run the requests already sent from the call's journal
(``coordinator.providers.journal``); it fails only when a sent request cannot be replayed, and then
a retry would send that request twice. ``RerunDiverged`` (a re-run asked for another request) is
permanent for the same reason.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from coordinator.providers.clock import Clock, MonotonicClock
from coordinator.providers.errors import ProviderError

__all__ = [
    "MAX_TOTAL_SLEEP_SECS",
    "InferenceRetryPolicy",
    "delay_after",
    "retryable",
    "run_with_retries",
]

MAX_TOTAL_SLEEP_SECS = 300.0
_CAPACITY_BASE_SECS = 15.0
_CAPACITY_CAP_SECS = 60.0

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class InferenceRetryPolicy:
    """``[limits] inference_retry_attempts`` (first attempt included) and ``inference_retry_base_ms``."""

    attempts: int = 4
    base_ms: int = 1000


def retryable(error: ProviderError) -> bool:
    """Transient, and not a failure blamed on the call's own script."""
    return error.transient and not error.script_blamed


def delay_after(error: ProviderError, attempt: int, policy: InferenceRetryPolicy) -> float:
    """Delay after failed attempt ``attempt`` (1-based), before the 300 s total clip."""
    if error.capacity:
        if error.retry_after is not None:
            return min(float(error.retry_after), _CAPACITY_CAP_SECS)
        return min(_CAPACITY_BASE_SECS * 2.0 ** (attempt - 1), _CAPACITY_CAP_SECS)
    return policy.base_ms / 1000.0 * 2.0 ** (attempt - 1)


async def run_with_retries(
    attempt_fn: Callable[[int], Awaitable[T]],
    policy: InferenceRetryPolicy,
    clock: Clock | None = None,
    on_retry: Callable[[ProviderError, float], None] | None = None,
) -> T:
    """Call ``attempt_fn(n)`` until it succeeds, fails permanently, or the attempts run out."""
    clock = clock or MonotonicClock()
    slept = 0.0
    attempt = 1
    while True:
        try:
            return await attempt_fn(attempt)
        except ProviderError as err:
            if not retryable(err) or attempt >= policy.attempts:
                raise
            delay = min(delay_after(err, attempt, policy), MAX_TOTAL_SLEEP_SECS - slept)
            if on_retry is not None:
                on_retry(err, delay)
            if delay > 0:
                await clock.sleep(delay)
                slept += delay
            attempt += 1
