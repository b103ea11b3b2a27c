"""The attempt table: each try of a call on one worker, its deadline, its kill grace, its detachment.

    Dispatcher ── start(call, worker) ──▶ Attempt(wire id) in Placement.attempts (inline queue or threaded)
                                              │ running at its worker: the call's deadline armed
       deadline ─▶ call answered ScriptTimeout ┤ threaded: CANCEL, kept in ``given_up`` until its late reply
                                              │ kill grace later, still running ─▶ kill the worker
                                              │   (blaming it: ``Placement.kill_target``; not if SIGSTOPped)
       answer / death / caller gone ─▶ detach: timers and host calls stopped, the next inline one armed

Owns the wire ids and the two timer heaps (deadlines, kill graces); writes only the placement records'
attempt fields.  The dispatcher decides what an answer means; the supervisor is asked for kills and
for whether a process is SIGSTOPped.  ``freed`` (the dispatcher's pump) runs after a deadline answered
a call, since that frees room for a queued one.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

from coordinator._core import outcomes
from coordinator._core.calls import Attempt, CallRecord
from coordinator._core.config import PoolConfig
from coordinator._core.hostcalls import Spawn
from coordinator._core.kills import KillReason
from coordinator._core.placement import Placements
from coordinator._core.streambudget import StreamFlow
from coordinator._core.supervisor import Supervisor
from coordinator._core.timers import TimerHeap
from coordinator._core.transport import Router
from coordinator._core.workers import Placement, WorkerProcess
from proto import Cancel

__all__ = ["Attempts"]


class Attempts:
    """Every attempt placed on a worker, with its timers; see the module docstring."""

    def __init__(
        self, config: PoolConfig, router: Router, supervisor: Supervisor, placements: Placements,
        freed: Callable[[], None], spawn: Spawn,
    ) -> None:  # fmt: skip
        self._router, self._supervisor, self._placements, self._freed = router, supervisor, placements, freed
        self._spawn = spawn
        self._kill_grace = config.deadlines.kill_grace
        self._wire_ids = itertools.count(1)
        self._deadlines: TimerHeap[Attempt] = TimerHeap(self._deadline_passed)
        self._graces: TimerHeap[Attempt] = TimerHeap(self._grace_passed)

    def wire_id(self) -> int:
        """The id the next attempt's CALL carries (unique for the pool's life)."""
        return next(self._wire_ids)

    def start(
        self, wire_id: int, call: CallRecord, worker: Placement, flow: StreamFlow | None, now: float
    ) -> None:
        """``call``'s CALL goes out to ``worker`` under ``wire_id``: record the attempt, arm its deadline."""
        if call.deadline is None:  # the timeout starts with the first attempt, queued at its worker or not
            call.deadline = now + call.timeout
        attempt = Attempt(
            wire_id, call, worker, sent_at=now, flow=flow, engine_timeout=call.attempt_timeout(now)
        )
        worker.attempts[wire_id] = attempt
        call.attempt = attempt
        if call.host is not None:
            call.host.begin_attempt(self._spawn)
        if call.inline:
            worker.inline.append(attempt)
            if len(worker.inline) == 1:
                self._arm(attempt)
            else:  # waits behind the head at its worker: its deadline runs meanwhile
                attempt.timer = self._deadlines.arm(attempt, call.deadline - now)
        else:
            worker.threaded += 1
            self._arm(attempt)

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
        attempt.timer = self._graces.arm(attempt, until - now + self._kill_grace)

    def _deadline_passed(self, attempt: Attempt) -> None:
        """The call's timeout is over: it is answered now, whatever its worker does (the kill grace
        delays only the kill of a worker still running it)."""
        attempt.timer = None
        worker, call = attempt.worker, attempt.call
        if attempt.wire_id not in worker.attempts:
            return
        running = not call.inline or worker.head is attempt
        frozen = running and self._supervisor.is_stopped(worker.process)
        if not call.inline:
            self.forget(attempt, cancel=True)  # given up: killed if still running after the grace
        call.finish(outcomes.timeout_error(call, worker, frozen=frozen))
        if running and call.inline:
            self._arm_grace(attempt, time.monotonic())
        self._freed()

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
            attempt.timer = self._graces.arm(attempt, self._kill_grace)
            return
        frozen = self._supervisor.is_stopped(worker.process)
        self.kill(worker, *((KillReason.FROZEN, None) if frozen else (KillReason.DEADLINE, attempt)))

    # -- kills and detachment ------------------------------------------------
    def kill(self, worker: Placement | WorkerProcess, reason: KillReason, target: Attempt | None) -> None:
        """Have the process killed; ``target`` is blamed at its death if this is the reason reported."""
        process = worker.process if isinstance(worker, Placement) else worker
        if self._supervisor.kill(process, reason):
            placement = self._placements.get(process)
            if placement is not None:
                placement.kill_target = target

    def forget(self, attempt: Attempt, *, cancel: bool) -> None:
        """Detach a threaded attempt we gave up on; its late reply will be dropped quietly."""
        worker = attempt.worker
        if worker.attempts.pop(attempt.wire_id, None) is None:
            return
        self.detach(attempt)
        now = time.monotonic()
        worker.zombies[attempt.wire_id] = now
        worker.given_up[attempt.wire_id] = attempt
        self._arm_grace(attempt, now)
        if cancel:
            self._router.send(worker.identity, Cancel(attempt.wire_id))

    def late_reply(self, worker: Placement, wire_id: int) -> bool:
        """An answer for no attempt held: ``True`` if it is the late reply of one given up on (it stopped,
        so no kill), ``False`` if nothing of that id was expected."""
        given_up = worker.given_up.pop(wire_id, None)
        if given_up is not None:
            given_up.cancel_timer()
        return worker.zombies.pop(wire_id, None) is not None

    def detach(self, attempt: Attempt) -> None:
        """It left its worker's table (answered, given up): release it, arm the next inline one."""
        worker = attempt.worker
        self.release(attempt)
        worker.alone = worker.alone and not attempt.call.alone
        if worker.inline and worker.inline[0] is attempt:
            worker.inline.popleft()
            if worker.inline:
                self._arm(worker.inline[0])
        elif attempt in worker.inline:
            worker.inline.remove(attempt)
        else:
            worker.threaded -= 1

    def release(self, attempt: Attempt) -> None:
        """An attempt leaves its worker (answer, given up, death): stop its timers and host calls."""
        attempt.abandon()
        self._placements.released(attempt.call.tenant)
