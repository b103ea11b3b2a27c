"""Route calls to workers, track every attempt, enforce deadlines, settle every outcome exactly once.

    Pool.call ─▶ submit ─▶ FairQueue (bounded, per-tenant round robin)
                   │            │ pump: pick an ACTIVE worker (capacity, then AST affinity)
                   ▼            ▼
              Attempt(wire id) ──CALL (source only on a miss)──▶ worker
                   │  ◀──CHUNK──── (stream: → CallStream, CREDIT back per chunk taken)
                   │  ◀──HOST_CALL─ → HostBridge task → handler → HOST_REPLY / HOST_CHUNK ──▶
                   │  ◀──RESULT / ERROR ── finish(call) exactly once; late or foreign replies dropped
                   │
       deadline timer: inline call → kill worker (blame it, or not if the worker is SIGSTOPped)
                       threaded call → CANCEL, fail with ScriptTimeout, expect a late reply
       worker exit (supervisor) → blamed attempt fails + strikes its script; others re-run if safe;
                                  ambiguous → the running scripts' calls run alone for a while

Inline calls (region ``call`` and every ``load``) run one at a time on a worker's
loop thread; up to ``region_pipeline`` may be queued there, and only the head's
deadline timer runs.  Threaded calls (provider, streams) run up to the worker's
capacity at once.  Everything here runs on the event loop thread.  (Over 400 lines: one state
machine; its parts that stand alone — queue, quarantine, suspects, outcomes, host calls — already
live in modules of their own.)
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from coordinator._core import outcomes
from coordinator._core.calls import Attempt, Call, InvalidChunk
from coordinator._core.config import PoolConfig
from coordinator.errors import CallFailed, Overloaded, PoolClosed, Quarantined
from coordinator._core.hostcalls import HostBridge, Spawn
from coordinator._core.isolation import Suspects
from coordinator._core.quarantine import Quarantine
from coordinator._core.queue import FairQueue
from coordinator._core.supervisor import Supervisor
from coordinator._core.transport import Router
from coordinator._core.workers import Worker, WorkerState
from proto import (
    FROM_WORKER,
    Cancel,
    Chunk,
    Credit,
    Error,
    Goodbye,
    HostCall,
    HostReply,
    Message,
    ProtocolError,
    Ready,
    Result,
    encode,
)
from proto import Call as CallMessage

__all__ = ["MAX_OPEN_HOST_CALLS", "Dispatcher"]

MAX_OPEN_HOST_CALLS = 8
"""Host calls of one call open at once: a real worker opens more than one only by nesting (a host
call made from a ``stream_request`` callback), so this bounds a lying worker's fan-out of egress."""

log = logging.getLogger(__name__)


