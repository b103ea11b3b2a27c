"""Death settlement: what becomes of every call a dead worker held.

    Supervisor ─worker_exited─▶ Dispatcher ─▶ Deaths.settle(placement)
        outcomes.blame: the attempt that caused the death (its script struck, ``Quarantine``),
                        or the suspects of an ambiguous one (their scripts run alone, ``Suspects``)
        each attempt:   released; its call fails (blamed, not re-runnable, out of time)
                        or is handed back to be re-run with what is left of its timeout

The rules themselves are ``coordinator._core.outcomes``'; this applies them to one worker's table.
Writes the placement's attempt fields (emptied), the quarantine's strikes and the suspects.
"""

from __future__ import annotations

import logging
import time

from coordinator._core import outcomes
from coordinator._core.attempts import Attempts
from coordinator._core.calls import CallRecord
from coordinator._core.config import PoolConfig
from coordinator._core.isolation import Suspects
from coordinator._core.quarantine import Quarantine
from coordinator._core.workers import Placement

__all__ = ["Deaths"]

log = logging.getLogger("coordinator._core.dispatcher")


class Deaths:
    """Settles a dead worker's attempts; see the module docstring."""

    def __init__(
        self, config: PoolConfig, attempts: Attempts, quarantine: Quarantine, suspects: Suspects
    ) -> None:
        self._config, self._attempts = config, attempts
        self._quarantine, self._suspects = quarantine, suspects

    def settle(self, worker: Placement, *, closing: bool) -> list[CallRecord]:
        """Blame, strike, fail what may not be re-run; the calls to re-run (each counted a retry)."""
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
        reruns = []
        for attempt in list(worker.attempts.values()):
            self._attempts.release(attempt)
            call = attempt.call
            if call.done:
                continue
            failure = outcomes.after_death(attempt, attempt is blamed, self._config, closing, now)
            if failure is not None:
                call.finish(failure)
            else:
                call.retries += outcomes.reached(attempt, now, self._config.deadlines.heartbeat)
                reruns.append(call)
        worker.attempts.clear()
        worker.inline.clear()
        return reruns
