"""Per-tenant quotas: which apply to a tenant, and the ones that need memory of the past.

``QuotaTable`` answers "what are this tenant's quotas" with one dict get: admission, placement, the
CPU ledger and the script book all read it, and ``Pool.set_tenant_quotas`` replaces what it holds,
so a change applies to the next call, placement or load (calls already running are not cut).

``CpuLedger`` (CPU-seconds per minute) and ``ScriptBook`` (loaded scripts) are pure bookkeeping with
time passed in; the dispatcher and ``Pool.load`` ask and charge.  The call counts (in flight,
queued) need no memory and are checked where calls are submitted.

``ScriptBook`` also bounds what the coordinator keeps of script sources **in total**: a source
cache (LRU, ``script_cache_bytes``) shared by all tenants.  Forgetting a source is never an error:
the ``ScriptHandle`` a caller holds carries its source, so a worker that lacks the AST is sent it
again, and a later ``load`` of the same source compiles it again.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Mapping
from collections.abc import Set as AbstractSet

from coordinator._core.config import TenantQuotas
from coordinator._core.errors import CpuQuotaExceeded, ScriptQuotaExceeded
from coordinator._core.handles import ScriptHandle

__all__ = ["CpuLedger", "QuotaTable", "ScriptBook", "ScriptKey"]

ScriptKey = tuple[str, str]
"""``(kind, sha256)``: what a loaded script is known by."""


class QuotaTable:
    """Each tenant's ``TenantQuotas``: its own if it has some, else the default."""

    def __init__(self, default: TenantQuotas, per_tenant: Mapping[str, TenantQuotas] | None = None) -> None:
        self.default = default
        self._per_tenant: dict[str, TenantQuotas] = {}
        self.replace(default, per_tenant or {})

    def replace(self, default: TenantQuotas, per_tenant: Mapping[str, TenantQuotas]) -> None:
        """From now on, ``per_tenant``'s quotas for the tenants it names and ``default`` for the others."""
        if not isinstance(default, TenantQuotas):
            raise TypeError(f"the default quotas must be TenantQuotas, not {type(default).__name__}")
        table = dict(per_tenant)
        for tenant, quotas in table.items():
            if not isinstance(tenant, str) or not isinstance(quotas, TenantQuotas):
                raise TypeError(f"quotas map tenant ids to TenantQuotas, not {tenant!r}: {quotas!r}")
        self.default, self._per_tenant = default, table

    def of(self, tenant: str) -> TenantQuotas:
        """``tenant``'s quotas now (one dict get: it is asked on every call)."""
        return self._per_tenant.get(tenant, self.default)

    def overrides(self) -> dict[str, TenantQuotas]:
        """The tenants with quotas of their own (a copy)."""
        return dict(self._per_tenant)


class CpuLedger:
    """CPU-seconds each tenant's calls used in the last ``window`` seconds, against its budget.

    A tenant's calls are charged only while it has a budget (``cpu_seconds_per_minute``): without one,
    nothing is measured, so a budget set later starts from nothing used."""

    def __init__(self, quotas: QuotaTable, window: float = 60.0) -> None:
        self._quotas, self._window = quotas, window
        self._charges: dict[str, deque[tuple[float, float]]] = {}
        self._totals: dict[str, float] = {}

    def budgeted(self, tenant: str) -> bool:
        """Whether ``tenant`` has a budget now (without one, nothing is charged: callers skip the cost)."""
        return self._quotas.of(tenant).cpu_seconds_per_minute is not None

    def charge(self, tenant: str, seconds: float, now: float) -> None:
        """A call of ``tenant`` used ``seconds`` of CPU (or of a worker it held alone)."""
        if seconds <= 0 or not self.budgeted(tenant):
            return
        self._expire(tenant, now)
        self._charges.setdefault(tenant, deque()).append((now, seconds))
        self._totals[tenant] = self._totals.get(tenant, 0.0) + seconds

    def check(self, tenant: str, now: float) -> None:
        """Raise ``CpuQuotaExceeded`` while ``tenant`` is over its budget."""
        per_minute = self._quotas.of(tenant).cpu_seconds_per_minute
        if per_minute is None:
            return
        budget = per_minute * self._window / 60.0
        self._expire(tenant, now)
        used = self._totals.get(tenant, 0.0)
        if used < budget:
            return
        retry_after, left = self._window, used  # a zero budget never has room
        for at, seconds in self._charges.get(tenant, ()):
            left -= seconds
            retry_after = at + self._window - now
            if left < budget:
                break
        raise CpuQuotaExceeded(
            f"used {used:.2f} CPU-seconds in the last {self._window:g} s (cpu_seconds_per_minute quota "
            f"{per_minute:g}); room again in {retry_after:.1f} s",
            tenant=tenant, quota="cpu_seconds_per_minute", limit=per_minute, retry_after=retry_after,
        )  # fmt: skip

    def used(self, tenant: str, now: float) -> float:
        self._expire(tenant, now)
        return self._totals.get(tenant, 0.0)

    def _expire(self, tenant: str, now: float) -> None:
        charges = self._charges.get(tenant)
        if charges is None:
            return
        while charges and charges[0][0] <= now - self._window:
            self._totals[tenant] -= charges.popleft()[1]
        if not charges:
            del self._charges[tenant], self._totals[tenant]


