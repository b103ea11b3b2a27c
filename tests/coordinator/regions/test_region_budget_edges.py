"""The region budget's boundaries, through real workers: exactly the budget fits, one token more does not.

Each case holds the boundary from both sides, so flipping a ``<=`` to ``<`` (or ``>`` to ``>=``) anywhere
on the write, replace, ``on_overflow`` or ``admission = "reject"`` path fails here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from region_pool import Pooled

RENDER = 'fn render(ctx) { "" }\n'
DROP_FIRST = RENDER + "fn on_overflow(ctx) { [0] }\n"
BUDGET = 100


@pytest.mark.parametrize(("held", "incoming"), [(0, BUDGET), (40, BUDGET - 40)])
def test_a_write_reaching_the_budget_exactly_is_accepted(pooled: Pooled, held: int, incoming: int) -> None:
    region = pooled.region(RENDER, budget=BUDGET)
    if held:
        assert pooled.run(region.write("held", held)).outcome == "accepted"
    report = pooled.run(region.write("new", incoming))
    assert (report.outcome, report.error_kind) == ("accepted", None)
    assert region.current_tokens == BUDGET


@pytest.mark.parametrize(("held", "incoming"), [(0, BUDGET + 1), (40, BUDGET - 39)])
def test_one_token_over_the_budget_is_refused(pooled: Pooled, held: int, incoming: int) -> None:
    region = pooled.region(RENDER, budget=BUDGET)
    if held:
        pooled.run(region.write("held", held))
    report = pooled.run(region.write("new", incoming))
    assert (report.outcome, report.error_kind) == ("error", "TokenBudgetExceeded")
    assert region.current_tokens == held


def test_on_overflow_is_not_asked_when_the_write_fits_exactly(pooled: Pooled) -> None:
    region = pooled.region(DROP_FIRST, budget=BUDGET)
    pooled.run(region.write("held", 40))
    report = pooled.run(region.write("new", BUDGET - 40))
    assert (report.outcome, report.dropped_indices) == ("accepted", ())
    assert [e.content for e in region.entries] == ["held", "new"]


def test_on_overflow_frees_room_for_one_token_over(pooled: Pooled) -> None:
    region = pooled.region(DROP_FIRST, budget=BUDGET)
    pooled.run(region.write("held", 40))
    report = pooled.run(region.write("new", BUDGET - 39))
    assert (report.outcome, report.dropped_indices) == ("accepted", (0,))
    assert [e.content for e in region.entries] == ["new"]


def test_a_replace_of_exactly_the_budget_is_stored(pooled: Pooled) -> None:
    region = pooled.region(RENDER, budget=BUDGET)
    pooled.run(region.write("old", 30))
    report = pooled.run(region.replace("all of it", BUDGET))
    assert (report.outcome, report.error_kind) == ("accepted", None)
    assert [(e.content, e.tokens) for e in region.entries] == [("all of it", BUDGET)]


def test_a_replace_one_token_over_the_budget_clears_the_region_and_reports_it(pooled: Pooled) -> None:
    region = pooled.region(RENDER, budget=BUDGET)
    pooled.run(region.write("old", 30))
    report = pooled.run(region.replace("too much", BUDGET + 1))
    assert (report.outcome, report.error_kind) == ("error", "TokenBudgetExceeded")
    assert region.entries == ()


def test_a_reject_region_admits_a_write_that_fills_it_exactly(pooled: Pooled) -> None:
    region = pooled.region(RENDER, budget=BUDGET, admission="reject")
    pooled.run(region.write("held", 40))
    report = pooled.run(region.write("new", BUDGET - 40))
    assert (report.outcome, report.error_kind) == ("accepted", None)
    assert region.current_tokens == BUDGET


def test_a_reject_region_refuses_one_token_over_with_the_tokens_it_holds(pooled: Pooled) -> None:
    region = pooled.region(RENDER, budget=BUDGET, admission="reject")
    pooled.run(region.write("held", 40))
    report = pooled.run(region.write("new", BUDGET - 39))
    assert (report.outcome, report.error_kind) == ("error", "RegionFull")
    assert report.error is not None and "(40/100 tokens)" in report.error
    assert [e.content for e in region.entries] == ["held"]
