"""Region entries kept in the worker between calls, so a render ships only what changed (RHP §6.3).

A region's hooks get every stored entry in ``ctx.entries``; shipping them on
every render dominated its cost.  The coordinator names a region's list by an
unguessable key and a version, and sends the whole list only when it believes
this worker lacks that version; otherwise it sends the indices to drop and the
items to append.  The lists are scoped by ``(tenant, key)`` so that one tenant's
entries are never reachable from another's calls, and bounded by count and bytes
(least recently used first out), so a host cannot bloat a worker.  Losing a list
is always safe: the next delta is answered ``ResidentMissing`` and the
coordinator resends it whole.

The lists live in rhai-python (``rhai.ResidentLists``), in Rhai form: each item
is converted once, when it arrives, and a render gets a copy made in Rust.  They
live there, not here, because the worker's native lane (``worker/wire.py``)
applies a render's delta straight from its CALL frame: this class is the same
store's Python face, for the calls the lane leaves to Python (``worker/wire.py``).
An item's size is its msgpack size alone, as the wire packs it (``CODEC.sizes``).
"""

from __future__ import annotations

from typing import Any, Final

import rhai

from proto.vocabulary import ErrorClass
from worker.engine import ScriptFailure, translate
from worker.wire import CODEC

__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_MAX_KEYS", "ResidentStore", "resident_missing"]

DEFAULT_MAX_KEYS: Final = 256
"""Lists kept at once: one per region recently rendered on this worker."""
DEFAULT_MAX_BYTES: Final = 16 << 20
"""Sum of the kept items' msgpack sizes (their Rhai values take a few times more).

Equal to the largest CALL body, so any list that could be sent whole fits.
"""


def resident_missing(base: int) -> ScriptFailure:
    """How a call ends whose delta applies to a version of its list not held here."""
    return ScriptFailure(ErrorClass.RESIDENT_MISSING, f"resident entries at version {base} are not held here")


class ResidentStore:
    """The worker's resident entry lists; used only on the loop thread (region calls run inline)."""

    def __init__(self, max_keys: int = DEFAULT_MAX_KEYS, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_keys, self.max_bytes = max_keys, max_bytes
        self.lists = rhai.ResidentLists(max_keys=max_keys, max_bytes=max_bytes)
        """The lists themselves, shared with the worker's lane."""

    def __len__(self) -> int:
        return len(self.lists)

    @property
    def bytes(self) -> int:
        """Sum of the kept items' msgpack sizes."""
        return self.lists.bytes

    def args_for(self, tenant: str, resident: dict[str, Any], args: list[Any]) -> list[Any]:
        """``args`` with the resident list as ``args[0]["entries"]``;
        ``ResidentMissing`` if the base is not held.

        ``resident`` was checked by ``proto.calls.check_resident``.  The list
        is updated before the hook runs, whatever the hook then does.
        """
        base = resident["base"]
        try:
            entries = self.lists.apply(
                tenant, resident["key"], resident["version"], base, resident["drop"], resident["entries"],
                CODEC.sizes,
            )  # fmt: skip
        except (TypeError, ValueError, OverflowError) as exc:  # an item with no Rhai form: as in a call
            raise translate(exc) from exc
        if entries is None:
            raise resident_missing(base)
        first = dict(args[0])
        first["entries"] = entries
        return [first, *args[1:]]
