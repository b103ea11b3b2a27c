"""A bounded LRU of compiled scripts, keyed by (kind, sha256), limited by count and by bytes."""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

from worker.engine import Compiled

__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_MAX_SCRIPTS", "ScriptCache"]

DEFAULT_MAX_SCRIPTS: Final = 256
DEFAULT_MAX_BYTES: Final = 64 * 1024 * 1024


class ScriptCache:
    """Least recently used compiled scripts; ``size`` is an estimate of an AST's bytes."""

    def __init__(self, max_scripts: int = DEFAULT_MAX_SCRIPTS, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self._items: OrderedDict[tuple[str, str], Compiled] = OrderedDict()
        self._bytes = 0
        self.max_scripts, self.max_bytes = max_scripts, max_bytes
        self.evictions = 0

    def get(self, kind: str, sha: str) -> Compiled | None:
        key = (kind, sha)
        compiled = self._items.get(key)
        if compiled is not None:
            self._items.move_to_end(key)
        return compiled

    def put(self, kind: str, sha: str, compiled: Compiled) -> list[tuple[str, str]]:
        """Keep ``compiled``; returns the ``(kind, sha)`` keys evicted to make room."""
        key = (kind, sha)
        old = self._items.pop(key, None)
        if old is not None:
            self._bytes -= old.size
        self._items[key] = compiled
        self._bytes += compiled.size
        evicted_keys: list[tuple[str, str]] = []
        while len(self._items) > 1 and (len(self._items) > self.max_scripts or self._bytes > self.max_bytes):
            evicted_key, evicted = self._items.popitem(last=False)
            self._bytes -= evicted.size
            self.evictions += 1
            evicted_keys.append(evicted_key)
        return evicted_keys

    def __len__(self) -> int:
        return len(self._items)

    @property
    def bytes(self) -> int:
        return self._bytes
