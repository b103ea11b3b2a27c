"""Handing a tenant over to the coordinator its requests arrive at (several coordinators over one
PostgreSQL database).

A coordinator added to the set receives, from the balancer's consistent hash, the requests of tenants
the others own; it forwards them to their owners (``forward.py``), so by itself it would add a hop and
no capacity. Each owner therefore watches where its tenants' requests come from
(:meth:`Handovers.note`): when :data:`RUN` consecutive requests for a tenant arrived forwarded by the
same coordinator, over at least a third of a lease, the owner hands the tenant over to it:

1. it admits no new request for the tenant: a forwarded one is answered ``503`` with
   :data:`MOVING_HEADER`, which the forwarding coordinator does not relay -- it retries the request
   itself every :data:`RETRY_SECS` until it holds the lease, so no client sees it; one sent straight
   to the owner waits for the hand-over to end, then goes where the tenant went;
2. it waits for the tenant's calls in flight to end, at most a lease (or ``[serve] grace_secs`` if
   shorter); if they do not, the hand-over is abandoned: the tenant stays, its requests are admitted
   again, and it is not tried again for :data:`HOLD_LEASES` leases (a tenant with long streams open
   is not stalled over and over);
3. it releases the lease as a clean stop does (expiry now, epoch kept: the next owner's take makes it
   grow, so a write still carrying the old epoch is refused) and forgets the tenant's state.

The forwarding coordinator then takes the lease and loads the tenant from the database before serving
anything of it (``Service.own``), and answers the request. For :data:`TAKE_BACK_SECS` after releasing,
the old owner does not take the lease back itself: a request sent straight to it waits for the new
owner to take it and is forwarded there (if nobody takes it in that time, the old owner does).

No ping-pong: a coordinator that takes a tenant another coordinator had -- by a hand-over, or after
a failover or a clean stop (the lease's epoch past 1) -- does not hand it over for :data:`HOLD_LEASES`
leases, so a balancer flapping between two coordinators moves a tenant at most once per hold, and a
coordinator that comes back from a pause or a restart gets its tenants back only after the hold. A
request sent straight to the owner between forwarded ones restarts the count, so a
round-robin balancer, which spreads every tenant's requests over all coordinators, moves nothing.

Only a forward a coordinator made counts: it carries :data:`PROOF_HEADER`, an HMAC of the forwarding
coordinator's id under a key the coordinators share through the database (``Storage.cluster_key``). A
client that writes ``rhaipool-forwarded-by`` itself cannot make its owner hand it over (and so start
its quotas, strikes and quarantines afresh): its requests count as sent straight to the owner.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from typing import Final

__all__ = [
    "HOLD_LEASES",
    "MOVING_HEADER",
    "PROOF_HEADER",
    "RETRY_SECS",
    "RUN",
    "TAKE_BACK_SECS",
    "Handovers",
]

RUN: Final = 8
"""Consecutive forwarded requests (from one coordinator, over a third of a lease) that move a tenant."""
HOLD_LEASES: Final = 6.0
"""A tenant taken from another coordinator is not handed over for this many leases."""
TAKE_BACK_SECS: Final = 1.0
"""How long, after handing a tenant over, the old owner leaves its released lease to the new owner."""
RETRY_SECS: Final = 0.05
"""How often the forwarding coordinator tries again to take a tenant being handed over to it."""
MOVING_HEADER: Final = b"rhaipool-moving"
"""On the ``503`` of a forwarded request for a tenant being handed over (never relayed to a client)."""
PROOF_HEADER: Final = b"rhaipool-forward-proof"
"""A forward's proof that a coordinator made it (an HMAC of its ``rhaipool-forwarded-by`` value)."""


@dataclass(slots=True)
class _Run:
    """The forwarded requests of one tenant that came from one coordinator without a break."""

    by: str
    count: int
    since: float


@dataclass(frozen=True, slots=True)
class Released:
    """A lease this coordinator gave up by a hand-over: when (monotonic) and at which epoch."""

    at: float
    epoch: int


