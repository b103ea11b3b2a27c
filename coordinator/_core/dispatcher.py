"""Route calls to workers, track every attempt, enforce deadlines, settle every outcome exactly once.

    Pool.call ─▶ submit ─▶ FairQueue (bounded, per-tenant round robin)
                   │            │ pump: Placements.pick (room, then AST affinity), a live process
                   ▼            ▼
              Attempt(wire id) ──CALL (source only on a miss)──▶ worker
                   │  ◀──CHUNK──── (stream: → CallStream, CREDIT back per chunk taken)
                   │  ◀──HOST_CALL─ → HostBridge task → handler → HOST_REPLY / HOST_CHUNK ──▶
                   │  ◀──RESULT / ERROR ── finish(call) exactly once; late or foreign replies dropped
       deadline timer: the call fails with ScriptTimeout at its deadline, whatever its worker does;
                       threaded call → CANCEL, kept in ``given_up`` until its late reply
                       kill grace later, still running → kill worker (blame it; not if SIGSTOPped)
       worker exit (Events.worker_exited) → outcomes.blame / after_death: fail, or re-run with
                       what is left of the timeout (a call ends by its timeout, re-runs included)

Owns the ``Placements`` and the supervisor it is built with (it is that supervisor's ``Events``);
reads process records, never writes them.  Inline calls (region ``call``, every ``load``) run one
at a time on a worker's loop thread, up to ``region_pipeline`` queued there, only the head's timer
running; threaded calls (provider, streams) run up to the worker's capacity at once.  Every deadline
shares one loop timer (``coordinator.timers``).

Past 400 lines: submission, placement, answers, deadlines and deaths all change the same books (the
attempt tables, the queue, the placements), and every path that settles a call sits beside the others
so that "exactly once" can be read in one place.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import logging
import time
from collections.abc import Callable
from typing import Any

from coordinator._core import outcomes
from coordinator._core.admission import Admission
from coordinator._core.calls import Attempt, Call, CallResult, Observers
from coordinator._core.config import PoolConfig
from coordinator._core.hostcalls import HostBridge, Spawn
from coordinator._core.isolation import Suspects
from coordinator._core.placement import Placements
from coordinator._core.quarantine import Quarantine
from coordinator._core.queue import FairQueue
from coordinator._core.quotas import QuotaTable
from coordinator._core.streambudget import StreamBudget, chunk_bytes
from coordinator._core.supervisor import Events, Supervisor
from coordinator._core.transport import Router
from coordinator._core.waiting import Changes
from coordinator._core.workers import Placement, WorkerProcess
from coordinator.errors import CallFailed, Overloaded, PoolClosed
from coordinator.timers import Deadlines
from proto import (
    FROM_WORKER,
    Cancel,
    Chunk,
    Credit,
    Error,
    ErrorClass,
    HostCall,
    KillReason,
    Op,
    ProtocolError,
    Result,
    encode_call,
)
from proto.frames import PlainResult

__all__ = ["Dispatcher"]

log = logging.getLogger(__name__)


class Dispatcher(Events):
    """The call state machine; see the module docstring for the flow."""

    def __init__(
        self,
        config: PoolConfig,
        router: Router,
        spawn: Spawn,
        supervise: Callable[[Events], Supervisor],
        quotas: QuotaTable,
    ) -> None:
        self._config, self._router = config, router
        self._loop = asyncio.get_running_loop()
        self._queue = FairQueue()
        self._quarantine = Quarantine(config.retry)
        self._suspects = Suspects(config.retry.window)
        self._host = HostBridge(router.send_frames, spawn, config.stream_window)
        self._wire_ids = itertools.count(1)
        self._deadlines: Deadlines[Attempt] = Deadlines(self._deadline_passed)
        self._graces: Deadlines[Attempt] = Deadlines(self._grace_passed)
        self._waits: Deadlines[Call] = Deadlines(self._wait_passed)
        """A re-run waiting in the queue ends at its deadline, not at the next tick."""
        self.streams = StreamBudget(config.stream_buffer_bytes, config.stream_window)
        self.placements = Placements(config, quotas, self._queue, self._quarantine)
        self.admission = self._admission = Admission(quotas, self._quarantine)
        self.supervisor = supervise(self)
        self.closing = False
        self.inflight: dict[int, Call] = {}
        self.settled = Changes()
        """Notified each time a call leaves ``inflight`` (``Pool.aclose`` drains on it)."""
        self.ok = self.failed = self.retries = self.dropped = self.protocol_errors = 0
        self.observers = Observers()
        self._settle = self._settled  # one bound method for every call's ``settle``

    # -- submission ----------------------------------------------------------
    def submit(self, call: Call) -> None:
        """Place or queue ``call``; failures (closed, quarantined, overloaded) finish it at once."""
        now = time.monotonic()
        if self.closing:
            call.finish(PoolClosed("the pool is closed"))
            return
        if refused := self._admission.refuse(call, now, self.placements.per_tenant.get(call.tenant, 0)):
            call.finish(refused)  # quarantined, or over one of its tenant's quotas
            self.observers.tell(call)
            return
        if len(self._queue) >= self._config.queue_size:
            full = f"queue full ({self._config.queue_size} calls waiting)"
            victim = self._queue.push_out_for(call.tenant)
            if victim is None:
                call.finish(Overloaded(f"{full}; tenant {call.tenant!r} holds the most"))
                self.observers.tell(call)
                return
            victim.finish(Overloaded(f"{full}; pushed out: tenant {victim.tenant!r} holds the most"))
        call.enqueued_at = now
        call.alone = call.alone or self._suspects.isolate(call.handle.sha256, now)
        self.inflight[call.id] = call
        self._admission.admitted(call)
        call.settle = self._settle
        call.context = contextvars.copy_context()
        call.future.add_done_callback(call.on_done, context=call.context)
        if self._queue or not self._place(call):
            self._queue.push(call)

    def _settled(self, call: Call) -> None:
        self.inflight.pop(call.id, None)
        self._admission.settled(call, time.monotonic())
        self.settled.notify()
        if call.future.cancelled() or call.future.exception() is not None:
            self.failed += 1
        else:
            self.ok += 1
        self.observers.tell(call)
        attempt = call.attempt
        # The caller gave up (its task was cancelled): stop a threaded attempt on the worker too.  An
        # inline attempt keeps its place (it is running or queued at the worker); its answer is dropped.
        if attempt is not None and not call.inline and attempt.wire_id in attempt.worker.attempts:
            self._forget(attempt, cancel=True)
        # Nothing asks for it once the call has ended, and it closes a reference cycle (call -> attempt
        # -> call): dropping it lets refcounting free the call, its future and its attempt at once
        # instead of leaving them to the cyclic collector.
        call.attempt = None

    def _place(self, call: Call) -> bool:
        """Send ``call`` to the best worker still alive; ``False`` if none can take it now.

        A re-run (sent before: it has a deadline) whose timeout ran out while it waited ends here
        instead: a worker that came up before the ticker looked must not run it."""
        if call.deadline is not None and call.time_left(time.monotonic()) <= 0:
            call.finish(outcomes.out_of_time(call, None))
            return True
        while (worker := self.placements.pick(call)) is not None:
            if self.supervisor.alive(worker.process):
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

    def _send_attempt(self, call: Call, worker: Placement) -> None:
        handle, key, now = call.handle, (call.handle.kind, call.handle.sha256), time.monotonic()
        wire, identity = next(self._wire_ids), worker.identity
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
        if call.deadline is None:  # the timeout starts with the first attempt, queued at its worker or not
            call.deadline = now + call.timeout
        timeout = call.attempt_timeout(now)
        attempt = Attempt(wire, call, worker, sent_at=now, flow=flow, engine_timeout=timeout)
        worker.attempts[wire] = attempt
        call.attempt = attempt
        begin = getattr(call.host, "begin_attempt", None)  # optional HostHandler hook (calls.py)
        if begin is not None:
            begin()
        if call.inline:
            worker.inline.append(attempt)
            if len(worker.inline) == 1:
                self._arm(attempt)
            else:  # waits behind the head at its worker: its deadline runs meanwhile
                attempt.timer = self._deadlines.arm(attempt, call.deadline - now)
        else:
            worker.threaded += 1
            self._arm(attempt)
        if not self._router.send_frames(worker.identity, frames):
            self.supervisor.kill(worker.process, KillReason.UNREACHABLE)

    # -- deadlines -----------------------------------------------------------
    def _arm(self, attempt: Attempt) -> None:
        """It starts running at its worker (sent threaded, or now the inline head): its call's deadline,
        or straight its kill grace if that deadline already answered the call."""
        call, now = attempt.call, time.monotonic()
        attempt.cancel_timer()
        attempt.engine_deadline = now + attempt.engine_timeout
        if call.deadline is None:
            call.deadline = now + call.timeout
        if call.done:
            self._arm_grace(attempt, now)
        else:
            attempt.timer = self._deadlines.arm(attempt, call.deadline - now)

    def _arm_grace(self, attempt: Attempt, now: float) -> None:
        """Kill its worker ``kill_grace`` after its engine should have stopped it, if it has not answered."""
        until = max(now, attempt.engine_deadline) if attempt.call.inline else now  # threaded: cancelled
        attempt.timer = self._graces.arm(attempt, until - now + self._config.deadlines.kill_grace)

    def _deadline_passed(self, attempt: Attempt) -> None:
        """The call's timeout is over: it is answered now, whatever its worker does (the kill grace
        delays only the kill of a worker still running it)."""
        attempt.timer = None
        worker, call = attempt.worker, attempt.call
        if attempt.wire_id not in worker.attempts:
            return
        running = not call.inline or worker.head is attempt
        frozen = running and self.supervisor.is_stopped(worker.process)
        if not call.inline:
            self._forget(attempt, cancel=True)  # given up: killed if still running after the grace
        call.finish(outcomes.timeout_error(call, worker, frozen=frozen))
        if running and call.inline:
            self._arm_grace(attempt, time.monotonic())
        self.pump()

    def _grace_passed(self, attempt: Attempt) -> None:
        """An attempt answered at its deadline (or cancelled) still runs a grace later: kill its worker,
        blaming it (not if the worker is SIGSTOPped: that is not the call's doing)."""
        attempt.timer = None
        worker = attempt.worker
        if attempt.call.inline:
            if worker.head is not attempt:
                return
        elif worker.given_up.get(attempt.wire_id) is not attempt:
            return
        elif worker.inline:  # its loop thread runs a region call, which may hold this one's reply back
            attempt.timer = self._graces.arm(attempt, self._config.deadlines.kill_grace)
            return
        frozen = self.supervisor.is_stopped(worker.process)
        self._kill(worker, *((KillReason.FROZEN, None) if frozen else (KillReason.DEADLINE, attempt)))

    def _wait_passed(self, call: Call) -> None:
        """A re-run still waiting for a worker when its timeout ran out ends now."""
        call.waiting = None
        if not call.done and any(c is call for c in self._queue.put_back()):
            self._queue.pop(call)
            call.finish(outcomes.out_of_time(call, None))

    def _put_back(self, call: Call) -> None:
        """Queue ``call`` again at the front (a re-run or a resend), to end at its deadline if it waits."""
        self._queue.push(call, front=True)
        if call.deadline is not None and call.waiting is None:
            call.waiting = self._waits.arm(call, max(0.0, call.deadline - time.monotonic()))

    def _kill(self, worker: Placement | WorkerProcess, reason: KillReason, target: Attempt | None) -> None:
        """Have the process killed; ``target`` is blamed at its death if this is the reason reported."""
        process = worker.process if isinstance(worker, Placement) else worker
        if self.supervisor.kill(process, reason):
            placement = self.placements.get(process)
            if placement is not None:
                placement.kill_target = target

    def _forget(self, attempt: Attempt, *, cancel: bool) -> None:
        """Detach a threaded attempt we gave up on; its late reply will be dropped quietly."""
        worker = attempt.worker
        if worker.attempts.pop(attempt.wire_id, None) is None:
            return
        self._detach(attempt)
        now = time.monotonic()
        worker.zombies[attempt.wire_id] = now
        worker.given_up[attempt.wire_id] = attempt
        self._arm_grace(attempt, now)
        if cancel:
            self._router.send(worker.identity, Cancel(attempt.wire_id))

    # -- messages from workers (the pool's inbox routes the call-level ones here) ----------------
    def drop_foreign(self, identity: bytes, message: Any, *, known: bool) -> None:
        """A message from an unknown peer, or from a liar being stopped: nothing it says is trusted."""
        self.dropped += 1
        if not known:
            log.warning("dropped a message from unknown peer %s: %s", identity[:16].hex(), message)

    def on_message(self, process: WorkerProcess, message: Any) -> None:
        worker = self.placements.get(process)
        plain = type(message) is PlainResult  # a plainly valid RESULT, read on the transport's hot path
        if not plain and (isinstance(message, ProtocolError) or type(message).COMMAND not in FROM_WORKER):
            self.violation(process, worker.head if worker else None, message)
        elif worker is None:  # not (or no longer) holding calls: nothing it says concerns one
            self._drop(None, message)
        elif plain or isinstance(message, (Result, Error)):
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
        self.protocol_errors += 1
        log.warning("worker %s violated the protocol: %s", process.id, what)
        self._kill(process, KillReason.PROTOCOL, target)

    def _drop(self, worker: Placement | None, message: Any) -> None:
        if worker is None or worker.zombies.get(message.id) is None:
            self.dropped += 1
            name, wid = type(message).__name__, worker.id if worker else "?"
            log.warning("worker %s sent %s for call %s it does not hold; dropped", wid, name, message.id)

    def _complete(self, worker: Placement, message: Result | PlainResult | Error) -> None:
        attempt = worker.attempts.pop(message.id, None)
        if attempt is None:
            given_up = worker.given_up.pop(message.id, None)
            if given_up is not None:
                given_up.cancel_timer()  # it stopped: no kill
            if worker.zombies.pop(message.id, None) is None:
                self.dropped += 1
                log.warning("worker %s answered call %d it does not hold; dropped", worker.id, message.id)
            return
        self._detach(attempt)
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
        self.supervisor.call_ended(worker.process)
        self.pump()
        if settled_here:  # as its done callback would have: after this answer's pump, in its caller's context
            context = call.context
            if context is None:
                self._settled(call)
            else:
                context.run(self._settled, call)

    @staticmethod
    def _answer(call: Call, outcome: CallResult | BaseException) -> bool:
        """Finish ``call`` with its worker's answer; ``True`` if its done callback was taken back, so
        the caller settles it (``_settled``) at once instead of the loop one callback later."""
        future = call.future
        if future.done():
            return False
        taken = future.remove_done_callback(call.on_done) == 1
        call.finish(outcome)
        return taken

    def _detach(self, attempt: Attempt) -> None:
        worker = attempt.worker
        self._release(attempt)
        worker.alone = worker.alone and not attempt.call.alone
        if worker.inline and worker.inline[0] is attempt:
            worker.inline.popleft()
            if worker.inline:
                self._arm(worker.inline[0])
        elif attempt in worker.inline:
            worker.inline.remove(attempt)
        else:
            worker.threaded -= 1

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
        """Settle every attempt of a dead worker: blame one, re-run the others when safe."""
        placement = self.placements.remove(worker)
        if placement is not None:
            self._settle_orphans(placement)
        self.pump()

    def _settle_orphans(self, worker: Placement) -> None:
        blamed, suspects = outcomes.blame(worker)
        now = time.monotonic()
        for attempt in suspects:
            self._suspects.suspect(attempt.call.handle.sha256, now)
            attempt.call.alone = True
        if blamed is not None:  # struck even if its deadline already answered it
            call, why = blamed.call, worker.process.exit_reason
            if self._quarantine.strike(call.handle.sha256, now, why, tenant=call.tenant):
                log.warning("tenant %r's script %s quarantined: %s", call.tenant, call.handle.name, why)
        for attempt in worker.given_up.values():
            attempt.cancel_timer()
        worker.given_up.clear()
        for attempt in list(worker.attempts.values()):
            self._release(attempt)
            call = attempt.call
            if call.done:
                continue
            failure = outcomes.after_death(attempt, attempt is blamed, self._config, self.closing, now)
            if failure is not None:
                call.finish(failure)
            else:
                call.retries += outcomes.reached(attempt, now, self._config.deadlines.heartbeat)
                self.retries += 1
                self._put_back(call)
        worker.attempts.clear()
        worker.inline.clear()

    def _release(self, attempt: Attempt) -> None:
        """An attempt leaves its worker (answer, given up, death): stop its timers and host calls."""
        attempt.abandon()
        self.placements.released(attempt.call.tenant)

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

    def close(self, error: Callable[[], CallFailed]) -> None:
        """Fail every queued and in-flight call (used after the drain period of ``Pool.aclose``)."""
        self.closing = True
        for call in list(self.inflight.values()):
            call.finish(error())
        self._queue.clear()

    @property
    def counts(self) -> tuple[int, int]:
        """Calls waiting in the queue, scripts in quarantine (for ``Pool.statistics``)."""
        return len(self._queue), len(self._quarantine)

    def tenant_counts(self) -> tuple[dict[str, int], dict[str, int]]:
        """Calls queued and calls held by workers, per tenant (for ``Pool.statistics``)."""
        return self._queue.depths(), dict(self.placements.per_tenant)
