"""Call bookkeeping: a ``CallRecord`` (what the caller asked), its ``Attempt``s (one per worker tried),
the ``CallResult`` it ends with, and the ``CallStream`` a streaming caller iterates.

A call is finished exactly once, by ``CallRecord.finish``; later outcomes are ignored
(and counted), so nothing is ever answered twice.

Just past 400 lines: the four types share one lifetime (a call, its attempts, its result, its
stream), and each reads the others' fields on the hot path.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

from coordinator._core.errors import CallFailed, Cancelled
from proto import Chunk, Kind, Op

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from coordinator._core.handles import ScriptHandle
    from coordinator._core.hostcalls import Spawn
    from coordinator._core.streambudget import StreamBudget, StreamFlow
    from coordinator._core.timers import Timer
    from coordinator._core.workers import Placement

log = logging.getLogger(__name__)

__all__ = [
    "MIN_ATTEMPT_TIME",
    "Attempt",
    "CallEnded",
    "CallRecord",
    "CallResult",
    "CallStream",
    "HostHandler",
    "InvalidChunk",
    "Observers",
    "Resident",
]


MIN_ATTEMPT_TIME: Final = 0.01
"""Seconds of its timeout a call needs left to be tried (again); a CALL cannot carry a zero timeout."""


class HostHandler(Protocol):
    """What ``pool.call(..., host=handler)`` needs from the provider runtime.

    ``call(name, args)`` performs a brokered host function (``http_get``,
    ``http_post``, ``env_var``) and returns its value; raising
    ``coordinator.errors.HostCallError(value)`` throws ``value`` into the script
    (catchable).  ``stream(name, args)`` serves ``stream_request``: each yielded
    SSE payload string is delivered to the script's callback, at most
    ``PoolConfig.stream_window`` un-acknowledged at a time.

    Every member is required; the pool runs each host call as a task of its own in its TaskGroup,
    cancelled when the attempt ends (``coordinator._core.hostcalls``).
    """

    @property
    def sent(self) -> bool:
        """The call's record of side effects: ``True`` once a request made for it may have left the
        machine.  Only the handler knows (an ``env_var`` or a request its policy refused sends
        nothing), and the pool re-runs a call whose worker died only while it is ``False``."""
        ...

    def begin_attempt(self, spawn: Spawn) -> None:
        """An attempt of the call is sent (the first and every re-run): a handler that records its
        requests serves a re-run from that record (``providers/journal.py``); others do nothing.
        ``spawn`` runs a task in the pool's TaskGroup, for work that must outlive the attempt (it
        ends with the pool); such a task must not raise."""

    async def call(self, name: str, args: list[Any]) -> Any:
        """Perform the unary host function ``name``; its value, or ``HostCallError`` for the script."""
        ...

    def stream(self, name: str, args: list[Any]) -> AsyncIterator[Any]:
        """Serve ``stream_request``: the SSE payloads, in order."""
        ...


class Resident(Protocol):
    """What ``pool.call(..., resident=...)`` takes: entries kept in the worker, sent whole or as a delta.

    ``coordinator.regions.resident.ResidentCall`` is the implementation; the
    worker splices the list into ``args[0]["entries"]`` (RHP §6.3).
    """

    def holds(self, worker_id: str) -> bool:
        """Whether ``worker_id`` is believed to hold the base version (routing prefers it)."""
        ...

    def wire(self, worker_id: str) -> dict[str, Any]:
        """The CALL's ``resident`` field for ``worker_id`` (a delta only if it holds the base)."""
        ...

    def lost(self, worker_id: str) -> bool:
        """The worker answered ``ResidentMissing``; ``True`` if resending the whole list may help."""
        ...


@dataclass(frozen=True, slots=True)
class InvalidChunk:
    """A stream item standing for a chunk the script emitted that had no wire form
    (docs/scripts/providers.md#streamstate-request-on_chunk)."""

    message: str