class Handovers:
    """One coordinator's book of hand-overs: the runs of forwarded requests per tenant, the tenants
    being handed over now, those it received (held) and those it just released."""

    def __init__(self, key: bytes, me: str, lease_secs: float) -> None:
        self._key = key
        self.me = me
        self.lease_secs = lease_secs
        self.proof = self.sign(me)
        """This coordinator's proof, sent with every request it forwards."""
        self._runs: dict[str, _Run] = {}
        self._moving: dict[str, asyncio.Event] = {}
        self._held: dict[str, float] = {}
        self._released: dict[str, Released] = {}
        self._proven: dict[bytes, str] = {}
        self.handed = 0
        """Tenants handed over by this coordinator so far."""

    def sign(self, who: str) -> str:
        """The proof a coordinator called ``who`` sends."""
        return hmac.new(self._key, who.encode(), hashlib.sha256).hexdigest()

    def forwarder(self, headers: list[tuple[bytes, bytes]], hop: bytes) -> str | None:
        """The id of the coordinator that forwarded this request, if its proof holds (else None)."""
        proof = next((v for k, v in headers if k == PROOF_HEADER), None)
        if proof is None:
            return None
        known = self._proven.get(hop)
        if known is not None:
            return known if hmac.compare_digest(proof, self.sign(known).encode()) else None
        who = hop.decode("latin-1")
        if not hmac.compare_digest(proof, self.sign(who).encode()):
            return None
        if len(self._proven) < 1024:  # coordinators' ids: a few, each proven by the key
            self._proven[hop] = who
        return who

    def note(self, tenant: str, by: str | None) -> bool:
        """A request for ``tenant`` is admitted here, forwarded by coordinator ``by`` (None: sent here
        directly, or not proven); whether the tenant is to be handed over to ``by`` now."""
        if by is None:
            self._runs.pop(tenant, None)
            return False
        now = time.monotonic()
        run = self._runs.get(tenant)
        if run is None or run.by != by:
            self._runs[tenant] = _Run(by, 1, now)
            return False
        run.count += 1
        if run.count < RUN or now - run.since < self.lease_secs / 3:
            return False
        if now < self._held.get(tenant, 0.0):
            return False
        self._held.pop(tenant, None)
        del self._runs[tenant]
        return True

    def begin(self, tenant: str) -> None:
        """The hand-over of ``tenant`` starts: no new request for it is admitted."""
        self._moving[tenant] = asyncio.Event()

    def end(self, tenant: str) -> None:
        """The hand-over ended (done or abandoned): requests that waited for it go on."""
        event = self._moving.pop(tenant, None)
        if event is not None:
            event.set()

    def moving(self, tenant: str) -> bool:
        """Whether ``tenant`` is being handed over by this coordinator now."""
        return tenant in self._moving

    async def wait(self, tenant: str) -> None:
        """Until the hand-over of ``tenant`` ends (at once if there is none)."""
        event = self._moving.get(tenant)
        if event is not None:
            await event.wait()

    def released(self, tenant: str, epoch: int) -> None:
        """This coordinator releases ``tenant``'s lease at ``epoch`` for a hand-over."""
        self.handed += 1
        self._released[tenant] = Released(time.monotonic(), epoch)

    def just_released(self, tenant: str) -> Released | None:
        """The lease of ``tenant`` this coordinator released less than :data:`TAKE_BACK_SECS` ago."""
        found = self._released.get(tenant)
        if found is not None and time.monotonic() - found.at >= TAKE_BACK_SECS:
            del self._released[tenant]
            return None
        return found

    def hold(self, tenant: str) -> None:
        """``tenant`` is not handed over for :data:`HOLD_LEASES` leases: this coordinator took it from
        another (handed over, failed or stopped), or its hand-over was just abandoned (calls that did
        not end in time)."""
        self._held[tenant] = time.monotonic() + HOLD_LEASES * self.lease_secs

    def forget(self, tenant: str) -> None:
        """``tenant`` is served elsewhere now: its run of forwarded requests means nothing any more."""
        self._runs.pop(tenant, None)

    def answer(self, tenant: str) -> tuple[int, bytes, tuple[tuple[bytes, bytes], ...]]:
        """The ``503`` of a forwarded request that arrives while ``tenant`` is handed over."""
        body = json.dumps(
            {"error": f"tenant {tenant} is moving to another coordinator: nothing changed; retry"}
        ).encode()
        return 503, body, ((b"retry-after", b"1"), (MOVING_HEADER, self.me.encode()))
