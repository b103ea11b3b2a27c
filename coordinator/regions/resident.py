"""A region's entries kept resident in the worker that renders it: ship only what changed.

Every ``render``/``on_overflow`` ctx carries every stored entry, and shipping
them dominated a render through the pool.  ``ResidentEntries`` (one per region)
names the list by a random key -- unguessable, never derived from content; the
worker scopes it by tenant too -- and a version.  ``prepare`` turns the ctx's
list into a ``ResidentCall`` that the dispatcher asks, per worker, for the
CALL's ``resident`` field: a delta (indices to drop, items to append) when that
worker is believed to hold a recent version, the whole list otherwise.
Beliefs are hints: the worker checks the base version and answers
``ResidentMissing`` when it lacks it, and the call is resent whole.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import is_
from typing import Any, Final

__all__ = ["ResidentCall", "ResidentEntries", "entry_delta"]

_HOLDERS: Final = 8
"""Workers remembered per region (workers are recycled; their ids are never reused)."""
_HISTORY: Final = 4
"""Versions a delta may start from: enough for a region shared by a few busy workers."""


def entry_delta(old: Sequence[Any], new: Sequence[Any]) -> tuple[list[int], int]:
    """``(drop, j)`` such that ``new == [old[k] for k not in drop] + new[j:]``.

    Regions change by appends, drops of some entries (``on_overflow``,
    eviction) and clears; any other change still yields a correct (larger)
    delta.  Items are matched by identity, never by ``==``: ``{"x": 1}``
    equals ``{"x": 1.0}`` but a script tells them apart.
    """
    n_old = len(old)
    if new is old or (len(new) >= n_old and all(map(is_, old, new))):
        return [], n_old  # appends only: the common case, checked at C speed
    where = {id(item): k for k, item in enumerate(old)}
    drop: list[int] = []
    expect = 0
    tail = len(new)  # where the appended tail starts: at the first item not kept in order from old
    for j, item in enumerate(new):
        k = where.get(id(item), -1)
        if k < expect:
            tail = j
            break
        drop.extend(range(expect, k))
        expect = k + 1
    drop.extend(range(expect, n_old))
    return drop, tail


class ResidentEntries:
    """One region's list as the workers hold it: its key, recent versions and who holds which.

    The last few versions' lists are kept (references only, so their items'
    ids stay unique): a worker holding any of them gets a delta from it, so a
    region that moves between busy workers still ships only what changed.
    """

    def __init__(self) -> None:
        self.key = secrets.token_urlsafe(32)
        self.version = 0
        self.holders: dict[str, int] = {}
        self.history: dict[int, list[Any]] = {}
        self.sent_whole = self.sent_delta = self.resends = 0
        """Counters: CALLs that carried the whole list, a delta, and ``ResidentMissing`` answers."""

    def prepare(self, entries: list[Any]) -> ResidentCall:
        """The resident part of one call whose ctx carries ``entries`` (the ctx then ships none)."""
        latest = self.history.get(self.version)
        unchanged = latest is entries or (  # the same list: a region passes its cached one while unchanged
            latest is not None and len(latest) == len(entries) and all(map(is_, latest, entries))
        )
        if not unchanged:
            self.version += 1
            self.history[self.version] = entries
            while len(self.history) > _HISTORY:
                del self.history[next(iter(self.history))]
        return ResidentCall(self, self.version, entries)

    def held_by(self, worker_id: str, version: int) -> None:
        """Remember that ``worker_id`` was sent ``version`` (it holds it unless it loses it)."""
        self.holders.pop(worker_id, None)
        self.holders[worker_id] = version
        while len(self.holders) > _HOLDERS:
            del self.holders[next(iter(self.holders))]


@dataclass(eq=False, slots=True)
class ResidentCall:
    """The ``resident=`` of one ``pool.call``: what to send to whichever worker runs it."""

    owner: ResidentEntries
    version: int
    entries: list[Any]
    _whole_to: set[str] = field(default_factory=set)

    def holds(self, worker_id: str) -> bool:
        """Whether ``worker_id`` is believed to hold a recent version (routing prefers it)."""
        return self.owner.holders.get(worker_id, 0) in self.owner.history

    def wire(self, worker_id: str) -> dict[str, Any]:
        """The CALL's ``resident`` field for ``worker_id``: a delta from what it holds, else the list."""
        owner = self.owner
        body: dict[str, Any] = {"key": owner.key, "version": self.version}
        held = owner.holders.get(worker_id, 0)
        base = owner.history.get(held)
        if base is not None:
            drop, start = entry_delta(base, self.entries)
            body |= {"base": held, "drop": drop, "entries": self.entries[start:]}
            self._whole_to.discard(worker_id)  # the last send decides what a refusal means
            owner.sent_delta += 1
        else:
            body |= {"base": None, "drop": [], "entries": self.entries}
            self._whole_to.add(worker_id)
            owner.sent_whole += 1
        owner.held_by(worker_id, self.version)
        return body

    def lost(self, worker_id: str) -> bool:
        """The worker answered ``ResidentMissing``: forget what it held; ``True`` if resending whole helps.

        Only a lying worker refuses a whole list: that is a failure, not a reason to loop.
        """
        self.owner.holders.pop(worker_id, None)
        self.owner.resends += 1
        return worker_id not in self._whole_to
