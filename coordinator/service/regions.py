"""The service's regions: opened from a tenant's stored ``region_hook`` script, keyed by (tenant, name).

A persistent region's entries are saved to SQLite after every change and before the caller hears of
it, as one row replaced in one transaction (so a crash leaves the old list or the new, never half of
one); at start-up they are restored into a freshly opened region. Non-persistent regions live in memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from coordinator.regions import Entry, Region, ToolCall, open_region
from coordinator.regions.tokens import estimate_tokens
from coordinator.service.errors import RegionExists
from coordinator.service.storage import Storage

__all__ = ["RegionBook", "RegionExists", "Slot", "entry_from_json", "entry_to_json"]

T = TypeVar("T")


def entry_to_json(entry: Entry) -> dict[str, Any]:
    """Everything needed to restore the entry exactly (its timestamp and taint included)."""
    out = entry.to_ctx(with_timestamp=True)
    out["tainted"] = entry.tainted
    return out


def entry_from_json(body: Mapping[str, Any], *, timestamp: int = 0) -> Entry:
    """An ``Entry`` from the §1.5 JSON shape (what a write request and the database carry).

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
    """One open region with what it was opened from; ``lock`` orders changes and their saves."""

    tenant: str
    region: Region
    script: str
    options: dict[str, Any]
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

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


class RegionBook:
    """Every open region of every tenant. A tenant can only name its own: the key carries the tenant."""

    def __init__(self, pool: Any, storage: Storage, script_dir: Callable[[str], Path]) -> None:
        self._pool = pool
        self._storage = storage
        self._script_dir = script_dir
        self._slots: dict[tuple[str, str], Slot] = {}

    def get(self, tenant: str, name: str) -> Slot | None:
        """The tenant's region, or None."""
        return self._slots.get((tenant, name))

    def of(self, tenant: str) -> list[Slot]:
        """The tenant's regions, by name."""
        return [s for (t, _), s in sorted(self._slots.items()) if t == tenant]

    def count(self) -> int:
        """How many regions are open (all tenants)."""
        return len(self._slots)

    async def open(self, tenant: str, name: str, script: str, budget: int, options: dict[str, Any]) -> Slot:
        """Open a new region (RegionLoadError from the runtime); saved at once when persistent."""
        if (tenant, name) in self._slots:
            raise RegionExists(name)
        slot = await self._open(tenant, name, script, budget, options)
        if slot.region.persistent:
            await self._save(slot)
        if (tenant, name) in self._slots:  # a concurrent create of the same name won the race
            raise RegionExists(name)
        self._slots[(tenant, name)] = slot
        return slot

    async def _open(self, tenant: str, name: str, script: str, budget: int, options: dict[str, Any]) -> Slot:
        base = self._script_dir(tenant)
        region = await open_region(
            self._pool, name, f"{script}.rhai", budget=budget, base_dir=base, tenant=tenant, **options
        )
        return Slot(tenant, region, script, dict(options))

    async def change(self, slot: Slot, op: Callable[[Region], Awaitable[T]]) -> T:
        """Run one changing operation; a persistent region is durable before this returns."""
        async with slot.lock:
            result = await op(slot.region)
            if slot.region.persistent:
                await self._save(slot)
            return result

    async def close(self, tenant: str, name: str) -> bool:
        """Forget the region (and its stored entries); whether it existed."""
        slot = self._slots.pop((tenant, name), None)
        if slot is None:
            return False
        async with slot.lock:
            if slot.region.persistent:
                await self._storage.delete_region(tenant, name)
        return True

    async def _save(self, slot: Slot) -> None:
        r = slot.region
        entries = [entry_to_json(e) for e in r.entries]
        await self._storage.save_region(slot.tenant, r.name, slot.script, r.budget, slot.options, entries)

    async def restore(self) -> list[str]:
        """Reopen every stored persistent region with its entries; the problems, one line each."""
        problems: list[str] = []
        for tenant, row in await self._storage.load_regions():
            try:
                slot = await self._open(tenant, row.name, row.script, row.budget, row.options)
            except Exception as exc:  # noqa: BLE001 - one broken region must not keep the service down
                problems.append(f"region {tenant}/{row.name} not restored: {exc}")
                continue
            slot.region.restore(entry_from_json(e) for e in row.entries)
            self._slots[(tenant, row.name)] = slot
        return problems