@dataclass(frozen=True, slots=True)
class CallResult:
    """A successful call: its value and what it cost in the worker."""

    value: Any
    wall: float
    """Seconds the script ran (engine wall clock)."""
    cpu: float
    """CPU seconds of the script's thread."""
    peak_rss: int
    """Peak resident bytes of the worker process so far (a process-wide high-water mark)."""
    operations: int
    output: tuple[str, ...]
    """Captured ``print``/``debug`` lines (size-capped by the engine)."""
    worker_id: str
    attempts: int


@dataclass(frozen=True, slots=True)
class CallEnded:
    """What ``Pool.observe`` observers hear as each call submitted to the pool ends (metrics, logs).

    A call refused at the door (a quota, quarantine, a full queue) ends too, with ``queue_wait`` None.
    """

    call_id: int
    tenant: str
    kind: str
    """``"region"`` or ``"provider"``."""
    op: str
    """``"load"``, ``"call"`` or ``"stream"``."""
    script: str
    function: str
    queue_wait: float | None
    """Seconds from admission until its first attempt was sent to a worker; None if none was."""
    result: CallResult | None
    error: BaseException | None
    """The failure (``None`` on success or when the caller cancelled)."""


class CallStream:
    """Chunks of a streaming call as an async iterator; ``result`` holds the final value afterwards.

    Iteration raises the call's error if it failed.  Chunks are buffered here until taken, within
    ``stream_window`` chunks per stream and ``stream_buffer_bytes`` for all streams of the pool
    (``coordinator._core.streambudget``): each chunk taken frees its bytes and lets the worker send
    more.  A consumer that stops early calls ``aclose()`` (or uses ``contextlib.aclosing``): the
    call is cancelled in its worker instead of waiting there for credit, and what it buffered is
    dropped.  A stream dropped unread returns its bytes to the budget when it is collected.
    """

    def __init__(self, budget: StreamBudget | None = None) -> None:
        self._chunks: deque[tuple[Any, int]] = deque()
        self._wakeup = asyncio.Event()
        self._outcome: CallResult | BaseException | None = None
        self._held = _Held(budget)
        weakref.finalize(self, self._held.drop).atexit = False  # at exit the pool is gone: nothing to return
        self.largest = 0
        """The largest chunk this stream has buffered, in bytes (the budget's estimate of the next)."""
        self.credit: Callable[[int], None] = lambda n: None
        self.cancel: Callable[[], object] = lambda: None

    @property
    def buffered(self) -> int:
        """Chunks buffered, not yet taken."""
        return len(self._chunks)

    def push(self, value: Any, size: int = 0) -> None:
        """Buffer a chunk the worker sent; ``size``: its bytes, counted against the pool's budget."""
        self._chunks.append((value, size))
        self.largest = max(self.largest, size)
        self._held.add(size)
        self._wakeup.set()

    def close(self, outcome: CallResult | BaseException) -> None:
        if self._outcome is None:
            self._outcome = outcome
        self._wakeup.set()

    def __aiter__(self) -> CallStream:
        return self

    async def aclose(self) -> None:
        """Cancel the call if it has not ended (idempotent); iteration then ends with ``Cancelled``.

        Chunks not yet taken are dropped (their bytes return to the pool's budget)."""
        self._chunks.clear()
        self._held.drop()
        if self._outcome is None:
            self.cancel()
            self.close(Cancelled("the stream was closed by its consumer before the call ended"))

    async def __anext__(self) -> Any:
        while not self._chunks and self._outcome is None:
            self._wakeup.clear()
            await self._wakeup.wait()
        if self._chunks:
            value, size = self._chunks.popleft()
            self._held.sub(size)
            self.credit(1)
            return value
        if isinstance(self._outcome, BaseException):
            raise self._outcome
        raise StopAsyncIteration

    @property
    def result(self) -> CallResult:
        """The final outcome; only valid once iteration has ended."""
        if not isinstance(self._outcome, CallResult):
            raise RuntimeError("the stream has not finished successfully")
        return self._outcome

    @property
    def value(self) -> Any:
        return self.result.value


