"""What the coordinator holds for egress, bounded in total as well as per call (issue 10, points 2 and 5).

Per call, ``max_response_bytes`` caps one body or one SSE event. That alone let 40 concurrent 16 MB
answers take the coordinator to 1 GB, so every byte read from a provider is also counted against:

* a **global response budget** (bodies of ``http_get``/``http_post`` being read, until the text is
  handed to the script; a read body counts twice, bytes and text): default 256 MiB,
  ``EgressLimits.response_bytes``;
* a **global stream-buffer budget** (``stream_request`` bytes read but not yet handed over as
  events, partial events included): default 64 MiB, ``EgressLimits.stream_bytes``;
* the tenant's **response bytes in flight** (both kinds): default 64 MiB per tenant,
  ``EgressLimits.tenant_response_bytes``;

and every request counts against the tenant's **egress requests in flight**: default 128,
``EgressLimits.tenant_requests``; a request over it queues up to ``EgressLimits.request_wait``
(default 30 s) for one of the tenant's own requests to finish.

The two per-tenant quotas can be changed live, for every tenant and for one
(:meth:`TenantBudgets.set_quotas`, ``Egress.set_tenant_quotas``; the service's ``egress_max_inflight``
and ``egress_max_bytes``): requests and bodies already in flight keep what they hold, the next ones
see the new bound, and raising it lets waiters in at once.

A read that finds no room waits up to ``EgressLimits.wait`` (default 2 s) for others to hand their
bodies over, then fails with its own typed error (``coordinator.egress.errors``: a ``HostError``
subclass, so the script sees a ``transport`` map with ``transient: true`` and the provider retry
layer treats it like any passing capacity problem). A body that can never fit (bigger than the whole
budget) fails at once. A declared ``Content-Length`` is reserved in one piece before reading, so two
big answers do not each get half-way and then starve each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from coordinator.egress.errors import (
    EgressBudgetExhausted,
    ResponseBudgetExhausted,
    StreamBudgetExhausted,
    TenantRequestsExceeded,
    TenantResponseBytesExceeded,
)

__all__ = ["ByteBudget", "EgressLimits", "EgressQuota", "Reservation", "TenantBudgets"]

_MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class EgressLimits:
    """The totals egress may hold; ``None`` switches a per-tenant quota off. Defaults in the docstring."""

    response_bytes: int = 256 * _MIB
    stream_bytes: int = 64 * _MIB
    tenant_response_bytes: int | None = 64 * _MIB
    tenant_requests: int | None = 128
    wait: float = 2.0
    request_wait: float = 30.0


class EgressQuota(NamedTuple):
    """One tenant's egress quotas; ``None`` switches one off (a plain 2-tuple is accepted too).

    ``max_inflight``: requests in flight (the service's ``egress_max_inflight``); ``max_bytes``:
    response bytes held (``egress_max_bytes``).
    """

    max_inflight: int | None = None
    max_bytes: int | None = None


def checked_quota(quota: tuple[int | None, int | None]) -> EgressQuota:
    """``quota`` as an :class:`EgressQuota`; ValueError for a bound that is not a positive int or None."""
    made = EgressQuota(*quota)
    for name, value in (("egress_max_inflight", made.max_inflight), ("egress_max_bytes", made.max_bytes)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be a positive integer or None, not {value!r}")
    return made


#: The size of a quota switched off live while some of a tenant's requests still hold units of it.
_UNBOUNDED = 1 << 62


@dataclass(eq=False, slots=True)
class _Waiter:
    n: int
    granted: asyncio.Future[bool]
    held: int  # what the waiter already holds here and cannot give back while it waits
    ticket: int  # its body's age: the youngest stuck body gives way


class ByteBudget:
    """Units (bytes, requests) held at once, with waiting for room.

    A body that already holds bytes and needs more goes first: finishing it is what frees memory.
    Newcomers are served strictly in arrival order, so a big one is not overtaken by small ones and
    cannot starve; each waits at most ``wait``. Bodies read in pieces can still deadlock (each holds
    part of the budget and waits for more): when every unit held belongs to a waiter, the youngest
    such body is refused at once, and its bytes let the older ones finish.
    """

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0
        self._waiters: deque[_Waiter] = deque()

    @property
    def idle(self) -> bool:
        """Nothing held and nobody waiting."""
        return self.used == 0 and not self._waiters

    async def acquire(self, n: int, wait: float, *, held: int = 0, ticket: int = 0) -> bool:
        """Hold ``n`` more units, waiting up to ``wait`` seconds for room; ``False`` if none came.

        ``n`` larger than the whole budget never fits and is refused at once; ``held``/``ticket``
        describe what the caller already holds here (for the deadlock rule above).
        """
        if n <= 0:
            return True
        if n > self.total:
            return False
        if self.used + n <= self.total and (held > 0 or not self._waiters):
            self.used += n
            return True
        waiter = _Waiter(n, asyncio.get_running_loop().create_future(), held, ticket)
        self._waiters.append(waiter)
        self._break_deadlock()
        granted = False
        try:
            async with asyncio.timeout(wait):
                granted = await waiter.granted
        except TimeoutError:
            pass
        finally:
            if not granted:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
                future = waiter.granted
                if future.done() and not future.cancelled() and future.result():
                    self.release(n)  # room came just as we gave up: pass it on
                self._wake()  # a head that gave up may have been blocking smaller ones
        return granted

    def resize(self, total: int) -> None:
        """A new bound, live: what is held stays held; waiters that now fit are let in."""
        self.total = total
        self._wake()

    def release(self, n: int) -> None:
        """Give ``n`` units back and grant waiters in order (safe in a ``finally``)."""
        if n > 0:
            self.used = max(0, self.used - n)
            self._wake()

    def _wake(self) -> None:
        if not self._waiters:  # the usual case, on every release: nothing to grant, nobody stuck
            return
        self._waiters = deque(w for w in self._waiters if not w.granted.done())
        for waiter in [w for w in self._waiters if w.held > 0]:  # growing bodies first
            if self.used + waiter.n <= self.total:
                self._grant(waiter)
        for waiter in [w for w in self._waiters if w.held == 0]:  # then newcomers, in order
            if self.used + waiter.n > self.total:
                break
            self._grant(waiter)
        self._waiters = deque(w for w in self._waiters if not w.granted.done())
        self._break_deadlock()

    def _grant(self, waiter: _Waiter) -> None:
        self.used += waiter.n
        waiter.granted.set_result(True)

    def _break_deadlock(self) -> None:
        """Refuse the youngest stuck holder when every unit held belongs to a waiter."""
        stuck = [w for w in self._waiters if w.held > 0 and not w.granted.done()]
        if stuck and sum(w.held for w in stuck) >= self.used:
            max(stuck, key=lambda w: w.ticket).granted.set_result(False)


class Reservation:
    """Bytes one body (or stream) holds in its global budget and its tenant's quota."""

    def __init__(
        self, owner: TenantBudgets, pool: ByteBudget, error: type[EgressBudgetExhausted], tenant: str
    ) -> None:
        self._owner, self._pool, self._error, self.tenant = owner, pool, error, tenant
        self._quota = owner.tenant_bytes(tenant)  # the one it holds bytes of, even if quotas change
        self.held = 0
        self.ticket = next(owner.tickets)

    async def grow(self, n: int) -> None:
        """Hold ``n`` more bytes, or raise the typed error of whichever bound had no room."""
        owner, wait = self._owner, self._owner.limits.wait
        quota = self._quota
        if quota is not None and not await quota.acquire(n, wait, held=self.held, ticket=self.ticket):
            owner.refusals[TenantResponseBytesExceeded.limit] += 1
            raise TenantResponseBytesExceeded(
                f"egress refused: tenant {self.tenant!r} already holds its {quota.total}-byte quota of "
                "response bytes in flight (egress_max_bytes, EgressLimits.tenant_response_bytes)",
                tenant=self.tenant,
            )
        if not await self._pool.acquire(n, wait, held=self.held, ticket=self.ticket):
            if quota is not None:
                quota.release(n)
            owner.refusals[self._error.limit] += 1
            raise self._error(
                f"egress refused: the coordinator's {self._pool.total}-byte budget of "
                f"{self._error.limit.replace('_', ' ')} in flight is full "
                f"(EgressLimits.{self._error.limit})",
                tenant=self.tenant,
            )
        self.held += n

    def shrink_to(self, n: int) -> None:
        """Hold only ``n`` bytes from now on (what is still buffered)."""
        if n < self.held:
            self._give_back(self.held - n)
            self.held = n

    def close(self) -> None:
        """Give everything back (the body was handed over, or the request failed)."""
        self.shrink_to(0)

    def _give_back(self, n: int) -> None:
        self._pool.release(n)
        if self._quota is not None:
            self._quota.release(n)


class TenantBudgets:
    """The global budgets and every tenant's quotas of one :class:`~coordinator.egress.Egress`."""

    def __init__(self, limits: EgressLimits | None = None) -> None:
        self.limits = limits or EgressLimits()
        self.responses = ByteBudget(self.limits.response_bytes)
        self.streams = ByteBudget(self.limits.stream_bytes)
        self._bytes: dict[str, ByteBudget] = {}
        self._requests: dict[str, ByteBudget] = {}
        self.default_quota = EgressQuota(self.limits.tenant_requests, self.limits.tenant_response_bytes)
        self.quotas: dict[str, EgressQuota] = {}
        """Per-tenant overrides of ``default_quota`` (:meth:`set_quotas`)."""
        self.tickets = itertools.count()  # each body's age, for the deadlock rule
        self.refusals: Counter[str] = Counter()
        """Refusals so far by ``limit`` name (a bounded label set, for metrics)."""

    def in_flight(self) -> dict[str, int]:
        """What egress holds now: bytes of both budgets, requests and tenants with any (for metrics)."""
        return {
            "response_bytes": self.responses.used,
            "stream_bytes": self.streams.used,
            "requests": sum(b.used for b in self._requests.values()),
            "tenants": len(self._requests),
        }

    def quota(self, tenant: str) -> EgressQuota:
        """The quotas that apply to ``tenant`` now."""
        return self.quotas.get(tenant, self.default_quota)

    def set_quotas(
        self,
        default: tuple[int | None, int | None],
        per_tenant: Mapping[str, tuple[int | None, int | None]] | None = None,
    ) -> None:
        """Replace every tenant's quotas, live: ``default`` for all, ``per_tenant`` overrides by tenant id.

        Requests and bodies in flight keep what they hold; a lowered bound applies to the next unit
        asked for, a raised one lets waiting requests in at once.
        """
        quotas = {tenant: checked_quota(q) for tenant, q in (per_tenant or {}).items()}
        self.default_quota, self.quotas = checked_quota(default), quotas
        for table, field_of in ((self._requests, "max_inflight"), (self._bytes, "max_bytes")):
            for tenant, budget in table.items():
                total = getattr(self.quota(tenant), field_of)
                budget.resize(_UNBOUNDED if total is None else total)

    def tenant_bytes(self, tenant: str) -> ByteBudget | None:
        """The tenant's response-bytes quota (``None`` when switched off)."""
        return self._per_tenant(self._bytes, tenant, self.quota(tenant).max_bytes)

    def _per_tenant(self, table: dict[str, ByteBudget], tenant: str, total: int | None) -> ByteBudget | None:
        budget = table.get(tenant)
        if budget is None:
            if total is None:
                return None
            budget = table[tenant] = ByteBudget(total)
        return budget

    def _forget_idle(self, table: dict[str, ByteBudget], tenant: str) -> None:
        """Drop a tenant's idle entry so the tables hold only tenants with something in flight."""
        budget = table.get(tenant)
        if budget is not None and budget.idle:
            del table[tenant]

    def request(self, tenant: str, kind: str) -> _Request:
        """One egress request of ``tenant`` (``kind`` ``"response"`` or ``"stream"``) while it runs:
        ``async with budgets.request(tenant, kind) as reservation``."""
        return _Request(self, tenant, kind)


class _Request:
    """:meth:`TenantBudgets.request`'s context: the tenant's request slot and the body's reservation.

    A class rather than ``asynccontextmanager``: it is entered once per egress request, and the
    generator machinery cost more than the bookkeeping itself."""

    __slots__ = ("_kind", "_owner", "_reservation", "_slots", "_tenant")

    def __init__(self, owner: TenantBudgets, tenant: str, kind: str) -> None:
        self._owner, self._tenant, self._kind = owner, tenant, kind
        self._slots: ByteBudget | None = None
        self._reservation: Reservation | None = None

    async def __aenter__(self) -> Reservation:
        owner, tenant = self._owner, self._tenant
        slots = owner._per_tenant(owner._requests, tenant, owner.quota(tenant).max_inflight)
        if slots is not None and not await slots.acquire(1, owner.limits.request_wait):
            owner.refusals[TenantRequestsExceeded.limit] += 1
            raise TenantRequestsExceeded(
                f"egress refused: tenant {tenant!r} already has {slots.total} requests in flight "
                "(egress_max_inflight, EgressLimits.tenant_requests)",
                tenant=tenant,
            )
        self._slots = slots
        if self._kind == "stream":
            reservation = Reservation(owner, owner.streams, StreamBudgetExhausted, tenant)
        else:
            reservation = Reservation(owner, owner.responses, ResponseBudgetExhausted, tenant)
        self._reservation = reservation
        return reservation

    async def __aexit__(self, *exc: object) -> None:
        owner, tenant = self._owner, self._tenant
        if self._reservation is not None:
            self._reservation.close()
        if self._slots is not None:
            self._slots.release(1)
        owner._forget_idle(owner._requests, tenant)
        owner._forget_idle(owner._bytes, tenant)
