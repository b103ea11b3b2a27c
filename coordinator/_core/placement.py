"""``Placements``: the dispatcher's records of what runs where, and the choice of where a call goes.

One ``Placement`` (``coordinator._core.workers``) per worker that is, or was, ACTIVE and not yet
reaped.  The choice: a worker with room (inline pipeline depth, threaded capacity), then AST
affinity (no source to send), then the least loaded; a region call prefers the worker holding its
resident entries.  Suspects' calls (``coordinator._core.isolation``) get a worker holding nothing
else, and one worker is *reserved* (nothing new placed there) while such a call waits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

from coordinator._core.workers import Placement, WorkerProcess, WorkerState

if TYPE_CHECKING:
    from coordinator._core.calls import Call
    from coordinator._core.config import PoolConfig

__all__ = ["Placements"]


class Placements:
    """Placement records by worker identity, the ACTIVE ones in order, and attempts per tenant."""

    def __init__(self, config: PoolConfig) -> None:
        self._config = config
        self._by_identity: dict[bytes, Placement] = {}
        self.active: list[Placement] = []
        self.per_tenant: Counter[str] = Counter()
        """Attempts at workers per tenant (``tenant_max_inflight``)."""

    def get(self, process: WorkerProcess) -> Placement | None:
        return self._by_identity.get(process.identity)

    def add(self, process: WorkerProcess) -> None:
        """``process`` was promoted to ACTIVE."""
        self._by_identity.setdefault(process.identity, Placement(process))
        self.refresh()

    def remove(self, process: WorkerProcess) -> Placement | None:
        """``process`` was reaped: its record, with what it still held."""
        placement = self._by_identity.pop(process.identity, None)
        self.refresh()
        return placement

    def refresh(self) -> None:
        """Re-read which processes are ACTIVE (the supervisor changes states; we only read them)."""
        self.active = [w for w in self._by_identity.values() if w.process.state is WorkerState.ACTIVE]

    def __iter__(self) -> Iterator[Placement]:
        return iter(list(self._by_identity.values()))

    def placed(self, tenant: str) -> None:
        self.per_tenant[tenant] += 1

    def released(self, tenant: str) -> None:
        self.per_tenant[tenant] -= 1
        if not self.per_tenant[tenant]:
            del self.per_tenant[tenant]

    def pick(self, call: Call) -> Placement | None:
        """The best ACTIVE worker for ``call`` now, or ``None`` if none has room (or its tenant is capped)."""
        cap = self._config.tenant_max_inflight
        if cap is not None and self.per_tenant[call.tenant] >= cap:
            return None
        key, best, best_score = (call.handle.kind, call.handle.sha256), None, None
        for worker in self.active:
            if worker.alone or (worker.attempts if call.alone else worker.reserved):
                continue
            if call.inline:
                depth = len(worker.inline)
                if depth >= self._config.region_pipeline:
                    continue
                away = call.resident_elsewhere(worker.id)  # a region stays where its entries are
                score: tuple[int, ...] = (depth, away, key not in worker.scripts, worker.threaded)
            else:
                if worker.threaded >= worker.process.capacity:
                    continue
                score = (key not in worker.scripts, worker.threaded, len(worker.inline))
            if best_score is None or score < best_score:
                best, best_score = worker, score
        return best

    def reserve(self, suspect_waiting: bool) -> None:
        """While a suspect's call waits, keep one worker (the least busy) draining for it."""
        reserved = [w for w in self.active if w.reserved]
        if not suspect_waiting:
            for worker in reserved:
                worker.reserved = False
        elif not reserved and (candidates := [w for w in self.active if not w.alone]):
            min(candidates, key=lambda w: len(w.attempts)).reserved = True
