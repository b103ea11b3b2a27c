"""A region builds each entry's ctx dict once and reuses it while the entry stays (renders run often);
its tuple and token sum are kept until the entries change."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.regions.entries import StoredEntries
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


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 40)),
        st.tuples(st.just("extend"), st.integers(0, 4)),
        st.tuples(st.just("drop_oldest"), st.integers(0, 5)),
        st.tuples(st.just("keep_only"), st.integers(0, 2**8 - 1)),
        st.tuples(st.just("clear"), st.just(0)),
        st.tuples(st.just("look"), st.just(0)),
    ),
    max_size=25,
)


@settings(max_examples=80, deadline=None)
@given(OPS)
def test_stored_entries_follow_every_change_and_cache_only_while_unchanged(
    ops: list[tuple[str, int]],
) -> None:
    stored, model = StoredEntries(), []
    made = iter(entries(200))
    for op, arg in ops:
        if op == "append":
            entry = next(made)
            stored.append(entry)
            model.append(entry)
        elif op == "extend":
            batch = [next(made) for _ in range(arg)]
            stored.extend(iter(batch))
            model.extend(batch)
        elif op == "drop_oldest":
            assert stored.drop_oldest(arg) == tuple(model[:arg])
            del model[:arg]
        elif op == "keep_only":
            model = [e for i, e in enumerate(model) if arg >> (i % 8) & 1]
            stored.keep_only(tuple(model))
        elif op == "clear":
            stored.clear()
            model.clear()
        else:  # a render: everything is cached until the next change
            ctxs, snapshot = stored.ctxs(), stored.snapshot()
            assert stored.ctxs() is ctxs and stored.snapshot() is snapshot
        assert stored.snapshot() == tuple(model) and len(stored) == len(model)
        assert stored.tokens == sum(e.tokens for e in model)
        assert stored.ctxs() == fresh(model)
