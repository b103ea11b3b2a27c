"""Route calls to workers and settle every outcome exactly once.

    Pool.call ─▶ submit ─▶ AdmissionControl (quarantine, quotas) ─▶ FairQueue (bounded, per-tenant rotation)
                   │            │ pump: Placements.pick (room, then AST affinity), a live process
                   ▼            ▼
              Attempts.start ──CALL (source only on a miss)──▶ worker
                   │  ◀──CHUNK──── (stream: → CallStream, CREDIT back per chunk taken)
                   │  ◀──HOST_CALL─ → HostBridge task → handler → HOST_REPLY / HOST_CHUNK ──▶
                   │  ◀──RESULT / ERROR ── finish(call) exactly once; late or foreign replies dropped
       deadlines and kills: ``Attempts`` (coordinator._core.attempts)
       worker exit (Events.worker_exited) → ``Deaths.settle``: fail, or re-run with what is left of
                       the timeout (a call ends by its timeout, re-runs included)

Built with the supervisor (it attaches itself as that supervisor's ``Events``) and the pool's
observers; owns the queue, the ``Placements``, the attempt table and death settlement; reads process
records, never writes them.  Inline calls (region ``call``, every ``load``) run one at a time on a
worker's loop thread, up to ``region_pipeline`` queued there; threaded calls (provider, streams) run
up to the worker's capacity at once.  Every admitted call leaves the books in ``_settled``, once;
``statistics()`` is the one reader of the counters.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coordinator._core import outcomes
from coordinator._core.admission import AdmissionControl
from coordinator._core.attempts import Attempts
from coordinator._core.calls import Attempt, CallRecord, CallResult, Observers
from coordinator._core.config import PoolConfig
from coordinator._core.deaths import Deaths
from coordinator._core.errors import CallFailed, Overloaded, PoolClosed
from coordinator._core.hostcalls import HostBridge, Spawn
from coordinator._core.isolation import Suspects
from coordinator._core.kills import KillReason
from coordinator._core.placement import Placements
from coordinator._core.quarantine import Quarantine
from coordinator._core.queue import FairQueue
from coordinator._core.quotas import QuotaTable
from coordinator._core.streambudget import StreamBudget, chunk_bytes
from coordinator._core.supervisor import Supervisor
from coordinator._core.timers import TimerHeap
from coordinator._core.transport import Router
from coordinator._core.waiting import Changes
from coordinator._core.workers import Placement, WorkerProcess
from proto import (
    FROM_WORKER,
    Chunk,
    Credit,
    Error,
    ErrorClass,
    HostCall,
    Op,
    ProtocolError,
    Result,
    encode_call,
)

__all__ = ["Dispatcher", "DispatcherStatistics"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DispatcherStatistics:
    """The dispatcher's counters at one moment (``Dispatcher.statistics``)."""

    queued: int
    inflight: int
    """Calls admitted and not yet settled (queued or at workers)."""
    ok: int
    failed: int
    retries: int
    dropped: int
    """Messages from workers dropped (unknown peers, replies for calls not held)."""
    protocol_errors: int
    quarantined: int
    stream_bytes: int
    stream_bytes_peak: int
    queued_by_tenant: dict[str, int]
    inflight_by_tenant: dict[str, int]
    """Calls held by workers, per tenant."""


