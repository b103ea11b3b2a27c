"""on_write, on_overflow and eviction (docs/scripts/regions.md#on_writectx,
docs/scripts/regions.md#on_overflowctx; cases RC1-RC8, RD1-RD11) through real workers."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from coordinator.regions import BuiltinRegion, Entry, PinnedOverBudget, Region, RegionLoader, ToolCall, Window

if TYPE_CHECKING:
    from region_pool import Pooled

RENDER = 'fn render(ctx) { "" }\n'


def _contents(region: Region) -> list[str]:
    return [e.content for e in region.entries]


def test_rc1_replacement_reestimates_tokens(pooled: Pooled) -> None:
    region = pooled.region(RENDER + "fn on_write(ctx) { ctx.entry.content.to_upper() }")
    report = pooled.run(region.write("hi", 5))
    assert report.outcome == "replaced"
    assert [(e.content, e.tokens) for e in region.entries] == [("HI", 1)]


def test_rc1_empty_replacement_stores_zero_tokens(pooled: Pooled) -> None:
    region = pooled.region(RENDER + 'fn on_write(ctx) { "" }')
    pooled.run(region.write("long text", 50, key="k"))
    assert [(e.content, e.tokens, e.key) for e in region.entries] == [("", 0, "k")]


@pytest.mark.parametrize("body", ["true", "()"])
def test_rc2_accept_unchanged(pooled: Pooled, body: str) -> None:
    region = pooled.region(RENDER + f"fn on_write(ctx) {{ {body} }}")
    assert pooled.run(region.write("orig", 5)).outcome == "accepted"
    assert [(e.content, e.tokens) for e in region.entries] == [("orig", 5)]


def test_rc3_false_drops_silently(pooled: Pooled) -> None:
    region = pooled.region(RENDER + 'fn on_write(ctx) { ctx.entry.content != "drop me" }')
    pooled.run(region.write("kept", 5))
    report = pooled.run(region.write("drop me", 5))
    assert report.ok and report.outcome == "dropped" and report.warnings == ()
    assert _contents(region) == ["kept"]
    replaced = pooled.run(region.replace("drop me"))
    assert replaced.ok and replaced.outcome == "dropped" and _contents(region) == ["kept"]


@pytest.mark.parametrize("body", ["42", 'throw "bad"', "#{ a: 1 }", "[1]", "1.5", "loop {}"])
def test_rc4_invalid_or_failing_hook_accepts_unchanged(pooled: Pooled, body: str) -> None:
    region = pooled.region(RENDER + f"fn on_write(ctx) {{ {body} }}")
    report = pooled.run(region.write("keep", 5))
    assert report.outcome == "accepted" and report.warnings
    assert [(e.content, e.tokens) for e in region.entries] == [("keep", 5)]
    assert "on_write" in str(report.warnings[0]) and "region 'brain'" in str(report.warnings[0])


def test_rc5_kind_visible(pooled: Pooled) -> None:
    region = pooled.region(RENDER + "fn on_write(ctx) { ctx.entry.kind }")
    pooled.run(region.write("x", 1))
    pooled.run(region.write("x", 1, kind="user_message"))
    pooled.run(region.write("x", 1, kind="assistant_turn", tool_calls=[ToolCall("c", "n")]))
    pooled.run(region.write("x", 1, kind="tool_result", tool_call_id="c"))
    assert _contents(region) == ["text", "user_message", "assistant_turn", "tool_result"]


def test_rc6_all_write_paths(pooled: Pooled) -> None:
    region = pooled.region(RENDER + "fn on_write(ctx) { `${ctx.entry.kind}:${ctx.entry.content}` }")
    pooled.run(region.write("a", 1))
    pooled.run(region.write("b", 1, kind="user_message"))
    pooled.run(region.write("c", 1, tainted=True))
    pooled.run(region.write("d", 1, kind="user_message", tainted=True))
    assert _contents(region) == ["text:a", "user_message:b", "text:c", "user_message:d"]
    assert [e.tainted for e in region.entries] == [False, False, True, True]
    pooled.run(region.replace("e"))
    assert _contents(region) == ["text:e"]


def test_on_write_ctx_has_no_key_stage_or_window(pooled: Pooled) -> None:
    source = RENDER + (
        "fn on_write(ctx) { `${ctx.entry.key == ()}|${ctx.stage_name == ()}|${ctx.window == ()}|"
        "${ctx.entry.tokens}|${ctx.region.entry_count}|${ctx.region.current_tokens}` }"
    )
    region = pooled.region(source)
    pooled.run(region.write("first", 7, key="k"))
    pooled.run(region.write("second", 9, key="k"))
    # the first answer (20 bytes) replaced the content and was re-estimated at 5 tokens
    assert _contents(region) == ["true|true|true|7|0|0", "true|true|true|9|1|5"]


def test_rc8_non_custom_regions_are_untouched(pooled: Pooled) -> None:
    mangler = pooled.region(RENDER + 'fn on_write(ctx) { "MANGLED" }')
    plain = BuiltinRegion("scratch", "temporary", [Entry("as written", 3)])
    window = Window(100, [plain, mangler])
    request, _ = pooled.run(window.assemble())
    assert request.system[0].text == "[scratch]:\nas written"


def test_restore_skips_on_write(pooled: Pooled) -> None:
    region = pooled.region(RENDER + 'fn on_write(ctx) { "MANGLED" }')
    region.restore([Entry("restored", 4)])
    assert _contents(region) == ["restored"]


# -- on_overflow and eviction (RD) -----------------------------------------------


def _filled(pooled: Pooled, hook: str, *contents: str, budget: int = 1000, tokens: int = 10) -> Region:
    region = pooled.region(RENDER + f"fn on_overflow(ctx) {{ {hook} }}", budget=budget)
    for content in contents:
        assert pooled.run(region.write(content, tokens)).ok
    return region


def test_rd1_dedupe_and_unordered(pooled: Pooled) -> None:
    region = _filled(pooled, "[2, 0, 2]", "a", "b", "c")
    report = pooled.run(region.overflow_drop(15))
    assert report.freed == 20 and [e.content for e in report.dropped] == ["a", "c"]
    assert _contents(region) == ["b"] and region.current_tokens == 10


@pytest.mark.parametrize(
    "hook", ['throw "no"', '"not an array"', '["x"]', "[99]", "[1.0]", "[-1]", "[0, ()]"]
)
def test_rd2_invalid_answers_free_nothing(pooled: Pooled, hook: str) -> None:
    region = _filled(pooled, hook, "a", "b", "c")
    report = pooled.run(region.overflow_drop(15))
    assert report.freed == 0 and report.warnings and _contents(region) == ["a", "b", "c"]


def test_empty_answer_frees_nothing_without_warning(pooled: Pooled) -> None:
    report = pooled.run(_filled(pooled, "[]", "a").overflow_drop(5))
    assert report.freed == 0 and report.warnings == ()


def test_rd4_ctx_carries_needed(pooled: Pooled) -> None:
    region = _filled(
        pooled, "if ctx.needed_tokens == 7 && ctx.entries.len() == 2 { [0] } else { [] }", "a", "b"
    )
    assert pooled.run(region.overflow_drop(7)).freed == 10


def test_rd5_write_time_retry_succeeds(pooled: Pooled) -> None:
    region = _filled(pooled, "[0]", budget=100)
    pooled.run(region.write("big", 90))
    report = pooled.run(region.write("next", 20))
    assert report.ok and report.dropped_indices == (0,)
    assert _contents(region) == ["next"] and region.current_tokens == 20


def test_rd5_needed_tokens_of_the_write_time_call(pooled: Pooled) -> None:
    region = _filled(
        pooled,
        "if ctx.needed_tokens == 10 && ctx.region.current_tokens == 90 { [0] } else { [] }",
        budget=100,
    )
    pooled.run(region.write("big", 90))
    assert pooled.run(region.write("next", 20)).ok


def test_rd6_write_time_still_too_big_keeps_drops(pooled: Pooled) -> None:
    region = _filled(pooled, "[]", budget=100)
    pooled.run(region.write("big", 90))
    report = pooled.run(region.write("more", 50))
    assert not report.ok and report.error == "Content exceeds token budget: 140 > 100"
    assert report.error_kind == "TokenBudgetExceeded" and _contents(region) == ["big"]


def test_partial_drops_stay_applied_when_not_enough(pooled: Pooled) -> None:
    region = _filled(pooled, "[0]", "a", "b", budget=25)
    report = pooled.run(region.write("huge", 30))
    assert not report.ok and report.dropped_indices == (0,)
    assert report.error == "Content exceeds token budget: 50 > 25"
    assert _contents(region) == ["b"]


def test_an_entry_larger_than_the_budget_reports_the_original_numbers(pooled: Pooled) -> None:
    region = _filled(pooled, "[0]", "a", budget=20)
    report = pooled.run(region.write("alone too big", 25))
    assert report.error == "Content exceeds token budget: 35 > 20" and report.dropped_indices == (0,)
    assert region.entries == ()


def test_rd7_no_on_overflow_no_retry(pooled: Pooled) -> None:
    region = pooled.region(RENDER, budget=100)
    pooled.run(region.write("big", 90))
    report = pooled.run(region.write("more", 50))
    assert report.error == "Content exceeds token budget: 140 > 100" and _contents(region) == ["big"]


def test_write_time_overflow_ignores_persistence(pooled: Pooled) -> None:
    region = pooled.region(RENDER + "fn on_overflow(ctx) { [0] }", budget=100, persistent=True)
    pooled.run(region.write("big", 90))
    assert pooled.run(region.write("next", 20)).ok and _contents(region) == ["next"]


def test_reject_region_is_full_without_asking_the_script(pooled: Pooled) -> None:
    source = RENDER + "fn on_overflow(ctx) { [0] }"
    region = pooled.region(source, budget=100, admission="reject")
    pooled.run(region.write("big", 90))
    report = pooled.run(region.write("next", 20))
    assert report.error_kind == "RegionFull" and _contents(region) == ["big"]
    empty = pooled.region(source, budget=10, admission="reject")
    assert pooled.run(empty.write("x", 20)).error_kind == "TokenBudgetExceeded"


def test_rd9_script_retention_honoured_at_window_level(pooled: Pooled) -> None:
    hook = 'let d = []; for (e, i) in ctx.entries { if !e.content.contains("ERROR") { d.push(i) } } d'
    region = _filled(pooled, hook, "ok one", "ERROR two", "ok three", tokens=30)
    window = Window(100, [region])
    result = pooled.run(window.try_evict(40))
    assert result.freed >= 40 and _contents(region) == ["ERROR two"]


@pytest.mark.parametrize("hook", ["[]", None])
def test_rd10_oldest_first_after_empty_answer_or_no_hook(pooled: Pooled, hook: str | None) -> None:
    if hook is None:
        region = pooled.region(RENDER)
        for content in ("old", "new"):
            pooled.run(region.write(content, 40))
    else:
        region = _filled(pooled, hook, "old", "new", tokens=40)
    pooled.run(Window(100, [region]).try_evict(30))
    assert _contents(region) == ["new"]


def test_rd11_persistent_never_evicted(pooled: Pooled) -> None:
    region = pooled.region(RENDER + "fn on_overflow(ctx) { [0] }", budget=100, persistent=True)
    pooled.run(region.write("pinned", 60))
    with pytest.raises(PinnedOverBudget, match=r"Pinned regions \(60\) exceed total budget \(50\)"):
        pooled.run(Window(50, [region]).try_evict(10))
    assert _contents(region) == ["pinned"]


def test_phase2_removes_turn_groups(pooled: Pooled) -> None:
    region = pooled.region(RENDER)
    turn = Entry("t", 10, "assistant_turn", tool_calls=(ToolCall("c1", "n"), ToolCall("c2", "n")))
    for entry in (
        turn,
        Entry("r1", 10, "tool_result", tool_call_id="c1"),
        Entry("r2", 10, "tool_result", tool_call_id="c2"),
        Entry("later", 10, "user_message"),
    ):
        pooled.run(region.write_entry(entry))
    report = pooled.run(region.evict(5))
    assert [e.content for e in report.dropped] == ["t", "r1", "r2"] and _contents(region) == ["later"]


def test_single_region_evict_honours_script_then_makes_up(pooled: Pooled) -> None:
    region = _filled(pooled, "[1]", "a", "b", "c")
    honoured = pooled.run(region.evict(10))
    assert [e.content for e in honoured.dropped] == ["b"] and _contents(region) == ["a", "c"]
    made_up = pooled.run(_filled(pooled, "[1]", "a", "b", "c").evict(15))
    assert [e.content for e in made_up.dropped] == ["b", "a"] and made_up.freed == 20


def test_window_eviction_order_across_kinds(pooled: Pooled) -> None:
    custom = _filled(pooled, "[]", "c1", "c2")
    scratch = BuiltinRegion("scratch", "temporary", [Entry("t1", 10), Entry("t2", 10)])
    clear = BuiltinRegion("clear", "clearable", [Entry("x", 10)])
    pinned = BuiltinRegion("pinned", "pinned", [Entry("p", 10)])
    window = Window(60, [pinned, custom, scratch, clear])
    result = pooled.run(window.try_evict(40))
    assert result.dropped["clear"] == (Entry("x", 10),)
    # phase 2 passes round-robin: c1, t1 (free 30), then c2 (free 40) and stops
    assert [e.content for e in result.dropped["brain"]] == ["c1", "c2"]
    assert [e.content for e in result.dropped["scratch"]] == ["t1"]
    assert window.free() == 40 and result.freed == 40 and [e.content for e in pinned.entries] == ["p"]


def test_concurrent_writes_are_serialized_in_order(pooled: Pooled) -> None:
    region = pooled.region(RENDER + "fn on_write(ctx) { `${ctx.region.entry_count}:${ctx.entry.content}` }")

    async def many() -> None:
        await asyncio.gather(*(region.write(str(i), 1) for i in range(20)))

    pooled.run(many())
    assert _contents(region) == [f"{i}:{i}" for i in range(20)]


def test_warnings_carry_region_script_hash_and_cause(pooled: Pooled) -> None:
    region = pooled.region(RENDER + 'fn on_write(ctx) { throw "refused by policy" }')
    warning = pooled.run(region.write("x", 1)).warnings[0]
    assert region.script is not None
    assert (warning.region, warning.hook, warning.sha256) == ("brain", "on_write", region.script.sha256)
    assert warning.script == region.script.path and "refused by policy" in warning.cause


def test_tenant_is_passed_through(pooled: Pooled, tmp_path: Path) -> None:
    (tmp_path / "t.rhai").write_text(RENDER + 'fn on_write(ctx) { ctx.entry.content + "!" }')
    loader = RegionLoader(pooled.pool, base_dir=tmp_path, tenant="acme")
    region = pooled.run(loader.region("brain", "t.rhai", budget=10))
    pooled.run(region.write("hi", 1))
    assert _contents(region) == ["hi!"]


def test_timestamps_are_unix_seconds_at_insertion(pooled: Pooled, tmp_path: Path) -> None:
    (tmp_path / "c.rhai").write_text(RENDER)
    loader = RegionLoader(pooled.pool, base_dir=tmp_path)
    region = pooled.run(loader.region("brain", "c.rhai", budget=10, clock=lambda: 1_710_000_000.9))
    pooled.run(region.write("x", 1))
    assert region.entries[0].timestamp == 1_710_000_000


def test_edge_clear_spares_persistent_regions(pooled: Pooled) -> None:
    keep = pooled.region(RENDER, persistent=True)
    drop = pooled.region(RENDER)
    for region in (keep, drop):
        pooled.run(region.write("x", 4))
    assert (keep.clear(edge=True), drop.clear(edge=True)) == (0, 4)
    assert _contents(keep) == ["x"] and drop.entries == ()
    assert keep.clear() == 4 and keep.entries == ()
