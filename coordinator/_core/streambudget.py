"""The pool's budget of buffered stream chunks: bytes held across every stream, and credit by room.

A worker sends a stream's CHUNKs only against credit (RHP flow control).  Per stream, at most
``stream_window`` chunks are ever unconsumed (buffered in its ``CallStream`` or granted and on
their way).  Across streams, more credit is granted only while the bytes buffered plus the bytes
expected for credit already granted (each stream's largest chunk so far, per chunk granted) fit in
``PoolConfig.stream_buffer_bytes``: a stream whose consumer does not read makes its worker wait once
the budget is used — backpressure, never an error — and the wait ends as soon as bytes are read.

The one exception keeps readers moving: a stream with nothing buffered and nothing granted always
gets one credit, so other streams' unread chunks never starve a consumer that reads.  The budget can
thus be exceeded by at most one chunk per stream that holds nothing (and by a chunk larger than its
stream's earlier ones); a stream's CALL opens with that single credit, and more follows as its
chunks arrive and show their size.  Bytes are counted as encoded on the wire (strings by length).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from proto import ProtocolError, pack

__all__ = ["Buffered", "StreamBudget", "StreamFlow", "chunk_bytes"]

_SCALAR_BYTES = 9
"""What a chunk of no measurable size (or one that cannot be re-encoded) is counted as."""


def chunk_bytes(value: Any) -> int:
    """Bytes ``value`` took on the wire: a string's length at once, anything else re-encoded (C speed)."""
    if isinstance(value, (str, bytes)):
        return len(value) + _SCALAR_BYTES
    try:
        return len(pack(value))
    except ProtocolError:  # it came off the wire, so it packs; never let accounting fail a call
        return _SCALAR_BYTES


class Buffered(Protocol):
    """What the budget reads of a ``CallStream``: how many chunks it holds, and its largest so far."""

    @property
    def buffered(self) -> int: ...

    @property
    def largest(self) -> int: ...


class StreamBudget:
    """Chunk bytes buffered across all of a pool's streams, and the flows waiting for room."""

    def __init__(self, limit: int, window: int) -> None:
        self.limit, self.window = limit, window
        self.held = 0
        """Bytes buffered in ``CallStream``s, not yet taken by their consumers."""
        self.peak = 0
        """The most ``held`` has ever been (statistics, tests)."""
        self.reserved = 0
        """Bytes expected for credit granted and not yet used (see ``StreamFlow``)."""
        self._waiting: dict[StreamFlow, None] = {}  # refused credit for lack of room, oldest first

    @property
    def room(self) -> int:
        return self.limit - self.held - self.reserved

    def flow(self, stream: Buffered, send: Callable[[int], object]) -> StreamFlow:
        """The credit state of one attempt of a streaming call; ``send(n)`` grants ``n`` chunks."""
        return StreamFlow(self, stream, send)

    def hold(self, size: int) -> None:
        self.held += size
        self.peak = max(self.peak, self.held)

    def release(self, size: int) -> None:
        """``size`` bytes left the buffers (taken, or dropped with their stream): wake waiting flows."""
        self.held -= size
        if size and self._waiting:
            self.wake()

    def wait(self, flow: StreamFlow) -> None:
        self._waiting[flow] = None

    def forget(self, flow: StreamFlow) -> None:
        self._waiting.pop(flow, None)

    def wake(self) -> None:
        """Offer the room there is to the flows that waited for it, oldest first."""
        for flow in list(self._waiting):
            if self.room <= 0:
                return
            del self._waiting[flow]
            flow.top_up()


class StreamFlow:
    """One attempt's side of its stream's credit: chunks granted to the worker, chunks arrived.

    Each chunk granted and not yet arrived reserves the stream's largest chunk so far in the budget.
    """

    def __init__(self, budget: StreamBudget, stream: Buffered, send: Callable[[int], object]) -> None:
        self._budget, self._stream, self._send = budget, stream, send
        self.granted = self.arrived = 0
        self._reserved = 0
        self.closed = False

    def opening(self) -> int:
        """The window the CALL carries: one chunk (the wire's minimum), until sizes are known."""
        self.granted = 1
        self._reserve()
        return 1

    def arrived_chunk(self) -> None:
        """A chunk arrived (the stream has buffered it already): grant more if there is room."""
        self.arrived += 1
        self._reserve()
        self.top_up()

    def top_up(self) -> None:
        """Grant what the window and the budget allow now; wait for room if the budget refused some."""
        if self.closed:
            return
        n, short = self._grantable()
        if n > 0:
            self.granted += n
            self._reserve()
            self._send(n)
        if short:
            self._budget.wait(self)

    def close(self) -> None:
        """The attempt ended (answer, given up, its worker died): its reservation is returned."""
        if not self.closed:
            self.closed = True
            self._budget.forget(self)
            self._budget.reserved -= self._reserved
            self._reserved = 0
            self._budget.wake()

    def _grantable(self) -> tuple[int, bool]:
        """Chunks to grant now, and whether the budget (not the window) held some back."""
        unconsumed = self._stream.buffered + self.granted - self.arrived
        wanted = self._budget.window - unconsumed
        if wanted <= 0:
            return 0, False
        room, size = self._budget.room, self._stream.largest
        fits = (1 if room > 0 else 0) if size == 0 else max(room // size, 0)
        n = min(wanted, max(fits, 1 if unconsumed == 0 else 0))
        return n, n < wanted

    def _reserve(self) -> None:
        mine = (self.granted - self.arrived) * self._stream.largest
        self._budget.reserved += mine - self._reserved
        self._reserved = mine
