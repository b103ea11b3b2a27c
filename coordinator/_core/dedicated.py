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
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["Owners"]


class Owners:
    """Which worker (by routing identity) belongs to which dedicated tenant."""

    def __init__(
        self, wanted: Mapping[str, int], workers: int, groups: Mapping[str, str] | None = None
    ) -> None:
        self._groups = dict(groups or {})
        """Tenant → the node group its workers come from (not out of the pool's own ``workers``)."""
        local = {tenant: n for tenant, n in wanted.items() if tenant not in self._groups}
        if set(self._groups) - set(wanted):
            raise ValueError(f"dedicated_node_groups {self._groups} names tenants without dedicated_workers")
        if any(n < 1 for n in wanted.values()) or (local and sum(local.values()) >= workers):
            raise ValueError(
                f"dedicated_workers {dict(wanted)} must each be at least 1 and leave a shared worker "
                f"among the pool's {workers}"
            )
        self._wanted = dict(wanted)
        self._owner: dict[bytes, str] = {}

    def assign(self, identity: bytes, group: str = "") -> str | None:
        """A worker became ACTIVE (on a node of ``group``):
        the dedicated tenant it now serves, or ``None``."""
        if identity in self._owner:
            return self._owner[identity]
        for tenant, wanted in self._wanted.items():
            if self._groups.get(tenant, "") != group and (tenant in self._groups or group in self._pinned):
                continue  # a pinned tenant only from its group; nobody else from a pinned group
            if sum(1 for owner in self._owner.values() if owner == tenant) < wanted:
                self._owner[identity] = tenant
                return tenant
        return None

    def release(self, identity: bytes) -> None:
        """The worker is gone: its tenant is short one until the next ACTIVE worker."""
        self._owner.pop(identity, None)

    @property
    def _pinned(self) -> set[str]:
        return set(self._groups.values())

    def owner(self, identity: bytes) -> str | None:
        return self._owner.get(identity)

    def dedicated(self, tenant: str) -> bool:
        return tenant in self._wanted

    def __bool__(self) -> bool:
        return bool(self._wanted)