class _Held:
    """The bytes one stream holds in the pool's budget; apart from the stream so that its finalizer
    (which must not reference the stream) can return them."""

    __slots__ = ("_budget", "_bytes")

    def __init__(self, budget: StreamBudget | None) -> None:
        self._budget, self._bytes = budget, 0

    def add(self, size: int) -> None:
        self._bytes += size
        if self._budget is not None:
            self._budget.hold(size)

    def sub(self, size: int) -> None:
        self._bytes -= size
        if self._budget is not None:
            self._budget.release(size)

    def drop(self) -> None:
        self.sub(self._bytes)


@dataclass(eq=False, slots=True)
class CallRecord:
    """One request from a caller; ends exactly once with a ``CallResult`` or a ``CallFailed``."""

    id: int
    handle: ScriptHandle
    op: Op
    fn: str
    args: list[Any]
    timeout: float
    tenant: str
    future: asyncio.Future[CallResult]
    host: HostHandler | None = None
    stream: CallStream | None = None
    enqueued_at: float = 0.0
    deadline: float | None = None
    """``timeout`` seconds after its first attempt started: re-runs get only what is left of it."""
    retries: int = 0
    chunks: int = 0
    attempt: Attempt | None = None
    resident: Resident | None = None
    alone: bool = False
    """Its script is a suspect (``coordinator._core.isolation``): run it on a worker holding nothing else."""
    started_at: float | None = None
    """When its first attempt was sent (monotonic): ``started_at - enqueued_at`` is its queue wait."""
    waiting: Timer[CallRecord] | None = None
    """Its deadline while it waits in the queue to be re-run (disarmed as it is sent)."""
    settle: Callable[[CallRecord], None] | None = None
    """Whoever keeps the books of calls (the dispatcher): told once ``future`` is done, through
    ``on_done``, or directly by the dispatcher as the answer arrives (``on_done`` then taken back)."""
    context: contextvars.Context | None = None
    """The caller's context when the call was submitted: its books are settled (and observers
    told, e.g. a service's per-request log fields) in it, where its done callback would run."""
    inline: bool = field(init=False)
    """Region calls and loads run on the worker's loop thread, one at a time.  Set once (``op`` and
    ``handle`` never change): placement and the dispatcher ask it several times per call."""

    def __post_init__(self) -> None:
        self.inline = self.op is Op.LOAD or (self.op is Op.CALL and self.handle.kind is Kind.REGION)

    def on_done(self, future: asyncio.Future[CallResult]) -> None:
        """``future``'s done callback.  A bound method, not a closure: one object per call instead of
        three, and equal to itself for ``remove_done_callback`` without being kept anywhere."""
        if self.settle is not None:
            self.settle(self)

    def resident_elsewhere(self, worker_id: str) -> bool:
        """Routing: this call's resident entries are not believed to be at ``worker_id``."""
        return self.resident is not None and not self.resident.holds(worker_id)

    def resend_whole(self, worker_id: str, error_cls: str) -> bool:
        """The worker failed us with ``error_cls``:
        ``True`` if it lost our resident list and a resend helps."""
        return error_cls == "ResidentMissing" and self.resident is not None and self.resident.lost(worker_id)

    @property
    def done(self) -> bool:
        return self.future.done()

    @property
    def side_effects(self) -> bool:
        """A request of this call may have left the machine (its host handler's record)."""
        return self.host is not None and self.host.sent

    def time_left(self, now: float) -> float:
        """Seconds of its ``timeout`` not yet used (the whole of it before its first start)."""
        return self.timeout if self.deadline is None else self.deadline - now

    def attempt_timeout(self, now: float) -> float:
        """The engine deadline a new attempt is sent with: the timeout as asked the first time (the
        wire refuses one it cannot carry), then what is left of it, never below a sendable minimum."""
        return self.timeout if self.deadline is None else max(self.deadline - now, MIN_ATTEMPT_TIME)

    def ended(self) -> CallEnded:
        """This call's end, for the pool's observers (only once it is done)."""
        f = self.future
        result = f.result() if not f.cancelled() and f.exception() is None else None
        error = None if f.cancelled() else f.exception()
        wait = None if self.started_at is None else self.started_at - self.enqueued_at
        return CallEnded(
            self.id, self.tenant, self.handle.kind.value, self.op.value, self.handle.name, self.fn, wait,
            result, error,
        )  # fmt: skip

    def top_up(self) -> None:
        """Its streaming caller took chunks: let the worker send more, as the pool's stream budget allows."""
        attempt = self.attempt
        if attempt is not None and attempt.flow is not None and attempt.wire_id in attempt.worker.attempts:
            attempt.flow.top_up()

    def finish(self, outcome: CallResult | CallFailed | BaseException) -> bool:
        """Resolve the call; ``False`` if it already had an outcome."""
        if self.future.done():
            return False
        if isinstance(outcome, CallResult):
            self.future.set_result(outcome)
        else:
            self.future.set_exception(outcome)
        if self.stream is not None:
            self.stream.close(outcome)
        return True


