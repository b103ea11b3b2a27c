"""Differences from the reference runtime that rhaipool keeps on purpose (``docs/differences.md``).

Each test pins rhaipool's side, so a change towards the reference's behaviour is a conscious decision.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator.regions import Window

if TYPE_CHECKING:
    from region_pool import Pooled


def test_window_eviction_with_the_room_already_free_drops_nothing(pooled: Pooled) -> None:
    """The reference removes one oldest turn group before it first checks the goal; rhaipool checks first."""
    region = pooled.region('fn render(ctx) { "" }', budget=100)
    pooled.run(region.write("old", 10))
    pooled.run(region.write("new", 10))
    result = pooled.run(Window(100, [region]).try_evict(30))
    assert result.freed == 0 and result.dropped == {}
    assert [e.content for e in region.entries] == ["old", "new"]
    report = pooled.run(region.evict(0))
    assert report.freed == 0 and [e.content for e in region.entries] == ["old", "new"]


def test_oversize_replace_reports_the_error_it_hides_in_the_reference(pooled: Pooled) -> None:
    """The reference reports success and stores nothing; rhaipool says why the region is now empty."""
    region = pooled.region('fn render(ctx) { "" }', budget=20)
    pooled.run(region.write("old", 5))
    report = pooled.run(region.replace("huge", 50))
    assert not report.ok and report.error == "Content exceeds token budget: 50 > 20"
    assert region.entries == ()
