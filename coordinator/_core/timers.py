"""``TimerHeap``: many deadlines on one event-loop timer (the pool's attempts, egress's timeouts).

Named apart from ``coordinator._core.config.Deadlines`` (the pool's configured durations): a ``Timer``
is one armed deadline, a ``TimerHeap`` holds many.

A pool attempt arms its deadline when it starts and almost always disarms it microseconds later
(its answer came); an inference's HTTP timeout and job bound likewise end with the answer.  A
``call_later`` per deadline costs a ``TimerHandle``, a heap push and pop through Python-level
comparisons, and the loop's own clean-up of cancelled handles; here a deadline is one tuple on a heap
of our own, cancelled by a flag, and the loop holds one timer: for the earliest deadline still
armed.  Expiry is as exact as ``call_at``'s (the same loop clock).

A ``TimerHeap`` belongs to the running loop it is used on and keeps no reference to it (it asks
``asyncio.get_running_loop()``), so one kept per loop in a weak mapping lets a closed loop go.
Used by the pool's core and by ``coordinator.egress``: it imports only the standard library, so it is
the one module of ``_core`` egress may import (``tests/test_layering.py`` holds both rules).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import weakref
from collections.abc import Callable
from typing import Final, Generic, TypeVar

__all__ = ["Timer", "TimerHeap"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_SLACK: Final = 64
"""Cancelled entries tolerated beyond the armed ones before the heap is rebuilt without them."""


class Timer(Generic[T]):
    """One armed deadline; ``cancel()`` disarms it (idempotent)."""

    __slots__ = ("_owner", "subject", "when")

    def __init__(self, owner: TimerHeap[T], subject: T, when: float) -> None:
        self._owner: TimerHeap[T] | None = owner
        self.subject: T | None = subject
        self.when = when

    def cancel(self) -> None:
        owner, self._owner, self.subject = self._owner, None, None
        if owner is not None:
            owner.disarmed()

    @property
    def armed(self) -> bool:
        return self._owner is not None


class TimerHeap(Generic[T]):
    """The deadlines of many subjects; ``expired(subject)`` runs on the loop as each one passes."""

    def __init__(self, expired: Callable[[T], None]) -> None:
        self._expired = expired
        self._heap: list[tuple[float, int, Timer[T]]] = []
        self._order = itertools.count()
        self._armed = 0
        self._timer: weakref.ref[asyncio.TimerHandle] | None = None
        """The loop's one timer, weakly: the loop holds it while it is pending, and a strong reference
        here would keep the loop alive from any mapping that keeps this object (see above)."""
        self._timer_at = float("inf")

    def __len__(self) -> int:
        """Timers armed now."""
        return self._armed

    def arm(self, subject: T, delay: float) -> Timer[T]:
        """``expired(subject)`` in ``delay`` seconds, unless the returned deadline is cancelled first."""
        return self.arm_at(subject, asyncio.get_running_loop().time() + delay)

    def arm_at(self, subject: T, when: float) -> Timer[T]:
        """``expired(subject)`` once the loop's clock reaches ``when``, unless cancelled first."""
        deadline = Timer(self, subject, when)
        heapq.heappush(self._heap, (when, next(self._order), deadline))
        self._armed += 1
        if when < self._timer_at:
            self._schedule(when)
        return deadline

    def disarmed(self) -> None:
        """One deadline was cancelled (``Timer.cancel``): drop the dead weight once it dominates."""
        self._armed -= 1
        heap = self._heap
        if len(heap) > 2 * self._armed + _SLACK:
            self._heap = [entry for entry in heap if entry[2].armed]
            heapq.heapify(self._heap)

    def _schedule(self, when: float) -> None:
        self._cancel_timer()
        self._timer_at = when
        self._timer = weakref.ref(asyncio.get_running_loop().call_at(when, self._fire))

    def _cancel_timer(self) -> None:
        timer = None if self._timer is None else self._timer()
        if timer is not None:
            timer.cancel()

    def _fire(self) -> None:
        self._timer, self._timer_at = None, float("inf")
        now, heap, due = asyncio.get_running_loop().time(), self._heap, []
        while heap and (heap[0][0] <= now or not heap[0][2].armed):
            deadline = heapq.heappop(heap)[2]
            if deadline.armed:
                due.append(deadline)
        for deadline in due:  # an earlier one's handling may cancel a later one: check again
            subject = deadline.subject
            if subject is None:
                continue
            deadline.cancel()
            try:
                self._expired(subject)
            except Exception:  # a timer callback: nothing may escape into the event loop
                log.exception("deadline handling failed")
        heap = self._heap  # a cancel above may have rebuilt it
        while heap and not heap[0][2].armed:
            heapq.heappop(heap)
        if heap and self._timer is None:
            self._schedule(heap[0][0])

    def close(self) -> None:
        """Disarm everything (the pool is closing)."""
        self._cancel_timer()
        self._timer, self._timer_at = None, float("inf")
        for _, _, deadline in self._heap:
            deadline.cancel()
        self._heap.clear()
