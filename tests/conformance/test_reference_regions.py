"""Region behaviour pinned to the reference runtime (Leviath): each case is a difference the oracle found and
that is now fixed (issue 12). Deliberate differences are pinned in ``test_reference_deliberate.py``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator.regions import RenderMeta, SystemBlock

if TYPE_CHECKING:
    from region_pool import Pooled

KEPT = SystemBlock("[brain]:\nkept", "Never", "rewritten", "brain")


def test_region_custom_helper_names_the_flag_persistent(pooled: Pooled) -> None:
    source = """fn render(ctx) {
        let m = region_custom("hooks/conv.rhai", true);
        `${m.kind}|${m.script}|${m.persistent}|${"pinned" in m}|${m.len()}`
    }"""
    report = pooled.run(pooled.region(source).render())
    assert report.system[0].text == "custom|hooks/conv.rhai|true|false|3"


def test_import_in_a_branch_never_taken_loads_and_renders(pooled: Pooled) -> None:
    source = 'fn render(ctx) { if false { import "m" as m; } "rendered" }'
    report = pooled.run(pooled.region(source).render())
    assert not report.fallback and report.system[0].text == "rendered"


def test_top_level_import_and_export_load(pooled: Pooled) -> None:
    source = 'export const X = 1;\nfn render(ctx) { "ok" }\nif false { import "m" as m; }'
    assert pooled.run(pooled.region(source).render()).system[0].text == "ok"


def test_executed_import_fails_at_run_time_and_takes_the_fallback(pooled: Pooled) -> None:
    region = pooled.region('fn render(ctx) { import "m" as m; "x" }')
    pooled.run(region.write("kept", 10))
    report = pooled.run(region.render(RenderMeta()))
    assert report.fallback and report.system == (KEPT,)
    assert any("Module not found: m" in str(w) for w in report.warnings)


def test_full_reject_region_reports_tokens_held_in_the_reference_text(pooled: Pooled) -> None:
    region = pooled.region('fn render(ctx) { "" }', budget=100, admission="reject")
    pooled.run(region.write("held", 60))
    report = pooled.run(region.write("incoming", 60))
    assert report.error_kind == "RegionFull"
    assert report.error == (
        "Region 'brain' is full (60/100 tokens) and does not evict automatically - "
        "release an entry before adding another"
    )
