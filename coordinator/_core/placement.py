"""``Placements``: the dispatcher's records of what runs where, and the choice of where a call goes.

One ``Placement`` (``coordinator._core.workers``) per worker that is, or was, ACTIVE and not yet
reaped.  The choice: a worker with room (inline pipeline depth, threaded capacity), then AST
affinity (no source to send), then the least loaded; a region call prefers the worker holding its
resident entries.  Suspects' calls (``coordinator._core.isolation``) get a worker holding nothing
else, and one worker is *reserved* (nothing new placed there) while such a call waits.

Tenants: an *offender* (a tenant whose call killed a worker within the strike window,
``coordinator._core.quarantine``) runs only on workers holding no other tenant's calls, and no
other tenant's call is placed beside it, so its next crash costs nobody else; while its call waits,
one worker is reserved for it too (only when there are two or more: a one-worker pool keeps serving
the others, and the offender waits for the worker to empty).  While other tenants have calls
waiting, a tenant already holding its fair share of the workers' slots (slots / tenants present)
gets no new placement (``tenant_fair_share``); each tenant's ``max_inflight`` (``QuotaTable``) is a
fixed cap on top.
A tenant with dedicated workers (``coordinator._core.dedicated``) runs on those only, and nobody
else runs there; when the groups change, ``refresh`` moves each worker once it holds no call.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from coordinator._core.dedicated import Owners
from coordinator._core.workers import Placement, WorkerProcess, WorkerState

if TYPE_CHECKING:
    from coordinator._core.calls import CallRecord
    from coordinator._core.config import PoolConfig
    from coordinator._core.quarantine import Quarantine
    from coordinator._core.queue import FairQueue
    from coordinator._core.quotas import QuotaTable

__all__ = ["Placements"]


class Placements:
    """Placement records by worker identity, the ACTIVE ones in order, and attempts per tenant."""

    def __init__(
        self,
        config: PoolConfig,
        quotas: QuotaTable,
        queue: FairQueue | None = None,
        quarantine: Quarantine | None = None,
    ) -> None:
        self._config, self._quotas, self._queue, self._quarantine = config, quotas, queue, quarantine
        self._by_identity: dict[bytes, Placement] = {}
        self.owners = Owners(config.dedicated_workers, config.worker_count, config.dedicated_node_groups)
        self.active: list[Placement] = []
        self.per_tenant: dict[str, int] = {}
        """Attempts at workers per tenant (``max_inflight``); a tenant holding none is absent.
        A plain dict: ``Counter``'s ``__missing__`` and ``__delitem__`` are Python, on every call."""

    def get(self, process: WorkerProcess) -> Placement | None:
        return self._by_identity.get(process.identity)

    def add(self, process: WorkerProcess) -> None:
        """``process`` was promoted to ACTIVE."""
        self._by_identity.setdefault(process.identity, Placement(process))
        self.owners.assign(process.identity, process.process.group)
        self.refresh()

    def remove(self, process: WorkerProcess) -> Placement | None:
        """``process`` was reaped: its record, with what it still held."""
        placement = self._by_identity.pop(process.identity, None)
        self.owners.release(process.identity)
        self.refresh()
        return placement

    def refresh(self) -> None:
        """Re-read which processes are ACTIVE (the supervisor changes states; we only read them), and
        move the dedicated workers being drained that now hold no call."""
        self.active = [w for w in self._by_identity.values() if w.process.state is WorkerState.ACTIVE]
        if self.owners.pending:
            self._settle_owners()

    def set_dedicated(self, workers: Mapping[str, int], node_groups: Mapping[str, str]) -> None:
        """New dedicated groups (``ValueError``, nothing changed, if not valid); idle workers move at once,
        busy ones once drained (``coordinator._core.dedicated``)."""
        self.owners.replace(workers, node_groups)
        self._settle_owners()

    def owner(self, process: WorkerProcess) -> str | None:
        """The dedicated tenant ``process`` serves (``None``: shared, or being drained before it moves)."""
        owner = self.owners.owner(process.identity)
        return owner if owner is None or self.owners.dedicated(owner) else None

    def _settle_owners(self) -> None:
        idle = {w.identity for w in self.active if not w.attempts}
        busy = [w.identity for w in sorted(self.active, key=lambda w: len(w.attempts)) if w.attempts]
        self.owners.settle(idle, busy)
        for worker in self.active:  # a worker kept for a suspect that is now someone's: keep another
            if worker.reserved and self.owners.owner(worker.identity) is not None:
                worker.reserved = False

    def __iter__(self) -> Iterator[Placement]:
        return iter(list(self._by_identity.values()))

    def placed(self, tenant: str) -> None:
        per_tenant = self.per_tenant
        per_tenant[tenant] = per_tenant.get(tenant, 0) + 1

    def released(self, tenant: str) -> None:
        per_tenant = self.per_tenant
        held = per_tenant.get(tenant, 0) - 1
        if held:
            per_tenant[tenant] = held
        else:
            del per_tenant[tenant]

    def expire_zombies(self, before: float) -> None:
        """Stop expecting replies to attempts given up on before ``before`` (long forgotten)."""
        for worker in self._by_identity.values():
            for wire in [w for w, since in worker.zombies.items() if since < before]:
                del worker.zombies[wire]

    def pick(self, call: CallRecord) -> Placement | None:
        """The best ACTIVE worker for ``call`` now, or ``None`` if none has room (or its tenant is capped)."""
        tenant = call.tenant
        if self._capped(tenant):
            return None
        offenders = self._quarantine is not None and self._quarantine.offenders > 0
        now = time.monotonic() if offenders else 0.0  # only offenders' records need the time
        apart = offenders and self._offender(tenant, now)
        owners = self.owners if self.owners else None
        inline, alone, pipeline = call.inline, call.alone, self._config.region_pipeline
        key, best, best_score = (call.handle.kind, call.handle.sha256), None, None
        for worker in self.active:
            if worker.alone or (worker.attempts if alone else worker.reserved and not apart):
                continue
            if offenders and not self._may_share(worker, tenant, apart, now):
                continue
            if owners is not None and owners.owner(worker.identity) != self._owner_of(tenant):
                continue
            if inline:
                depth = len(worker.inline)
                if depth >= pipeline:
                    continue
                away = call.resident is not None and call.resident_elsewhere(worker.id)  # entries stay
                # An inline call keeps its worker's loop thread from serving the provider calls held
                # there (their host replies wait until it ends): a worker holding none comes first.
                score: tuple[int, ...] = (
                    depth,
                    worker.threaded > 0,
                    away,
                    key not in worker.scripts,
                    worker.threaded,
                )
            else:
                if worker.threaded >= worker.process.capacity:
                    continue
                # A worker whose loop thread runs an inline call receives nothing until that call ends
                # (up to a hook's deadline): a free loop beats a warm AST, which saves only a compile.
                # So does a worker running no provider call: one that runs another tenant's CPU-bound
                # script (up to its CPU bound) delays every call beside it, a compile costs ~1 ms once.
                score = (
                    bool(worker.inline),
                    worker.threaded > 0,
                    key not in worker.scripts,
                    worker.threaded,
                    len(worker.inline),
                )
            if best_score is None or score < best_score:
                best, best_score = worker, score
        return best

    def has_room(self, inline: bool) -> bool:
        """Whether any ACTIVE worker has a free slot for such a call: what ``pick`` needs first, at a
        fraction of its cost (the dispatcher's pump asks before each try, most of which find none)."""
        if inline:
            pipeline = self._config.region_pipeline
            return any(len(worker.inline) < pipeline for worker in self.active)
        return any(worker.threaded < worker.process.capacity for worker in self.active)

    def _capped(self, tenant: str) -> bool:
        """At its ``max_inflight``, or (while others wait) at its fair share."""
        held, cap = self.per_tenant.get(tenant, 0), self._quotas.of(tenant).max_inflight
        if cap is not None and held >= cap:
            return True
        return self._config.tenant_fair_share and held >= self._fair_share(tenant)

    def _fair_share(self, tenant: str) -> float:
        """Slots / tenants present, while another tenant that could be placed has a call waiting."""
        if self._queue is None or not self._queue:
            return math.inf
        queued = self._queue.tenants()
        if len(queued) == 1 and tenant in queued:
            return math.inf  # only this tenant waits
        waiting = {t for t in queued if t != tenant and not self._at_cap(t)}
        if not waiting:
            return math.inf
        present = len(waiting | self.per_tenant.keys() | {tenant})
        slots = sum(w.process.capacity + self._config.region_pipeline for w in self.active)
        return max(1, slots // present)

    def _at_cap(self, tenant: str) -> bool:
        cap = self._quotas.of(tenant).max_inflight
        return cap is not None and self.per_tenant.get(tenant, 0) >= cap

    def _owner_of(self, tenant: str) -> str | None:
        """The owner a worker must have to take ``tenant``'s call: the tenant itself, or nobody."""
        return tenant if self.owners.dedicated(tenant) else None

    def _offender(self, tenant: str, now: float) -> bool:
        return self._quarantine is not None and self._quarantine.offender(tenant, now)

    def _may_share(self, worker: Placement, tenant: str, apart: bool, now: float) -> bool:
        """An offender's call only beside its own calls; nobody's call beside an offender's."""
        others = {a.call.tenant for a in worker.attempts.values()} - {tenant}
        if apart:
            return not others
        return not any(self._offender(other, now) for other in others)

    @property
    def any_reserved(self) -> bool:
        """Whether a worker is being kept free for a suspect's or an offender's call."""
        return any(w.reserved for w in self.active)

    def reserve(self, suspect_waiting: bool | None = None) -> None:
        """While a suspect's call (or an offender's, given two workers or more) waits, keep one worker
        (the least busy) draining for it.  ``None``: look at the queue's heads."""
        if suspect_waiting is None:
            suspect_waiting = self.apart_waiting(self._queue.head_list() if self._queue else [])
        reserved = [w for w in self.active if w.reserved]
        if not suspect_waiting:
            for worker in reserved:
                worker.reserved = False
        elif not reserved and (
            candidates := [w for w in self.active if not w.alone and self.owners.owner(w.identity) is None]
        ):
            min(candidates, key=lambda w: len(w.attempts)).reserved = True

    def apart_waiting(self, heads: list[CallRecord]) -> bool:
        """Whether one of ``heads`` (the queue's, as ``FairQueue.head_list`` gives them) must run apart."""
        if not heads:
            return False
        now, several = time.monotonic(), len(self.active) > 1
        return any(c.alone or (several and self._offender(c.tenant, now)) for c in heads)
