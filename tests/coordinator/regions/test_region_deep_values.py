"""Values of any depth through a real region (issue 12 point 3): the reference has no nesting limit.

rhaipool used to refuse values nested deeper than 64 levels: render fell back from depth 63, and tool-call
arguments nested 59+ levels in the ctx made the hook fail.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from coordinator.regions import Entry, RenderMeta, ToolCall

if TYPE_CHECKING:
    from region_pool import Pooled

META = RenderMeta("plan", 2, "m1", 50, 2000)


def _nested(depth: int) -> Any:
    value: Any = 7
    for _ in range(depth):
        value = {"k": value}
    return value


def _depth(value: Any) -> int:
    depth = 0
    while value != 7:
        value, depth = value["k"], depth + 1
    return depth


@pytest.mark.parametrize("depth", [63, 64, 1_000, 5_000])
def test_render_returns_tool_call_arguments_of_any_depth(pooled: Pooled, depth: int) -> None:
    source = f"""
    fn render(ctx) {{
        let a = 7;
        for i in 0..{depth} {{ a = #{{k: a}}; }}
        #{{ messages: [ #{{ role: "assistant", content: "x",
                            tool_calls: [ #{{ id: "c1", name: "t", arguments: a }} ] }} ] }}
    }}"""
    report = pooled.run(pooled.region(source).render(META))
    assert not report.fallback, report.warnings
    block = report.messages[0].to_json()["content"][1]
    assert block["type"] == "tool_use" and _depth(block["input"]) == depth


@pytest.mark.parametrize("depth", [59, 64, 1_000, 9_000])  # echoed: its maps count against max_map_size
def test_ctx_carries_tool_call_arguments_of_any_depth(pooled: Pooled, depth: int) -> None:
    source = """
    fn render(ctx) {
        let args = ctx.entries[0].tool_calls[0].arguments;
        #{ messages: [ #{ role: "assistant", content: "x",
                          tool_calls: [ #{ id: "c1", name: "t", arguments: args } ] } ] }
    }"""
    region = pooled.region(source)
    entry = Entry("x", 1, "assistant_turn", tool_calls=(ToolCall("c", "n", _nested(depth)),))
    pooled.run(region.write_entry(entry))
    report = pooled.run(region.render(META))
    assert not report.fallback, report.warnings
    assert _depth(report.messages[0].to_json()["content"][1]["input"]) == depth


def test_a_ctx_10_000_levels_deep_reaches_the_hook(pooled: Pooled) -> None:
    region = pooled.region(
        "fn render(ctx) { let a = ctx.entries[0].tool_calls[0].arguments; `${a.k.k.k.k == ()}` }"
    )
    entry = Entry("x", 1, "assistant_turn", tool_calls=(ToolCall("c", "n", _nested(10_000)),))
    pooled.run(region.write_entry(entry))
    report = pooled.run(region.render(META))
    assert not report.fallback, report.warnings
    assert report.system[0].text == "false"