class ScriptBook:
    """Loaded scripts per tenant (LRU, bounded by count and bytes) and the shared source cache."""

    def __init__(self, quotas: QuotaTable, *, cache_bytes: int) -> None:
        self._quotas, self._cache_bytes = quotas, cache_bytes
        self._cache: OrderedDict[ScriptKey, tuple[ScriptHandle, int]] = OrderedDict()
        self._cached_bytes = 0
        self._tenants: dict[str, OrderedDict[ScriptKey, int]] = {}

    def lookup(self, key: ScriptKey, name: str) -> ScriptHandle | None:
        """The cached handle of ``key`` under ``name`` (a hit refreshes it), or ``None``."""
        entry = self._cache.get(key)
        if entry is None or entry[0].name != name:
            return None
        self._cache.move_to_end(key)
        return entry[0]

    def make_room(self, tenant: str, key: ScriptKey, size: int, busy: AbstractSet[ScriptKey]) -> None:
        """Before a load: forget ``tenant``'s least recently loaded scripts (none of ``busy``) until
        ``key`` of ``size`` bytes fits; ``ScriptQuotaExceeded`` if it cannot."""
        quotas = self._quotas.of(tenant)
        max_scripts, max_bytes = quotas.max_loaded_scripts, quotas.max_loaded_script_bytes
        book = self._tenants.get(tenant, OrderedDict())
        held = book.get(key)
        count = len(book) + (held is None)
        total = sum(book.values()) - (held or 0) + size
        if max_bytes is not None and size > max_bytes:
            self._refuse(tenant, "script_bytes", max_bytes, f"the script is {size} bytes")
        for old in [k for k in book if k != key and k not in busy]:
            if _fits(count, total, max_scripts, max_bytes):
                break
            count, total = count - 1, total - book[old]
            self._forget(tenant, old)
        if not _fits(count, total, max_scripts, max_bytes):
            over_count = max_scripts is not None and count > max_scripts
            quota, limit = ("scripts", max_scripts) if over_count else ("script_bytes", max_bytes)
            self._refuse(tenant, quota, limit or 0, "every script it holds has a call running")

    def trim(self, busy: Mapping[str, AbstractSet[ScriptKey]]) -> None:
        """After a quota change: forget each tenant's least recently loaded scripts until it fits again,
        keeping those with a call running (``busy``, by tenant)."""
        for tenant in list(self._tenants):
            quotas, book = self._quotas.of(tenant), self._tenants[tenant]
            max_scripts, max_bytes = quotas.max_loaded_scripts, quotas.max_loaded_script_bytes
            count, total, running = len(book), sum(book.values()), busy.get(tenant, frozenset())
            for old in [k for k in book if k not in running]:
                if _fits(count, total, max_scripts, max_bytes):
                    break
                count, total = count - 1, total - book[old]
                self._forget(tenant, old)

    def admit(self, tenant: str, handle: ScriptHandle, size: int) -> None:
        """After a load (call ``make_room`` first): ``tenant`` holds ``handle``;
        the cache keeps its source."""
        key = (handle.kind, handle.sha256)
        book = self._tenants.setdefault(tenant, OrderedDict())
        book[key] = size
        book.move_to_end(key)
        if key in self._cache:
            self._cached_bytes -= self._cache[key][1]
        self._cache[key] = (handle, size)
        self._cache.move_to_end(key)
        self._cached_bytes += size
        while self._cached_bytes > self._cache_bytes and len(self._cache) > 1:
            _, (_, evicted) = self._cache.popitem(last=False)
            self._cached_bytes -= evicted

    def held(self, tenant: str) -> tuple[int, int]:
        """``(scripts, bytes)`` ``tenant`` holds."""
        book = self._tenants.get(tenant)
        return (len(book), sum(book.values())) if book else (0, 0)

    @property
    def cached_bytes(self) -> int:
        return self._cached_bytes

    def _forget(self, tenant: str, key: ScriptKey) -> None:
        book = self._tenants[tenant]
        del book[key]
        if not book:
            del self._tenants[tenant]
        if not any(key in other for other in self._tenants.values()) and key in self._cache:
            self._cached_bytes -= self._cache.pop(key)[1]

    @staticmethod
    def _refuse(tenant: str, quota: str, limit: int, why: str) -> None:
        key = "max_loaded_scripts" if quota == "scripts" else "max_loaded_script_bytes"
        raise ScriptQuotaExceeded(
            f"no room for another loaded script ({key} quota {limit}; {why})",
            tenant=tenant, quota=quota, limit=limit,
        )  # fmt: skip


def _fits(count: int, total: int, max_scripts: int | None, max_bytes: int | None) -> bool:
    return (max_scripts is None or count <= max_scripts) and (max_bytes is None or total <= max_bytes)
