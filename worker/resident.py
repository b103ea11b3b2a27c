"""Region entries kept in the worker between calls, so a render ships only what changed (RHP §6.3).

A region's hooks get every stored entry in ``ctx.entries``; shipping them on
every render dominated its cost.  The coordinator names a region's list by an
unguessable key and a version, and sends the whole list only when it believes
this worker lacks that version; otherwise it sends the indices to drop and the
items to append.  This store keeps those lists, scoped by ``(tenant, key)`` so
that one tenant's entries are never reachable from another's calls, and bounded
by count and bytes (least recently used first out), so a host cannot bloat a
worker.  Losing a list is always safe: the next delta is answered
``ResidentMissing`` and the coordinator resends it whole.

The lists are kept in Rhai form (``rhai.Array``): each item is converted once,
when it arrives, and a render gets a copy made in Rust, instead of converting
every entry from Python on every call.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from itertools import compress
from typing import Any, Final

import msgpack
import rhai

from proto.values import pack
from proto.vocabulary import ErrorClass
from worker.engine import ScriptFailure, translate

__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_MAX_KEYS", "ResidentStore"]

DEFAULT_MAX_KEYS: Final = 256
"""Lists kept at once: one per region recently rendered on this worker."""
DEFAULT_MAX_BYTES: Final = 16 << 20
"""Sum of the kept items' msgpack sizes (their Rhai values take a few times more).

Equal to the largest CALL body, so any list that could be sent whole fits.
"""


@dataclass(slots=True)
class _Held:
    version: int
    entries: rhai.Array
    sizes: list[int]
    total: int


class ResidentStore:
    """The worker's resident entry lists; used only on the loop thread (region calls run inline)."""

    def __init__(self, max_keys: int = DEFAULT_MAX_KEYS, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_keys, self.max_bytes = max_keys, max_bytes
        self._held: OrderedDict[tuple[str, str], _Held] = OrderedDict()
        self._packer = msgpack.Packer()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._held)

    def args_for(self, tenant: str, resident: dict[str, Any], args: list[Any]) -> list[Any]:
        """``args`` with the resident list as ``args[0]["entries"]``;
        ``ResidentMissing`` if the base is not held.

        ``resident`` was checked by ``proto.calls.check_resident``.  The list
        is updated before the hook runs, whatever the hook then does.
        """
        slot = (tenant, resident["key"])
        held = self._held.pop(slot, None)
        if held is not None:
            self.bytes -= held.total
        base = resident["base"]
        try:
            if base is None:
                entries = rhai.Array(resident["entries"])
                sizes = self._sizes(resident["entries"])
                held = _Held(resident["version"], entries, sizes, sum(sizes))
            elif held is None or held.version != base or not self._apply(held, resident):
                raise ScriptFailure(
                    ErrorClass.RESIDENT_MISSING, f"resident entries at version {base} are not held here"
                )
        except (TypeError, ValueError, OverflowError) as exc:  # an item with no Rhai form: as in a call
            raise translate(exc) from exc
        held.version = resident["version"]
        if held.total <= self.max_bytes:
            self._keep(slot, held)
        first = dict(args[0])
        first["entries"] = held.entries
        return [first, *args[1:]]

    def _apply(self, held: _Held, resident: dict[str, Any]) -> bool:
        """Apply the delta in place (``drop`` indexes the list as it was); ``False`` (nothing changed)
        when an index is out of range."""
        drop: list[int] = resident["drop"]
        if drop and drop[-1] >= len(held.entries):
            return False
        added = resident["entries"]
        if added:
            held.entries.extend(added)  # first: it is the step that can fail, and then changes nothing
            sizes = self._sizes(added)
        if drop:
            held.entries.remove(drop)
            if drop[-1] == len(drop) - 1:  # the oldest ones: the usual overflow and eviction shape
                held.total -= sum(held.sizes[: len(drop)])
                del held.sizes[: len(drop)]
            else:
                mask = bytearray(b"\x01") * len(held.sizes)
                for index in drop:
                    mask[index] = 0
                held.total -= sum(size for size, keep in zip(held.sizes, mask, strict=True) if not keep)
                held.sizes = list(compress(held.sizes, mask))
        if added:
            held.sizes.extend(sizes)
            held.total += sum(sizes)
        return True

    def _sizes(self, items: list[Any]) -> list[int]:
        try:
            return list(map(len, map(self._packer.pack, items)))
        except ValueError:  # nested past msgpack's recursion limit: the wire's flattened size instead
            return [len(pack(item)) for item in items]

    def _keep(self, slot: tuple[str, str], held: _Held) -> None:
        self._held[slot] = held
        self.bytes += held.total
        while len(self._held) > self.max_keys or self.bytes > self.max_bytes:
            _, oldest = self._held.popitem(last=False)
            self.bytes -= oldest.total
