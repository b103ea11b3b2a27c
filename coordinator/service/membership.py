"""Which coordinators are live, as the shared database says, and this one's place among them.

A coordinator is live while it holds a lease it renews (``leases``: the distinct owners whose expiry
has not passed on the database's clock), so joining takes no table of its own and a coordinator that
died leaves the set when its leases run out -- when its tenants move. This coordinator counts itself
even before it holds a lease. The service reads the set at every renewal and divides the rate limits
several tenants share among its members (:class:`~coordinator.providers.ratelimit.SharedLimiters`):
members are ranked by owner id, so every coordinator computes the same division.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from coordinator.service.storage import Storage
from coordinator.service.storage_backends import Db

__all__ = ["Membership", "live_coordinators"]


@dataclass(frozen=True, slots=True)
class Membership:
    """The live coordinators (sorted owner ids) and this one's rank among them."""

    members: tuple[str, ...]
    rank: int

    @property
    def count(self) -> int:
        """How many coordinators are live."""
        return len(self.members)


async def live_coordinators(storage: Storage) -> Membership:
    """The owners of unexpired leases, this coordinator included (raises ``StorageFailed``)."""
    owner = storage.owner
    if owner is None:
        return Membership(("",), 0)
    statement = f"SELECT DISTINCT owner FROM leases WHERE expires_at > {storage.backend.now}"

    def read(db: Db) -> list[str]:
        return [str(row[0]) for row in db.execute(statement).fetchall()]

    found = await asyncio.to_thread(storage.backend.run, read, transaction=False)
    members = tuple(sorted({*found, owner}))
    return Membership(members, members.index(owner))