class Dispatcher:
    """The call state machine; see the module docstring for the flow."""

    def __init__(self, config: PoolConfig, router: Router, supervisor: Supervisor, spawn: Spawn) -> None:
        self._config, self._router, self._supervisor = config, router, supervisor
        self._loop = asyncio.get_running_loop()
        self._queue = FairQueue()
        self._quarantine = Quarantine(config.retry)
        self._suspects = Suspects(config.retry.window)
        self._host = HostBridge(self._send_for, spawn, config.stream_window)
        self._wire_ids = itertools.count(1)
        self._active: list[Worker] = []
        self.closing = False
        self.inflight: dict[int, Call] = {}
        self._placed: Counter[str] = Counter()
        """Attempts at workers per tenant (``tenant_max_inflight``)."""
        self.ok = self.failed = self.retries = self.dropped = self.protocol_errors = 0

    # -- submission ----------------------------------------------------------
    def submit(self, call: Call) -> None:
        """Place or queue ``call``; failures (closed, quarantined, overloaded) finish it at once."""
        now = time.monotonic()
        if self.closing:
            call.finish(PoolClosed("the pool is closed"))
            return
        quarantined = self._quarantine.check(call.handle.sha256, now)
        if quarantined is not None:
            until, cause = quarantined
            msg = f"script quarantined for another {until - now:.1f} s after repeatedly killing workers ({cause})"
            call.finish(Quarantined(msg, until=until, cause=cause, **outcomes.fields(call, None)))
            return
        if len(self._queue) >= self._config.queue_size:
            full = f"queue full ({self._config.queue_size} calls waiting)"
            victim = self._queue.push_out_for(call.tenant)
            if victim is None:
                call.finish(Overloaded(f"{full}; tenant {call.tenant!r} holds the most"))
                return
            victim.finish(Overloaded(f"{full}; pushed out: tenant {victim.tenant!r} holds the most"))
        call.enqueued_at = now
        call.alone = call.alone or self._suspects.isolate(call.handle.sha256, now)
        self.inflight[call.id] = call
        call.future.add_done_callback(lambda _: self._settled(call))
        if not self._queue:
            worker = self._pick(call)
            if worker is not None:
                self._send_attempt(call, worker)
                return
        self._queue.push(call)

    def _settled(self, call: Call) -> None:
        self.inflight.pop(call.id, None)
        if call.future.cancelled() or call.future.exception() is not None:
            self.failed += 1
        else:
            self.ok += 1
        attempt = call.attempt
        # The caller gave up (its task was cancelled): stop a threaded attempt on the worker too.  An
        # inline attempt keeps its place (it is running or queued at the worker); its answer is dropped.
        if attempt is not None and not call.inline and attempt.wire_id in attempt.worker.attempts:
            self._forget(attempt, cancel=True)

    def _pick(self, call: Call) -> Worker | None:
        cap = self._config.tenant_max_inflight
        if cap is not None and self._placed[call.tenant] >= cap:
            return None
        key, best, best_score = (call.handle.kind, call.handle.sha256), None, None
        for worker in self._active:
            if worker.alone or (worker.attempts if call.alone else worker.reserved):
                continue
            if call.inline:
                depth = len(worker.inline)
                if depth >= self._config.region_pipeline:
                    continue
                away = call.resident_elsewhere(worker.id)  # a region stays where its entries are
                score: tuple[int, ...] = (depth, away, key not in worker.scripts, worker.threaded)
            else:
                if worker.threaded >= worker.capacity:
                    continue
                score = (key not in worker.scripts, worker.threaded, len(worker.inline))
            if best_score is None or score < best_score:
                best, best_score = worker, score
        return best

    def pump(self) -> None:
        """Place queued calls, tenant by tenant in rotation, until nothing more fits."""
        progress = True
        while progress and self._queue:
            progress = False
            for call in list(self._queue.heads()):
                if call.done:  # its caller gave up while it waited
                    self._queue.pop(call)
                    progress = True
                    continue
                worker = self._pick(call)
                if worker is not None:
                    self._queue.pop(call)
                    self._send_attempt(call, worker)
                    progress = True
        self._reserve()

    def _reserve(self) -> None:
        """While a suspect's call waits, keep one worker (the least busy) draining for it."""
        reserved = [w for w in self._active if w.reserved]
        if not self._queue or not any(call.alone for call in self._queue.heads()):
            for worker in reserved:
                worker.reserved = False
        elif not reserved and (candidates := [w for w in self._active if not w.alone]):
            min(candidates, key=lambda w: len(w.attempts)).reserved = True

    def _send_attempt(self, call: Call, worker: Worker) -> None:
        handle, key = call.handle, (call.handle.kind, call.handle.sha256)
        wire = next(self._wire_ids)
        source = None if key in worker.scripts else handle.source
        message = CallMessage(
            wire, call.op, handle.kind, handle.sha256, call.fn, call.args, call.timeout, call.tenant,
            handle.name, source, self._config.stream_window,
            None if call.resident is None else call.resident.wire(worker.id),
        )  # fmt: skip
        try:
            frames = encode(message)
        except ProtocolError as exc:
            call.finish(CallFailed(f"arguments cannot be sent to a worker: {exc}", cause="invalid arguments"))
            return
        worker.scripts.add(key)
        if call.alone:
            worker.alone, worker.reserved = True, False
        self._placed[call.tenant] += 1
        attempt = Attempt(wire, call, worker, started=time.monotonic())
        worker.attempts[wire] = attempt
        call.attempt = attempt
        if call.inline:
            worker.inline.append(attempt)
            if len(worker.inline) == 1:
                self._arm(attempt)
        else:
            worker.threaded += 1
            self._arm(attempt)
        if not self._router.send_frames(worker.identity, frames):
            self._supervisor.kill(worker, "unreachable")

    # -- deadlines -----------------------------------------------------------
    def _arm(self, attempt: Attempt) -> None:
        delay = attempt.call.timeout + self._config.deadlines.kill_grace
        attempt.started = time.monotonic()
        attempt.timer = self._loop.call_later(delay, self._on_deadline, attempt)

    def _on_deadline(self, attempt: Attempt) -> None:
        try:
            self._deadline_passed(attempt)
        except Exception:  # a timer callback: nothing may escape into the event loop
            log.exception("deadline handling failed")

    def _deadline_passed(self, attempt: Attempt) -> None:
        attempt.timer = None
        worker, call = attempt.worker, attempt.call
        if attempt.wire_id not in worker.attempts:
            return
        if call.inline:
            if self._supervisor.is_stopped(worker):
                self._supervisor.kill(worker, "frozen (SIGSTOP)")
            else:
                self._supervisor.kill(worker, "deadline", attempt)
            return
        self._forget(attempt, cancel=True)
        call.finish(outcomes.timeout_error(call, worker))
        self.pump()

    def _forget(self, attempt: Attempt, *, cancel: bool) -> None:
        """Detach a threaded attempt we gave up on; its late reply will be dropped quietly."""
        worker = attempt.worker
        if worker.attempts.pop(attempt.wire_id, None) is None:
            return
        self._detach(attempt)
        worker.zombies[attempt.wire_id] = time.monotonic()
        if cancel:
            self._router.send(worker.identity, Cancel(attempt.wire_id))

    # -- messages from workers -----------------------------------------------
    def on_message(self, identity: bytes, message: Any) -> None:
        worker = self._supervisor.workers.get(identity)
        if worker is None:
            self.dropped += 1
            peer, name = identity[:16].hex(), type(message).__name__
            log.warning("dropped a message from unknown peer %s: %s", peer, name)
            return
        worker.last_seen = time.monotonic()
        if worker.kill_reason == "protocol":  # a liar being stopped: nothing more it says is trusted
            self.dropped += 1
            return
        if isinstance(message, ProtocolError) or type(message).COMMAND not in FROM_WORKER:
            self._violation(worker, worker.head, message)
        elif isinstance(message, (Result, Error)):
            self._complete(worker, message)
        elif isinstance(message, Chunk):
            self._on_chunk(worker, message)
        elif isinstance(message, HostCall):
            attempt = worker.attempts.get(message.id)
            if attempt is None:
                self._drop(worker, message)
            elif message.hid != attempt.host_seq + 1 or len(attempt.host_tasks) >= MAX_OPEN_HOST_CALLS:
                self._violation(worker, attempt, f"HOST_CALL {message.hid} out of order or too many open")
            else:
                attempt.host_seq = message.hid
                self._host.start(attempt, message)
        elif isinstance(message, Credit):
            attempt = worker.attempts.get(message.id)
            if attempt is not None:
                self._host.credit(attempt, message)
        elif isinstance(message, Ready):
            self._supervisor.accept_ready(worker, message)
        elif isinstance(message, Goodbye):
            worker.goodbye = message.reason

    def _violation(self, worker: Worker, target: Attempt | None, what: object) -> None:
        """A worker broke the protocol: it is stopped, and only ``target`` (its call) is blamed."""
        self.protocol_errors += 1
        log.warning("worker %s violated the protocol: %s", worker.id, what)
        self._supervisor.kill(worker, "protocol", target)

    def _drop(self, worker: Worker, message: Any) -> None:
        if worker.zombies.get(message.id) is None:
            self.dropped += 1
            name = type(message).__name__
            log.warning(
                "worker %s sent %s for call %d it does not hold; dropped", worker.id, name, message.id
            )

    def _complete(self, worker: Worker, message: Result | Error) -> None:
        attempt = worker.attempts.pop(message.id, None)
        if attempt is None:
            if worker.zombies.pop(message.id, None) is None:
                self.dropped += 1
                log.warning("worker %s answered call %d it does not hold; dropped", worker.id, message.id)
            return
        self._detach(attempt)
        worker.calls += 1
        call = attempt.call
        if call.alone:
            self._suspects.finished_alone(call.handle.sha256)
        if isinstance(message, Error) and message.cls == "ScriptMissing":
            worker.scripts.discard((call.handle.kind, call.handle.sha256))
            self._queue.push(call, front=True)
        elif isinstance(message, Error) and call.resend_whole(worker.id, message.cls):
            self._queue.push(call, front=True)  # resent with the whole list, like ScriptMissing
        elif isinstance(message, Error):
            call.finish(outcomes.from_error(call, worker, message))
        elif call.op == "load" and outcomes.described_functions(message.value) is None:
            call.finish(outcomes.lying_worker(call, worker, "its description of the script is malformed"))
            self._violation(worker, attempt, "malformed load result")
        else:
            call.finish(outcomes.from_result(call, worker, message))
        if worker.state is WorkerState.DRAINING:
            self._supervisor.drained(worker)
        self.pump()

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

    def _on_chunk(self, worker: Worker, message: Chunk) -> None:
        attempt = worker.attempts.get(message.id)
        if attempt is None:
            self._drop(worker, message)
            return
        call = attempt.call
        window = self._config.stream_window + attempt.credited
        if call.stream is None or message.seq != attempt.next_chunk or message.seq >= window:
            self._violation(worker, attempt, f"CHUNK {message.seq} out of order or beyond the window")
            return
        attempt.next_chunk += 1
        call.chunks += 1
        call.stream.push(message.value if message.error is None else InvalidChunk(message.error))

    def credit(self, call: Call, n: int) -> None:
        """A streaming caller took ``n`` chunks: let the worker send ``n`` more."""
        attempt = call.attempt
        if attempt is not None and attempt.wire_id in attempt.worker.attempts:
            attempt.credited += n
            self._router.send(attempt.worker.identity, Credit(attempt.wire_id, 0, n))

    def _send_for(self, attempt: Attempt, message: Message) -> bool:
        if attempt.wire_id not in attempt.worker.attempts:
            return False
        try:
            frames = encode(message)
        except ProtocolError as exc:
            if not isinstance(message, HostReply):
                raise
            frames = encode(HostReply(message.id, message.hid, False, f"host value cannot be sent: {exc}"))
        return self._router.send_frames(attempt.worker.identity, frames)

    # -- worker lifecycle ----------------------------------------------------
    def worker_ready(self, worker: Worker) -> None:
        self._active = [w for w in self._supervisor.workers.values() if w.state is WorkerState.ACTIVE]
        self.pump()

    def worker_exited(self, worker: Worker) -> None:
        """Settle every attempt of a dead worker: blame one, re-run the others when safe."""
        self._active = [w for w in self._active if w is not worker and w.state is WorkerState.ACTIVE]
        blamed, suspects = outcomes.blame(worker)
        now = time.monotonic()
        for attempt in suspects:
            self._suspects.suspect(attempt.call.handle.sha256, now)
            attempt.call.alone = True
        for attempt in list(worker.attempts.values()):
            self._release(attempt)
            call = attempt.call
            if call.done:
                continue
            if attempt is blamed:
                if self._quarantine.strike(call.handle.sha256, now, worker.exit_reason):
                    log.warning("script %s quarantined: %s", call.handle.name, worker.exit_reason)
                call.finish(outcomes.death_error(call, worker, blamed=True))
                continue
            why_not = outcomes.may_rerun(call, self._config.retry.max_retries)
            if why_not or self.closing:
                call.finish(
                    outcomes.death_error(call, worker, blamed=False, why_not_rerun=why_not or "pool closing")
                )
            else:
                call.retries += 1
                self.retries += 1
                self._queue.push(call, front=True)
        worker.attempts.clear()
        worker.inline.clear()
        self.pump()

    def _release(self, attempt: Attempt) -> None:
        """An attempt leaves its worker (answer, given up, death): stop its timers and host calls."""
        attempt.abandon()
        tenant = attempt.call.tenant
        self._placed[tenant] -= 1
        if not self._placed[tenant]:
            del self._placed[tenant]

    # -- periodic and shutdown -----------------------------------------------
    def tick(self, now: float) -> None:
        """Queue-wait limit and unanswered cancels; then the supervisor's own checks."""
        limit = self._config.deadlines.queue
        for call in list(self._queue.heads()):
            if now - call.enqueued_at > limit:
                self._queue.pop(call)
                call.finish(Overloaded(f"no worker free within {limit:g} s (queue wait limit)"))
        grace = self._config.deadlines.kill_grace
        for worker in list(self._supervisor.workers.values()):
            for wire, since in list(worker.zombies.items()):
                if now - since > grace + 60.0:
                    del worker.zombies[wire]  # long forgotten: stop expecting a reply
        self._supervisor.tick(now)
        self._active = [w for w in self._supervisor.workers.values() if w.state is WorkerState.ACTIVE]
        self.pump()

    def close(self, error: Callable[[], CallFailed]) -> None:
        """Fail every queued and in-flight call (used after the drain period of ``Pool.aclose``)."""
        self.closing = True
        for call in list(self.inflight.values()):
            call.finish(error())
        self._queue.clear()

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def quarantined(self) -> int:
        return len(self._quarantine)
