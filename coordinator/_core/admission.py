"""Whether the pool takes a tenant's call at all: quarantine, then the per-tenant call quotas.

Checked once, when a call is submitted, before it can queue or run; each refusal is its own typed
error (``coordinator.errors``), so a caller can tell "your script keeps crashing" from "you have too
many calls out" from "you used your CPU for this minute".  What a tenant may hold *at workers* at
once (``max_inflight``, the fair share) is a placement rule instead: those calls wait their turn
rather than fail (``coordinator._core.placement``).  Each tenant's quotas come from the pool's
``QuotaTable`` (``Pool.set_tenant_quotas``), read afresh for each call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator._core import outcomes
from coordinator._core.errors import (
    Quarantined,
    QuotaExceeded,
    ScriptTimeout,
    TooManyCallsInFlight,
    TooManyCallsQueued,
)
from coordinator._core.quotas import CpuLedger, QuotaTable

if TYPE_CHECKING:
    from coordinator._core.calls import CallRecord
    from coordinator._core.errors import CallFailed
    from coordinator._core.quarantine import Quarantine

__all__ = ["AdmissionControl"]


class AdmissionControl:
    """Per-tenant admission: quarantine, calls in flight, calls queued, CPU-seconds per minute."""

    def __init__(self, quotas: QuotaTable, quarantine: Quarantine) -> None:
        self._quotas, self._quarantine = quotas, quarantine
        self.cpu = CpuLedger(quotas)
        self._outstanding: dict[str, int] = {}
        """Calls of each tenant accepted and not yet settled (queued or at a worker)."""

    def refuse(self, call: CallRecord, now: float, placed: int) -> CallFailed | QuotaExceeded | None:
        """Why ``call`` may not enter the pool (``placed``: its tenant's calls at workers), or ``None``."""
        tenant = call.tenant
        quarantined = self._quarantine.check(call.handle.sha256, now, tenant=tenant)
        if quarantined is not None:
            until, cause = quarantined
            what = "tenant" if cause.startswith("tenant ") else "script"
            msg = (
                f"{what} quarantined for another {until - now:.1f} s"
                f" after repeatedly killing workers ({cause})"
            )
            return Quarantined(msg, until=until, cause=cause, **outcomes.fields(call, None))
        try:
            self.cpu.check(tenant, now)
        except QuotaExceeded as refused:
            return refused
        outstanding, quotas = self._outstanding.get(tenant, 0), self._quotas.of(tenant)
        cap = quotas.max_calls
        if cap is not None and outstanding >= cap:
            return TooManyCallsInFlight(
                f"{outstanding} calls unfinished (max_calls quota {cap})",
                tenant=tenant, quota="calls_in_flight", limit=cap,
            )  # fmt: skip
        queued, cap = outstanding - placed, quotas.max_queued
        if cap is not None and queued >= cap:
            return TooManyCallsQueued(
                f"{queued} calls waiting for a worker (max_queued quota {cap})",
                tenant=tenant, quota="calls_queued", limit=cap,
            )  # fmt: skip
        return None

    def outstanding(self, tenant: str) -> int:
        """``tenant``'s calls accepted and not yet settled (queued or at a worker)."""
        return self._outstanding.get(tenant, 0)

    def admitted(self, call: CallRecord) -> None:
        self._outstanding[call.tenant] = self._outstanding.get(call.tenant, 0) + 1

    def settled(self, call: CallRecord, now: float) -> None:
        """``call`` ended: it no longer counts, and what it ran is charged to its tenant's CPU."""
        left = self._outstanding.get(call.tenant, 0) - 1
        if left <= 0:
            self._outstanding.pop(call.tenant, None)
        else:
            self._outstanding[call.tenant] = left
        if self.cpu.budgeted(call.tenant):
            self.cpu.charge(call.tenant, self._cost(call), now)

    @staticmethod
    def _cost(call: CallRecord) -> float:
        """CPU the worker measured; for an inline call that ran into its deadline, the whole timeout
        (it held its worker's loop thread that long).  Other failures are charged nothing: the
        operation budget bounds what they spent, and a threaded call mostly waited on HTTP."""
        future = call.future
        if future.cancelled():
            return 0.0
        failure = future.exception()
        if failure is None:
            return float(future.result().cpu)
        return call.timeout if call.inline and isinstance(failure, ScriptTimeout) else 0.0
