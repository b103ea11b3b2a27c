"""A region's stored entries, and what every hook call derives from them, cached until they change.

A render runs on every inference and needs the entries as a tuple, their token
sum and their hook-shaped ctx dicts; entries change far less often.  Every
change goes through ``StoredEntries``, which drops those caches, so rendering
an unchanged region walks no entry at all (and a changed one walks them only at
C speed: ``hooks.reuse_entry_ctxs``).
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import attrgetter
from typing import Any, Final

from coordinator.regions.hooks import reuse_entry_ctxs
from coordinator.regions.model import Entry

__all__ = ["StoredEntries"]

_TOKENS: Final = attrgetter("tokens")


class StoredEntries:
    """The entries of one region, oldest first; changed only through these methods."""

    def __init__(self) -> None:
        self._items: list[Entry] = []
        self._frozen: tuple[Entry, ...] | None = None
        self._tokens: int | None = None
        self._shown: tuple[tuple[Entry, ...], list[dict[str, Any]]] = ((), [])
        """The snapshot the last ctx list was built for, and that list."""

    def __len__(self) -> int:
        return len(self._items)

    def snapshot(self) -> tuple[Entry, ...]:
        """The entries now, as one tuple kept until they change."""
        if self._frozen is None:
            self._frozen = tuple(self._items)
        return self._frozen

    @property
    def tokens(self) -> int:
        """Sum of the entries' tokens."""
        if self._tokens is None:
            self._tokens = sum(map(_TOKENS, self._items))
        return self._tokens

    def ctxs(self) -> list[dict[str, Any]]:
        """The ``snapshot()``'s hook-shaped dicts: the same list while nothing changes.

        An entry keeps its dict while it stays: the resident deltas match items by identity.
        """
        snapshot = self.snapshot()
        shown, ctxs = self._shown
        if shown is not snapshot:
            ctxs = reuse_entry_ctxs(shown, ctxs, snapshot)
            self._shown = (snapshot, ctxs)
        return ctxs

    # -- changes: each one drops the cached snapshot and sum --------------

    def append(self, entry: Entry) -> None:
        self._items.append(entry)
        self._changed()

    def extend(self, entries: Iterable[Entry]) -> None:
        self._items.extend(entries)
        self._changed()

    def clear(self) -> None:
        self._items.clear()
        self._changed()

    def keep_only(self, remaining: Iterable[Entry]) -> None:
        """Replace the entries with ``remaining`` (what an ``on_overflow`` removal left)."""
        self._items = list(remaining)
        self._changed()

    def drop_oldest(self, count: int) -> tuple[Entry, ...]:
        """Remove and return the ``count`` oldest entries."""
        removed = tuple(self._items[:count])
        del self._items[:count]
        self._changed()
        return removed

    def _changed(self) -> None:
        self._frozen = None
        self._tokens = None
