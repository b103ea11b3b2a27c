"""Per-tenant quotas that need memory of the past: CPU-seconds per minute and loaded scripts.

Pure bookkeeping with time passed in; the dispatcher and ``Pool.load`` ask and charge.  The call
counts (in flight, queued) need no memory and are checked where calls are submitted.

``ScriptBook`` also bounds what the coordinator keeps of script sources **in total**: a source
cache (LRU, ``script_cache_bytes``) shared by all tenants.  Forgetting a source is never an error:
the ``ScriptHandle`` a caller holds carries its source, so a worker that lacks the AST is sent it
again, and a later ``load`` of the same source compiles it again.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Set as AbstractSet

from coordinator._core.handles import ScriptHandle
from coordinator.errors import CpuQuotaExceeded, ScriptQuotaExceeded

__all__ = ["CpuLedger", "ScriptBook", "ScriptKey"]

ScriptKey = tuple[str, str]
"""``(kind, sha256)``: what a loaded script is known by."""


class CpuLedger:
    """CPU-seconds each tenant's calls used in the last ``window`` seconds, against a budget."""

    def __init__(self, per_minute: float | None, window: float = 60.0) -> None:
        self._budget = None if per_minute is None else per_minute * window / 60.0
        self._window = window
        self._charges: dict[str, deque[tuple[float, float]]] = {}
        self._totals: dict[str, float] = {}

    @property
    def budgeted(self) -> bool:
        """Whether there is a budget at all (without one, nothing is charged: callers skip the cost)."""
        return self._budget is not None

    def charge(self, tenant: str, seconds: float, now: float) -> None:
        """A call of ``tenant`` used ``seconds`` of CPU (or of a worker it held alone)."""
        if self._budget is None or seconds <= 0:
            return
        self._expire(tenant, now)
        self._charges.setdefault(tenant, deque()).append((now, seconds))
        self._totals[tenant] = self._totals.get(tenant, 0.0) + seconds

    def check(self, tenant: str, now: float) -> None:
        """Raise ``CpuQuotaExceeded`` while ``tenant`` is over its budget."""
        if self._budget is None:
            return
        self._expire(tenant, now)
        used = self._totals.get(tenant, 0.0)
        if used < self._budget:
            return
        retry_after, left = 0.0, used
        for at, seconds in self._charges[tenant]:
            left -= seconds
            retry_after = at + self._window - now
            if left < self._budget:
                break
        per_minute = self._budget * 60.0 / self._window
        raise CpuQuotaExceeded(
            f"used {used:.2f} CPU-seconds in the last {self._window:g} s (quota {per_minute:g}/min); "
            f"room again in {retry_after:.1f} s",
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

    def __init__(self, *, max_scripts: int | None, max_bytes: int | None, cache_bytes: int) -> None:
        self._max_scripts, self._max_bytes, self._cache_bytes = max_scripts, max_bytes, cache_bytes
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
        book = self._tenants.get(tenant, OrderedDict())
        held = book.get(key)
        count = len(book) + (held is None)
        total = sum(book.values()) - (held or 0) + size
        if self._max_bytes is not None and size > self._max_bytes:
            self._refuse(tenant, "script_bytes", self._max_bytes, f"the script is {size} bytes")
        for old in [k for k in book if k != key and k not in busy]:
            if self._fits(count, total):
                break
            count, total = count - 1, total - book[old]
            self._forget(tenant, old)
        if not self._fits(count, total):
            over_count = self._max_scripts is not None and count > self._max_scripts
            quota, limit = ("scripts", self._max_scripts) if over_count else ("script_bytes", self._max_bytes)
            self._refuse(tenant, quota, limit or 0, "every script it holds has a call running")

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

    def _fits(self, count: int, total: int) -> bool:
        return (self._max_scripts is None or count <= self._max_scripts) and (
            self._max_bytes is None or total <= self._max_bytes
        )

    def _forget(self, tenant: str, key: ScriptKey) -> None:
        book = self._tenants[tenant]
        del book[key]
        if not book:
            del self._tenants[tenant]
        if not any(key in other for other in self._tenants.values()) and key in self._cache:
            self._cached_bytes -= self._cache.pop(key)[1]

    @staticmethod
    def _refuse(tenant: str, quota: str, limit: int, why: str) -> None:
        raise ScriptQuotaExceeded(
            f"no room for another loaded script ({quota} quota {limit}; {why})",
            tenant=tenant, quota=quota, limit=limit,
        )  # fmt: skip
