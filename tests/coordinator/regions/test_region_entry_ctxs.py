"""A region builds each entry's ctx dict once and reuses it while the entry stays (renders run often)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.regions.hooks import entry_ctx, reuse_entry_ctxs
from coordinator.regions.model import Entry


def entries(n: int, start: int = 0) -> list[Entry]:
    return [Entry(f"entry {i}", i, timestamp=i) for i in range(start, start + n)]


def fresh(items: list[Entry]) -> list[dict[str, Any]]:
    return [entry_ctx(e) for e in items]


def test_kept_entries_keep_their_dicts_and_new_ones_get_correct_ones() -> None:
    old = entries(5)
    ctxs = fresh(old)
    assert reuse_entry_ctxs(old, ctxs, tuple(old)) is ctxs  # unchanged: nothing rebuilt
    grown = [*old, *entries(2, 5)]
    out = reuse_entry_ctxs(old, ctxs, grown)
    assert out == fresh(grown) and all(a is b for a, b in zip(out, ctxs, strict=False))
    assert len(ctxs) == 5  # the previous list is never changed (a delta may still refer to it)
    shuffled = [grown[6], grown[1], Entry("new", 1), grown[3]]
    out2 = reuse_entry_ctxs(grown, out, shuffled)
    assert out2 == fresh(shuffled)
    assert out2[0] is out[6] and out2[1] is out[1] and out2[3] is out[3]
    assert reuse_entry_ctxs(shuffled, out2, []) == []


def test_an_equal_entry_is_not_taken_for_the_same_one() -> None:
    """Identity, not equality: a script tells apart what ``==`` may not (and deltas match by identity)."""
    old = entries(3)
    ctxs = fresh(old)
    twin = [Entry(e.content, e.tokens, timestamp=e.timestamp) for e in old]
    out = reuse_entry_ctxs(old, ctxs, twin)
    assert out == ctxs and not any(a is b for a, b in zip(out, ctxs, strict=True))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 9), max_size=12), st.lists(st.integers(0, 14), max_size=12))
def test_any_change_yields_the_ctxs_built_from_scratch(before: list[int], after: list[int]) -> None:
    pool = entries(15)
    old = [pool[i] for i in before]
    new = [pool[i] for i in after]
    assert reuse_entry_ctxs(old, fresh(old), new) == fresh(new)
