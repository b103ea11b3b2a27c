"""The AST cache is bounded by count and by bytes, least recently used first."""

from __future__ import annotations

from worker.cache import ScriptCache
from worker.engine import Compiled


def entry(size: int) -> Compiled:
    return Compiled(script=None, functions=[], size=size)  # type: ignore[arg-type]


def test_bounded_by_count_lru_order() -> None:
    cache = ScriptCache(max_scripts=2, max_bytes=10**9)
    cache.put("region", "a", entry(1))
    cache.put("region", "b", entry(1))
    assert cache.get("region", "a") is not None  # a is now most recent
    cache.put("region", "c", entry(1))
    assert cache.get("region", "b") is None and cache.get("region", "a") is not None
    assert cache.evictions == 1


def test_bounded_by_bytes_and_kind_is_part_of_the_key() -> None:
    cache = ScriptCache(max_scripts=100, max_bytes=100)
    cache.put("region", "a", entry(60))
    cache.put("provider", "a", entry(60))
    assert cache.get("region", "a") is None and cache.get("provider", "a") is not None
    assert cache.bytes == 60 and len(cache) == 1
