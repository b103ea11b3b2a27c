"""Per-tenant worker groups (``PoolConfig.dedicated_workers``): workers that run one tenant only.

For tenants that pay for isolation: their calls run only on their own workers and nobody else's
call is placed there, so no other tenant's crash, flood or (in the worst case) compromised worker
process ever shares a process with them.  The group is carved out of the pool's ``workers``: as
workers become ACTIVE, each goes to the first dedicated tenant still short of its count, the rest
are shared.  A dedicated worker that dies is replaced like any other (from a warm spare), and the
replacement goes back to the tenant that lost it.

A dedicated tenant may be pinned to a node group (``PoolConfig.dedicated_node_groups``): its workers
are then taken only from nodes started with ``rhaipool node --group`` of that name, not out of the
pool's own ``workers``, and no other dedicated tenant takes workers from a pinned group.

The groups may change while the pool runs (``Pool.set_dedicated``): a worker whose owner must
change (to another tenant, or from shared to a tenant, or out of a tenant that still has others) is
first *drained*: nothing new is placed there, its running calls finish, and only then does it move,
so no tenant's call ever shares a process with another's and no call is failed by the change.  A
tenant that is no longer dedicated gives its workers back to the shared ones at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Final

__all__ = ["Owners"]

_DRAINING: Final = "\x00draining"
"""The owner of a worker being drained before it moves: no tenant's calls are placed there."""


class Owners:
    """Which worker (by routing identity) belongs to which dedicated tenant."""

    def __init__(
        self, wanted: Mapping[str, int], workers: int, groups: Mapping[str, str] | None = None
    ) -> None:
        self._workers = workers
        self._wanted, self._groups = _checked(wanted, workers, groups or {})
        """Tenant → how many workers; tenant → the node group its workers come from (not out of the
        pool's own ``workers``)."""
        self._owner: dict[bytes, str] = {}
        self._group_of: dict[bytes, str] = {}
        """Every worker assigned (owned or shared) → the node group it came from (``""``: local)."""
        self._draining: set[bytes] = set()
        self.pending = False
        """Workers are being drained: ``settle`` must be asked again once they are idle."""

    def replace(self, wanted: Mapping[str, int], groups: Mapping[str, str]) -> None:
        """New groups (``ValueError``, nothing changed, if they are not valid); call ``settle`` next."""
        self._wanted, self._groups = _checked(wanted, self._workers, groups)
        self.pending = True

    def assign(self, identity: bytes, group: str = "") -> str | None:
        """A worker became ACTIVE (on a node of ``group``):
        the dedicated tenant it now serves, or ``None``."""
        if identity in self._owner:
            return self._owner[identity]
        self._group_of[identity] = group
        for tenant, wanted in self._wanted.items():
            if self._eligible(tenant, group) and self._count(tenant) < wanted:
                self._owner[identity] = tenant
                return tenant
        return None

    def settle(self, idle: AbstractSet[bytes], busy: Sequence[bytes]) -> None:
        """Move workers toward the wanted groups; ``idle``: the ACTIVE workers holding no call, ``busy``:
        the others, least loaded first.  An idle worker moves at once; a busy one is drained first."""
        for identity in [i for i in self._draining if i in idle]:  # drained: free to go where wanted
            self._draining.discard(identity)
            del self._owner[identity]
        kept: dict[str, int] = {}
        owned = sorted(self._owner.items(), key=lambda item: item[0] in idle)  # busy ones kept first
        for identity, tenant in owned:
            group = self._group_of[identity]
            if tenant == _DRAINING:
                continue
            if tenant not in self._wanted:
                del self._owner[identity]  # no longer dedicated: its workers are shared at once
            elif kept.get(tenant, 0) < self._wanted[tenant] and self._eligible(tenant, group):
                kept[tenant] = kept.get(tenant, 0) + 1
            elif identity in idle:
                del self._owner[identity]
            else:
                self._drain(identity)
        free = [i for i in idle if i not in self._owner]
        movable = [i for i in busy if i not in self._owner]
        draining = set(self._draining)
        for tenant, wanted in self._wanted.items():
            short = wanted - kept.get(tenant, 0)
            for source in (free, draining, movable):  # idle now, drained soon, drained from now on
                eligible = [i for i in source if self._eligible(tenant, self._group_of.get(i, ""))]
                for identity in eligible[: max(0, short)]:
                    short -= 1
                    if source is free:
                        free.remove(identity)
                        self._owner[identity] = tenant
                    elif source is draining:
                        draining.discard(identity)
                    else:
                        movable.remove(identity)
                        self._drain(identity)
        self.pending = bool(self._draining)

    def release(self, identity: bytes) -> None:
        """The worker is gone: its tenant is short one until the next ACTIVE worker."""
        self._owner.pop(identity, None)
        self._group_of.pop(identity, None)
        self._draining.discard(identity)

    def owner(self, identity: bytes) -> str | None:
        return self._owner.get(identity)

    def dedicated(self, tenant: str) -> bool:
        return tenant in self._wanted

    def wanted(self) -> tuple[dict[str, int], dict[str, str]]:
        """The groups asked for: tenant → workers, tenant → node group (copies)."""
        return dict(self._wanted), dict(self._groups)

    def __bool__(self) -> bool:
        return bool(self._wanted) or bool(self._draining)

    def _eligible(self, tenant: str, group: str) -> bool:
        """A pinned tenant takes workers only from its group; nobody else takes from a pinned group."""
        pinned = self._groups.get(tenant)
        return group == pinned if pinned is not None else group not in self._groups.values()

    def _count(self, tenant: str) -> int:
        return sum(1 for owner in self._owner.values() if owner == tenant)

    def _drain(self, identity: bytes) -> None:
        self._owner[identity] = _DRAINING
        self._draining.add(identity)


def _checked(
    wanted: Mapping[str, int], workers: int, groups: Mapping[str, str]
) -> tuple[dict[str, int], dict[str, str]]:
    wanted, groups = dict(wanted), dict(groups)
    if set(groups) - set(wanted):
        raise ValueError(f"dedicated_node_groups {groups} names tenants without dedicated_workers")
    local = {tenant: n for tenant, n in wanted.items() if tenant not in groups}
    bad = [n for n in wanted.values() if type(n) is not int or n < 1]
    if bad or (local and sum(local.values()) >= workers):
        raise ValueError(
            f"dedicated_workers {wanted} must each be at least 1 and leave a shared worker "
            f"among the pool's {workers}"
        )
    if any(not isinstance(t, str) or not isinstance(g, str) for t, g in groups.items()):
        raise ValueError(f"dedicated_node_groups {groups} must map tenant ids to group names")
    return wanted, groups
