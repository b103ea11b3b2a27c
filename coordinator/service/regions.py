"""The service's regions: opened from a tenant's stored ``region_hook`` script, kept per tenant.

A change (write, replace, evict) runs on the region in memory, then is checked against the tenant's
quotas and, for a persistent region, committed; if either refuses, the region is put back as it was
before the change and the caller gets the refusal: memory changes only with its commit. What is
committed is the difference (:func:`_plan`): the common change, new entries at the end and old ones
dropped at the front, costs the entries it touches, not the region; any other reordering rewrites the
region's rows in one transaction. At start-up each tenant's regions are restored on their own, and a
region that cannot be restored is reported and set aside, never fatal.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import logging
import operator
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from coordinator.regions import Entry, Region, RegionLoadError, ToolCall, open_region
from coordinator.regions.tokens import estimate_tokens
from coordinator.service.config import TenantLimits
from coordinator.service.errors import LimitReached, RegionExists
from coordinator.service.storage import RegionRow, Storage

__all__ = ["RegionBook", "RegionExists", "Slot", "entry_from_json", "entry_to_json"]

T = TypeVar("T")
log = logging.getLogger("rhaipool.service")
SourceOf = Callable[[str, str], Awaitable[str | None]]
"""``(tenant, script name) -> source`` of a stored ``region_hook`` script (None: not stored)."""


def entry_to_json(entry: Entry) -> dict[str, Any]:
    """Everything needed to restore the entry exactly (its timestamp and taint included)."""
    out = entry.to_ctx(with_timestamp=True)
    out["tainted"] = entry.tainted
    return out


def entry_from_json(body: Mapping[str, Any], *, timestamp: int = 0) -> Entry:
    """An ``Entry`` from the docs/scripts/regions.md#renderctx JSON shape (what a write request and the
    database carry).

    Raises ``ValueError``/``TypeError``/``KeyError`` on a malformed shape; callers turn those into a 400.
    """
    content = body["content"]
    if not isinstance(content, str):
        raise TypeError("content must be a string")
    tokens = body.get("tokens")
    calls = body.get("tool_calls") or []
    if not isinstance(calls, list):
        raise TypeError("tool_calls must be a list")
    return Entry(
        content,
        estimate_tokens(content) if tokens is None else tokens,
        body.get("kind", "text"),
        body.get("key"),
        int(body.get("timestamp", timestamp)),
        tuple(ToolCall.from_json(c) for c in calls),
        str(body.get("tool_call_id", "")),
        str(body.get("tool_name", "")),
        bool(body.get("is_error", False)),
        bool(body.get("tainted", False)),
    )


@dataclass(slots=True)
class Slot:
    """One open region with what it was opened from; ``lock`` orders changes and their saves.

    ``saved`` is the entry tuple last accounted for (and, when persistent, committed), ``seqs`` and
    ``sizes`` its rows' sequence numbers and bytes (:func:`_size`), ``ids`` each entry's seq by identity.
    """

    tenant: str
    region: Region
    script: str
    options: dict[str, Any]
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    saved: tuple[Entry, ...] = ()
    seqs: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    ids: dict[int, int] = field(default_factory=dict)
    next_seq: int = 1
    bytes: int = 0

    def describe(self) -> dict[str, Any]:
        """The JSON a listing shows."""
        r = self.region
        return {
            "name": r.name,
            "script": self.script,
            "budget": r.budget,
            "persistent": r.persistent,
            "current_tokens": r.current_tokens,
            "entry_count": len(r.entries),
            "sha256": r.script.sha256 if r.script else None,
        }


@dataclass(frozen=True, slots=True)
class _Plan:
    """What one change does to a slot's rows: ``drop`` rows off the front (or all, ``rewrite``), add
    ``added`` ``(seq, entry, size)`` at the end."""

    entries: tuple[Entry, ...]
    drop: int
    added: list[tuple[int, Entry, int]]
    rewrite: bool
    bytes: int


def _bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _size(entry: Entry) -> int:
    """What ``max_entry_bytes`` counts of an entry: every string it holds and stores (its content, key,
    tool call ids, names, signatures and arguments as JSON, tool result's call id and tool name), so no
    field of an entry is a way around the quota."""
    size = (
        _bytes(entry.content) + _bytes(entry.key or "") + _bytes(entry.tool_call_id) + _bytes(entry.tool_name)
    )
    for call in entry.tool_calls:
        arguments = json.dumps(call.arguments, ensure_ascii=False, separators=(",", ":"))
        size += _bytes(call.id) + _bytes(call.name) + _bytes(call.thought_signature or "") + _bytes(arguments)
    return size


def _plan(slot: Slot, new: tuple[Entry, ...]) -> _Plan:
    """The rows that turn ``slot.saved`` into ``new``."""
    old = slot.saved
    keep = 0
    if new:
        first = slot.ids.get(id(new[0]))
        if first is not None:
            start = bisect.bisect_left(slot.seqs, first)
            keep = len(old) - start
            if old[start:] != new[:keep] or any(id(e) in slot.ids for e in new[keep:]):
                keep = -1
        elif any(id(e) in slot.ids for e in new):
            keep = -1
    if keep < 0:  # reordered, or an old entry came back after a new one: rewrite the region's rows
        added = [(slot.next_seq + i, e, _size(e)) for i, e in enumerate(new)]
        return _Plan(new, len(old), added, True, sum(size for _, _, size in added))
    drop = len(old) - keep
    added = [(slot.next_seq + i, e, _size(e)) for i, e in enumerate(new[keep:])]
    kept_bytes = slot.bytes - sum(slot.sizes[:drop])
    return _Plan(new, drop, added, False, kept_bytes + sum(size for _, _, size in added))


def _apply(slot: Slot, plan: _Plan) -> None:
    if plan.rewrite:
        slot.seqs, slot.sizes, slot.ids = [], [], {}
    else:
        for e in slot.saved[: plan.drop]:
            del slot.ids[id(e)]
        del slot.seqs[: plan.drop]
        del slot.sizes[: plan.drop]
    for seq, e, size in plan.added:
        slot.seqs.append(seq)
        slot.sizes.append(size)
        slot.ids[id(e)] = seq
    if plan.added:
        slot.next_seq = plan.added[-1][0] + 1
    slot.saved, slot.bytes = plan.entries, plan.bytes


class RegionBook:
    """Every open region, per tenant. A tenant can only name its own: the key carries the tenant."""

    def __init__(
        self, pool: Any, storage: Storage, source_of: SourceOf, limits: Callable[[str], TenantLimits]
    ) -> None:
        self._pool = pool
        self._storage = storage
        self._source_of = source_of
        self._limits = limits
        self._slots: dict[str, dict[str, Slot]] = {}
        self._bytes: dict[str, int] = {}

    def get(self, tenant: str, name: str) -> Slot | None:
        """The tenant's region, or None."""
        own = self._slots.get(tenant)
        return None if own is None else own.get(name)

    def of(self, tenant: str) -> list[Slot]:
        """The tenant's regions, by name (costs the tenant's own regions, nobody else's)."""
        own = self._slots.get(tenant, {})
        return [own[name] for name in sorted(own)]

    def count(self, tenant: str | None = None) -> int:
        """How many regions are open (one tenant's, or all)."""
        if tenant is not None:
            return len(self._slots.get(tenant, {}))
        return sum(map(len, self._slots.values()))

    def entry_bytes(self, tenant: str) -> int:
        """Bytes of entry content the tenant's regions hold."""
        return self._bytes.get(tenant, 0)

    def forget_tenant(self, tenant: str) -> None:
        """Drop a tenant's regions from memory (revoked or purged); stored rows are the caller's."""
        self._slots.pop(tenant, None)
        self._bytes.pop(tenant, None)

    async def open(self, tenant: str, name: str, script: str, budget: int, options: dict[str, Any]) -> Slot:
        """Open a new region (RegionLoadError from the runtime); saved at once when persistent."""
        limits = self._limits(tenant)
        if self.get(tenant, name) is not None:
            raise RegionExists(name)
        if self.count(tenant) >= limits.max_regions:
            raise LimitReached("max_regions", f"the tenant already has {limits.max_regions} regions open")
        if budget > limits.max_region_budget:
            raise LimitReached(
                "max_region_budget",
                f"a region's budget may be at most {limits.max_region_budget} tokens, got {budget}",
                status=422,
            )
        slot = await self._open(tenant, name, script, budget, options)
        if self.get(tenant, name) is not None:  # a concurrent create of the same name won the race
            raise RegionExists(name)
        if slot.region.persistent:
            await self._storage.create_region(tenant, name, script, budget, slot.options)
        self._slots.setdefault(tenant, {})[name] = slot
        return slot

    async def _open(self, tenant: str, name: str, script: str, budget: int, options: dict[str, Any]) -> Slot:
        source = await self._source_of(tenant, script)
        if source is None:  # never a file: a tenant's scripts are its database rows
            raise RegionLoadError(f"region '{name}': no stored region_hook script '{script}'")
        region = await open_region(
            self._pool, name, f"{script}.rhai", budget=budget, source=source, tenant=tenant, **options
        )
        return Slot(tenant, region, script, dict(options))

    async def change(self, slot: Slot, op: Callable[[Region], Awaitable[T]]) -> T:
        """Run one changing operation; kept only if it fits the tenant's quota and (when persistent)
        commits: otherwise the region is as it was before and the refusal is raised."""
        async with slot.lock:
            region = slot.region
            before = region.entries
            result = await op(region)
            after = region.entries
            if after is before or (len(after) == len(before) and all(map(operator.is_, after, before))):
                return result
            plan = _plan(slot, after)
            try:
                self._check_bytes(slot, plan)
                if region.persistent:
                    await self._commit(slot, plan)
            except BaseException:
                region.clear()
                region.restore(before)
                raise
            self._bytes[slot.tenant] = self.entry_bytes(slot.tenant) - slot.bytes + plan.bytes
            _apply(slot, plan)
            return result

    def _check_bytes(self, slot: Slot, plan: _Plan) -> None:
        limit = self._limits(slot.tenant).max_entry_bytes
        total = self.entry_bytes(slot.tenant) - slot.bytes + plan.bytes
        if plan.bytes > slot.bytes and total > limit:
            raise LimitReached(
                "max_entry_bytes",
                f"the tenant's regions would hold {total} bytes of entries, over its {limit}",
                status=413,
            )

    async def _commit(self, slot: Slot, plan: _Plan) -> None:
        removed = () if plan.rewrite else slot.seqs[: plan.drop]
        rows = [(seq, entry_to_json(e)) for seq, e, _ in plan.added]
        await self._storage.change_entries(slot.tenant, slot.region.name, removed, rows, rewrite=plan.rewrite)

    async def close(self, tenant: str, name: str) -> bool:
        """Forget the region (and its stored entries); whether it existed."""
        slot = self.get(tenant, name)
        if slot is None:
            return False
        async with slot.lock:
            if slot.region.persistent:
                await self._storage.delete_region(tenant, name)
            own = self._slots.get(tenant, {})
            if own.pop(name, None) is slot:
                self._bytes[tenant] = self.entry_bytes(tenant) - slot.bytes
        return True

    async def restore(self) -> list[str]:
        """Reopen every stored persistent region with its entries, tenant by tenant; the problems, one
        line each (a region that cannot be restored stays stored, set aside, and the others load)."""
        problems: list[str] = []
        for tenant in self._storage.region_tenants():
            problems += await self.restore_tenant(tenant)
        return problems

    async def restore_tenant(self, tenant: str) -> list[str]:
        """Reopen one tenant's stored persistent regions (start-up, a reinstated tenant); the problems."""
        problems: list[str] = []
        try:
            rows = await asyncio.to_thread(self._storage.load_regions, tenant)  # off the event loop
        except Exception as exc:  # noqa: BLE001 - one tenant's rows must not keep the service down
            return [f"regions of tenant {tenant} not restored: {exc}"]
        for row in rows:
            if isinstance(row, str):
                problems.append(row)
                continue
            if self.get(tenant, row.name) is not None:
                continue
            try:
                await self._restore(tenant, row)
            except Exception as exc:  # noqa: BLE001 - one broken region must not keep the service down
                problems.append(f"region {tenant}/{row.name} not restored: {exc}")
        return problems

    async def _restore(self, tenant: str, row: RegionRow) -> None:
        entries = [entry_from_json(e) for e in row.entries]
        slot = await self._open(tenant, row.name, row.script, row.budget, row.options)
        slot.region.restore(entries)
        _restored(slot, slot.region.entries, row.seqs)
        self._slots.setdefault(tenant, {})[row.name] = slot
        self._bytes[tenant] = self.entry_bytes(tenant) + slot.bytes


def _restored(slot: Slot, entries: tuple[Entry, ...], seqs: Sequence[int]) -> None:
    slot.saved = entries
    slot.seqs = list(seqs)
    slot.sizes = [_size(e) for e in entries]
    slot.ids = {id(e): seq for e, seq in zip(entries, seqs, strict=True)}
    slot.next_seq = (seqs[-1] + 1) if seqs else 1
    slot.bytes = sum(slot.sizes)
