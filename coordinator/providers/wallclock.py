"""The wall-clock cap of one provider call (``ProvidersConfig.call_timeout_secs``, default 120 s).

A provider call -- an inference with its retries and waits, a stream, ``count_tokens``,
``list_models``, ``initialize`` -- ends by its cap whatever ``request_timeout_secs`` or a stage's
timeout says (those can only lower it). Each script call inside is given at most what is left of the
cap as its pool deadline, so the pool kills a script that runs on and blames it as for any deadline;
the caller gets :class:`~coordinator.providers.errors.ProviderCallTimeout` (transient) either way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from coordinator import errors as pool_errors
from coordinator.egress.timeouts import timeout_at
from coordinator.providers.errors import ProviderCallTimeout, ProviderError

__all__ = ["GRACE_SECS", "CallCap"]

T = TypeVar("T")

#: How long after the cap the backstop fires: the pool's own deadline (at the cap) answers first, so
#: its kill and blame apply; the backstop only bounds what the pool deadline does not cover.
GRACE_SECS = 0.5


class CallCap:
    """One call's cap: its deadline on the loop's clock, and how a call that met it fails."""

    __slots__ = ("deadline", "secs", "what")

    def __init__(self, secs: float, what: str, deadline: float) -> None:
        self.secs, self.what, self.deadline = secs, what, deadline

    @classmethod
    def start(cls, secs: float, what: str) -> CallCap:
        """The cap of a call starting now."""
        return cls(secs, what, asyncio.get_running_loop().time() + secs)

    def remaining(self) -> float:
        """Seconds left (at least a millisecond, so a deadline handed on is never zero)."""
        return max(self.deadline - asyncio.get_running_loop().time(), 0.001)

    def limit(self, timeout: float) -> float:
        """``timeout`` lowered to what is left of the cap."""
        return min(timeout, self.remaining())

    def expired(self) -> bool:
        """The cap has been reached (within 10 ms: the pool's deadline and ours race by a hair)."""
        return asyncio.get_running_loop().time() >= self.deadline - 0.01

    def error(self) -> ProviderCallTimeout:
        """What the caller gets."""
        return ProviderCallTimeout(
            f"provider {self.what} exceeded its {self.secs:g}s wall-clock cap (call_timeout_secs); "
            "it was stopped"
        )

    def translated(self, error: ProviderError) -> ProviderError:
        """``error`` as :meth:`error` when it is the pool's deadline at the cap, else unchanged."""
        if isinstance(error, ProviderCallTimeout) or not self.expired():
            return error
        if isinstance(error.__cause__, pool_errors.ScriptTimeout):
            timed_out = self.error()
            timed_out.__cause__ = error
            return timed_out
        return error

    async def run(self, awaitable: Awaitable[T]) -> T:
        """Await under the cap (plus :data:`GRACE_SECS` for the pool's deadline to answer first)."""
        try:
            async with timeout_at(self.deadline + GRACE_SECS):
                return await awaitable
        except TimeoutError:
            raise self.error() from None
        except ProviderError as exc:
            translated = self.translated(exc)
            if translated is exc:
                raise
            raise translated from exc