class Observers(list["Callable[[CallEnded], None]"]):
    """``Pool.observe``'s observers: told of every call's end; they must be quick and must not raise."""

    def tell(self, call: CallRecord) -> None:
        """Tell each observer ``call`` ended; one that raises is logged, never allowed to break a call."""
        if not self:
            return
        ended = call.ended()
        for observer in self:
            try:
                observer(ended)
            except Exception:  # an observer's bug must not leak into the call path
                log.exception("call observer %r failed", observer)


@dataclass(eq=False, slots=True)
class Attempt:
    """One try of a call on one worker, under its own wire id."""

    wire_id: int
    call: CallRecord
    worker: Placement
    sent_at: float
    """When its CALL went out (``outcomes.reached``)."""
    timer: Timer[Attempt] | None = None
    """Its call's deadline while it runs, then (answered at the deadline, still running) its kill grace."""
    host_tasks: dict[int, asyncio.Task[None]] = field(default_factory=dict)
    host_seq: int = 0
    """The last HOST_CALL id: a worker numbers them 1, 2, 3, ... per call."""
    flow: StreamFlow | None = None
    """A stream's CHUNK credit (granted, arrived), within the pool's ``StreamBudget``."""
    host_credit: dict[int, asyncio.Semaphore] = field(default_factory=dict)
    next_chunk: int = 0
    engine_timeout: float = 0.0
    """The engine deadline its CALL carried: the worker stops the script that long after starting it."""
    engine_deadline: float = 0.0
    """When the worker's engine ends it at the latest (monotonic; set as it starts running there):
    its worker is killed only ``kill_grace`` past both this and the call's deadline."""

    def cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def accept_chunk(self, message: Chunk, size: Callable[[Any], int]) -> str | None:
        """Hand a CHUNK to the caller's stream; the violation, if it is out of order or beyond credit."""
        flow, stream = self.flow, self.call.stream
        if flow is None or stream is None or message.seq != self.next_chunk or message.seq >= flow.granted:
            return f"CHUNK {message.seq} out of order or beyond the window"
        self.next_chunk += 1
        self.call.chunks += 1
        if message.error is None:
            stream.push(message.value, size(message.value))
        else:
            stream.push(InvalidChunk(message.error), size(message.error))
        flow.arrived_chunk()
        return None

    def abandon(self) -> None:
        """Stop everything this attempt started on the coordinator side."""
        self.cancel_timer()
        if self.flow is not None:
            self.flow.close()
        for task in self.host_tasks.values():
            task.cancel()
        self.host_tasks.clear()
