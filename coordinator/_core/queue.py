"""A bounded queue that is fair across tenants: round robin over per-tenant FIFOs.

A tenant flooding the pool only lengthens its own FIFO; a quiet tenant's call is
at the head of its FIFO and is offered within one round.  When the bound is
reached, room is made by pushing out the newest call of the tenant holding the
most (longest-queue drop): a flood costs the flooder, never a quiet tenant.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterator, KeysView
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coordinator._core.calls import CallRecord

__all__ = ["FairQueue"]


class FairQueue:
    """Per-tenant FIFOs visited in rotation; ``len`` is the total across tenants."""

    def __init__(self) -> None:
        self._tenants: OrderedDict[str, deque[CallRecord]] = OrderedDict()
        self._size = 0
        self._front: dict[int, CallRecord] = {}
        """Calls put back at the front (re-runs), by ``id``: the only queued calls whose timeout may
        already be running, so the periodic sweep looks at these instead of the whole queue."""

    def __len__(self) -> int:
        return self._size

    def push(self, call: CallRecord, *, front: bool = False) -> None:
        fifo = self._tenants.get(call.tenant)
        if fifo is None:
            fifo = self._tenants[call.tenant] = deque()
        if front:
            fifo.appendleft(call)
            self._tenants.move_to_end(call.tenant, last=False)
            self._front[id(call)] = call
        else:
            fifo.append(call)
        self._size += 1

    def __iter__(self) -> Iterator[CallRecord]:
        """Every queued call, tenant by tenant."""
        for fifo in list(self._tenants.values()):
            yield from list(fifo)

    def depths(self) -> dict[str, int]:
        """Calls waiting per tenant (tenants with none are left out): for metrics and status."""
        return {tenant: len(fifo) for tenant, fifo in self._tenants.items() if fifo}

    def tenants(self) -> KeysView[str]:
        """The tenants with calls waiting (a live view)."""
        return self._tenants.keys()

    def heads(self) -> Iterator[CallRecord]:
        """Each tenant's oldest call, in rotation order (the next tenant to serve first); a snapshot, so
        the queue may change while it is iterated."""
        return iter(self.head_list())

    def head_list(self) -> list[CallRecord]:
        """``heads`` as a list (the dispatcher's pump keeps it to decide on reservations too)."""
        return [fifo[0] for fifo in self._tenants.values() if fifo]

    def put_back(self) -> list[CallRecord]:
        """The calls still waiting that were pushed with ``front=True`` (re-runs), oldest push first."""
        return list(self._front.values())

    def pop(self, call: CallRecord) -> None:
        """Remove ``call`` (normally a head just placed) and move its tenant to the back of the rotation."""
        if self._front:
            self._front.pop(id(call), None)
        fifo = self._tenants[call.tenant]
        if fifo and fifo[0] is call:
            fifo.popleft()
        else:
            fifo.remove(call)
        self._size -= 1
        if fifo:
            self._tenants.move_to_end(call.tenant)
        else:
            del self._tenants[call.tenant]

    def push_out_for(self, tenant: str) -> CallRecord | None:
        """(Queue full) remove and return the newest call of the tenant holding the most calls, if that
        tenant holds more than ``tenant`` would after its own push; else ``None`` (refuse the newcomer)."""
        own = len(self._tenants.get(tenant, ()))
        longest = max(self._tenants, key=lambda t: len(self._tenants[t]), default=None)
        if longest is None or len(self._tenants[longest]) <= own + 1:
            return None
        fifo = self._tenants[longest]
        self._size -= 1
        victim = fifo.pop()  # the rotation order stays as it was
        self._front.pop(id(victim), None)
        return victim

    def clear(self) -> None:
        self._tenants.clear()
        self._front.clear()
        self._size = 0