class Dispatcher:
    """The call state machine; see the module docstring for the flow."""

    def __init__(
        self,
        config: PoolConfig,
        router: Router,
        supervisor: Supervisor,
        spawn: Spawn,
        quotas: QuotaTable,
        observers: Observers,
    ) -> None:
        self._config, self._router, self._supervisor = config, router, supervisor
        self._queue = FairQueue()
        self._quarantine = Quarantine(config.retry)
        self._suspects = Suspects(config.retry.window)
        self._host = HostBridge(router.send_frames, spawn, config.stream_window)
        self._waits: TimerHeap[CallRecord] = TimerHeap(self._wait_passed)
        """A re-run waiting in the queue ends at its deadline, not at the next tick."""
        self.streams = StreamBudget(config.stream_buffer_bytes, config.stream_window)
        self.placements = Placements(config, quotas, self._queue, self._quarantine)
        self.admission = self._admission = AdmissionControl(quotas, self._quarantine)
        self._attempts = Attempts(config, router, supervisor, self.placements, self.pump, spawn)
        self._deaths = Deaths(config, self._attempts, self._quarantine, self._suspects)
        self._observers = observers
        self._closing = False
        self._inflight: dict[int, CallRecord] = {}
        self._left = Changes()  # notified as each call leaves the books (``wait_settled``)
        self._ok = self._failed = self._retries = self._dropped = self._protocol_errors = 0
        self._settle = self._settled  # one bound method for every call's ``settle``
        supervisor.attach(self)

    # -- submission ----------------------------------------------------------
    def submit(self, call: CallRecord) -> None:
        """Place or queue ``call``; failures (closed, quarantined, overloaded) finish it at once."""
        now = time.monotonic()
        if self._closing:
            call.finish(PoolClosed("the pool is closed"))
            return
        if refused := self._admission.refuse(call, now, self.placements.per_tenant.get(call.tenant, 0)):
            call.finish(refused)  # quarantined, or over one of its tenant's quotas
            self._observers.tell(call)
            return
        if len(self._queue) >= self._config.queue_size:
            full = f"queue full ({self._config.queue_size} calls waiting)"
            victim = self._queue.push_out_for(call.tenant)
            if victim is None:
                call.finish(Overloaded(f"{full}; tenant {call.tenant!r} holds the most"))
                self._observers.tell(call)
                return
            victim.finish(Overloaded(f"{full}; pushed out: tenant {victim.tenant!r} holds the most"))
        call.enqueued_at = now
        call.alone = call.alone or self._suspects.isolate(call.handle.sha256, now)
        self._inflight[call.id] = call
        self._admission.admitted(call)
        call.settle = self._settle
        call.context = contextvars.copy_context()
        call.future.add_done_callback(call.on_done, context=call.context)
        if self._queue or not self._place(call):
            self._queue.push(call)

    def _settled(self, call: CallRecord) -> None:
        self._inflight.pop(call.id, None)
        self._admission.settled(call, time.monotonic())
        self._left.notify()
        if call.future.cancelled() or call.future.exception() is not None:
            self._failed += 1
        else:
            self._ok += 1
        self._observers.tell(call)
        attempt = call.attempt
        # The caller gave up (its task was cancelled): stop a threaded attempt on the worker too.  An
        # inline attempt keeps its place (it is running or queued at the worker); its answer is dropped.
        if attempt is not None and not call.inline and attempt.wire_id in attempt.worker.attempts:
            self._attempts.forget(attempt, cancel=True)
        # Nothing asks for it once the call has ended, and it closes a reference cycle (call -> attempt
        # -> call): dropping it lets refcounting free the call, its future and its attempt at once
        # instead of leaving them to the cyclic collector.
        call.attempt = None

    def _place(self, call: CallRecord) -> bool:
        """Send ``call`` to the best worker still alive; ``False`` if none can take it now.

        A re-run (sent before: it has a deadline) whose timeout ran out while it waited ends here
        instead: a worker that came up before the ticker looked must not run it."""
        if call.deadline is not None and call.time_left(time.monotonic()) <= 0:
            call.finish(outcomes.out_of_time(call, None))
            return True
        while (worker := self.placements.pick(call)) is not None:
            if self._supervisor.alive(worker.process):
                self._send_attempt(call, worker)
                return True
            self.placements.refresh()  # exited, its pidfd not served yet: its exit settles it soon
        return False

    def pump(self) -> None:
        """Place queued calls, tenant by tenant in rotation, until nothing more fits."""
        queue, placements = self._queue, self.placements
        if not queue and not placements.any_reserved:
            return  # nothing waits, nothing is held back: the common case after each answer
        progress, heads = True, []
        while progress and queue:
            progress, heads = False, queue.head_list()
            for call in heads:
                if call.done or (placements.has_room(call.inline) and self._place(call)):
                    queue.pop(call)  # placed, or its caller gave up while it waited
                    progress = True
        # A round that changed nothing leaves its snapshot of the heads current: no second one needed.
        placements.reserve(placements.apart_waiting(heads) if queue else False)

    def _send_attempt(self, call: CallRecord, worker: Placement) -> None:
        handle, key, now = call.handle, (call.handle.kind, call.handle.sha256), time.monotonic()
        wire, identity = self._attempts.wire_id(), worker.identity
        source = None if key in worker.scripts else handle.source
        flow = (
            None
            if call.stream is None
            else self.streams.flow(call.stream, lambda n: self._router.send(identity, Credit(wire, 0, n)))
        )
        try:
            frames = encode_call(
                wire, call.op, handle.kind, handle.sha256, call.fn, call.args, call.attempt_timeout(now),
                call.tenant, handle.name, source,
                self._config.stream_window if flow is None else flow.opening(),
                None if call.resident is None else call.resident.wire(worker.id),
            )  # fmt: skip
        except ProtocolError as exc:
            if flow is not None:
                flow.close()
            call.finish(CallFailed(f"arguments cannot be sent to a worker: {exc}", cause="invalid arguments"))
            return
        worker.scripts.add(key)
        if call.waiting is not None:  # a re-run leaves the queue: its attempt's deadline takes over
            call.waiting.cancel()
            call.waiting = None
        if call.alone:
            worker.alone, worker.reserved = True, False
        self.placements.placed(call.tenant)
        if call.started_at is None:
            call.started_at = now
        self._attempts.start(wire, call, worker, flow, now)
        if not self._router.send_frames(worker.identity, frames):
            self._supervisor.kill(worker.process, KillReason.UNREACHABLE)

    # -- the queue's timers ----------------------------------------------------
    def _wait_passed(self, call: CallRecord) -> None:
        """A re-run still waiting for a worker when its timeout ran out ends now."""
        call.waiting = None
        if not call.done and any(c is call for c in self._queue.put_back()):
            self._queue.pop(call)
            call.finish(outcomes.out_of_time(call, None))

    def _put_back(self, call: CallRecord) -> None:
        """Queue ``call`` again at the front (a re-run or a resend), to end at its deadline if it waits."""
        self._queue.push(call, front=True)
        if call.deadline is not None and call.waiting is None:
            call.waiting = self._waits.arm(call, max(0.0, call.deadline - time.monotonic()))

    # -- messages from workers (the pool's inbox routes the call-level ones here) ----------------
    def drop_foreign(self, identity: bytes, message: Any, *, known: bool) -> None:
        """A message from an unknown peer, or from a liar being stopped: nothing it says is trusted."""
        self._dropped += 1
        if not known:
            log.warning("dropped a message from unknown peer %s: %s", identity[:16].hex(), message)

    def on_message(self, process: WorkerProcess, message: Any) -> None:
        worker = self.placements.get(process)
        plain = type(message) is Result  # the most frequent message: one type check
        if not plain and (isinstance(message, ProtocolError) or type(message).COMMAND not in FROM_WORKER):
            self.violation(process, worker.head if worker else None, message)
        elif worker is None:  # not (or no longer) holding calls: nothing it says concerns one
            self._drop(None, message)
        elif plain or isinstance(message, Error):
            self._complete(worker, message)
        elif isinstance(message, Chunk):
            self._on_chunk(worker, message)
        elif isinstance(message, (HostCall, Credit)) and (attempt := worker.attempts.get(message.id)):
            if (wrong := self._host.receive(attempt, message)) is not None:
                self.violation(process, attempt, wrong)
        elif isinstance(message, HostCall):
            self._drop(worker, message)

    def violation(self, process: WorkerProcess, target: Attempt | None, what: object) -> None:
        """A worker broke the protocol: it is stopped, and only ``target`` (its call) is blamed."""
        self._protocol_errors += 1
        log.warning("worker %s violated the protocol: %s", process.id, what)
        self._attempts.kill(process, KillReason.PROTOCOL, target)

    def _drop(self, worker: Placement | None, message: Any) -> None:
        if worker is None or worker.zombies.get(message.id) is None:
            self._dropped += 1
            name, wid = type(message).__name__, worker.id if worker else "?"
            log.warning("worker %s sent %s for call %s it does not hold; dropped", wid, name, message.id)

    def _complete(self, worker: Placement, message: Result | Error) -> None:
        attempt = worker.attempts.pop(message.id, None)
        if attempt is None:
            if not self._attempts.late_reply(worker, message.id):
                self._dropped += 1
                log.warning("worker %s answered call %d it does not hold; dropped", worker.id, message.id)
            return
        self._attempts.detach(attempt)
        call = attempt.call
        if call.alone:
            self._suspects.finished_alone(call.handle.sha256)
        settled_here = False
        if isinstance(message, Error) and message.cls == ErrorClass.SCRIPT_MISSING:
            worker.scripts.discard((call.handle.kind, call.handle.sha256))
            self._put_back(call)
        elif isinstance(message, Error) and call.resend_whole(worker.id, message.cls):
            self._put_back(call)  # resent with the whole list, like ScriptMissing
        elif isinstance(message, Error):
            settled_here = self._answer(call, outcomes.from_error(call, worker, message))
        elif call.op == Op.LOAD and outcomes.described_functions(message.value) is None:
            call.finish(outcomes.lying_worker(call, worker, "its description of the script is malformed"))
            self.violation(worker.process, attempt, "malformed load result")
        else:
            settled_here = self._answer(call, outcomes.from_result(call, worker, message))
        self._supervisor.call_ended(worker.process)
        self.pump()
        if settled_here:  # as its done callback would have: after this answer's pump, in its caller's context
            context = call.context
            if context is None:
                self._settled(call)
            else:
                context.run(self._settled, call)

    @staticmethod
    def _answer(call: CallRecord, outcome: CallResult | BaseException) -> bool:
        """Finish ``call`` with its worker's answer; ``True`` if its done callback was taken back, so
        the caller settles it (``_settled``) at once instead of the loop one callback later."""
        future = call.future
        if future.done():
            return False
        taken = future.remove_done_callback(call.on_done) == 1
        call.finish(outcome)
        return taken

    def _on_chunk(self, worker: Placement, message: Chunk) -> None:
        attempt = worker.attempts.get(message.id)
        if attempt is None:
            self._drop(worker, message)
        elif (wrong := attempt.accept_chunk(message, chunk_bytes)) is not None:
            self.violation(worker.process, attempt, wrong)

    # -- Events: what the supervisor tells and asks ----------------------------------------------
    def idle(self, worker: WorkerProcess) -> bool:
        placement = self.placements.get(worker)
        return placement is None or placement.idle

    def busy(self, worker: WorkerProcess) -> bool:
        placement = self.placements.get(worker)
        return placement is not None and bool(placement.inline)

    def worker_ready(self, worker: WorkerProcess) -> None:
        self.placements.add(worker)
        self.pump()

    def worker_exited(self, worker: WorkerProcess) -> None:
        """Settle every attempt of a dead worker (``Deaths``): blame one, re-run the others when safe."""
        placement = self.placements.remove(worker)
        if placement is not None:
            reruns = self._deaths.settle(placement, closing=self._closing)
            self._retries += len(reruns)
            for call in reruns:
                self._put_back(call)
        self.pump()

    # -- periodic and shutdown -----------------------------------------------
    def tick(self, now: float) -> None:
        """Queue-wait limit, re-runs out of time, unanswered cancels (the pool's one ticker calls it)."""
        limit = self._config.deadlines.queue
        for call in list(self._queue.heads()):
            if now - call.enqueued_at > limit:
                self._queue.pop(call)
                call.finish(Overloaded(f"no worker free within {limit:g} s (queue wait limit)"))
        for call in [c for c in self._queue.put_back() if c.time_left(now) <= 0]:
            self._queue.pop(call)  # a re-run still waiting for a worker when its timeout ran out
            call.finish(outcomes.out_of_time(call, None))
        self.placements.expire_zombies(now - self._config.deadlines.kill_grace - 60.0)
        self.placements.refresh()
        self.pump()

    def stop_accepting(self) -> None:
        """From now on every new call fails with ``PoolClosed``, and a worker's death re-runs nothing."""
        self._closing = True

    async def wait_settled(self, timeout: float) -> None:
        """Until no call is on the books, or ``timeout`` seconds (``Pool.aclose``'s drain)."""
        await self._left.wait_until(lambda: not self._inflight, timeout)

    def close(self, error: Callable[[], CallFailed]) -> None:
        """Fail every queued and in-flight call (used after the drain period of ``Pool.aclose``)."""
        self._closing = True
        for call in list(self._inflight.values()):
            call.finish(error())
        self._queue.clear()

    def scripts_running(self) -> dict[str, set[tuple[str, str]]]:
        """``(kind, sha256)`` of the scripts each tenant's unsettled calls run (none is forgotten)."""
        busy: dict[str, set[tuple[str, str]]] = {}
        for call in self._inflight.values():
            busy.setdefault(call.tenant, set()).add((call.handle.kind, call.handle.sha256))
        return busy

    def statistics(self) -> DispatcherStatistics:
        return DispatcherStatistics(
            len(self._queue), len(self._inflight), self._ok, self._failed, self._retries, self._dropped,
            self._protocol_errors, len(self._quarantine), self.streams.held, self.streams.peak,
            self._queue.depths(), dict(self.placements.per_tenant),
        )  # fmt: skip
