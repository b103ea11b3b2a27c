"""Index validation and removal for ``on_overflow`` answers (docs/scripts/regions.md#on_overflowctx).

Shared by the write-time path (A) and window-level eviction (B).  An answer is
all-or-nothing: any one bad index voids it, so a buggy script frees nothing
rather than the wrong thing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from coordinator.regions.model import Entry

__all__ = ["Removal", "oldest_group_size", "remove_indices", "validate_indices"]


def validate_indices(value: Any, count: int) -> tuple[list[int] | None, str | None]:
    """Check an ``on_overflow`` answer against ``count`` entries.

    Returns ``(indices, None)`` with the sorted, de-duplicated indices of a
    valid answer, or ``(None, reason)``.  Only non-negative integers below
    ``count`` are valid; a float (even ``1.0``), a bool, a string or a null
    anywhere voids the whole answer.
    """
    if not isinstance(value, list):
        return None, f"on_overflow must return an array of indices, not {type(value).__name__}"
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int):
            return None, f"on_overflow returned a non-integer index {item!r}"
        if item < 0:
            return None, f"on_overflow returned a negative index {item}"
        if item >= count:
            return None, f"on_overflow returned index {item}, but the region holds {count} entries"
    return sorted(set(value)), None


@dataclass(frozen=True, slots=True)
class Removal:
    """The entries left, the entries removed (oldest first) and the tokens freed."""

    remaining: tuple[Entry, ...]
    removed: tuple[Entry, ...]
    indices: tuple[int, ...]

    @property
    def freed(self) -> int:
        """Sum of the removed entries' tokens."""
        return sum(entry.tokens for entry in self.removed)


def remove_indices(entries: Sequence[Entry], indices: Sequence[int]) -> Removal:
    """Remove exactly the given (valid, sorted) indices; not turn-group aware."""
    drop = set(indices)
    remaining = tuple(e for i, e in enumerate(entries) if i not in drop)
    removed = tuple(e for i, e in enumerate(entries) if i in drop)
    return Removal(remaining, removed, tuple(sorted(drop)))


def oldest_group_size(entries: Sequence[Entry]) -> int:
    """How many entries leave together in one oldest-first step (phase 2).

    An ``assistant_turn`` takes the ``tool_result`` entries directly following
    it; any other entry leaves alone.  0 for an empty region.
    """
    if not entries:
        return 0
    if entries[0].kind != "assistant_turn":
        return 1
    size = 1
    while size < len(entries) and entries[size].kind == "tool_result":
        size += 1
    return size
