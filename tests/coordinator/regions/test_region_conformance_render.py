"""render (docs/scripts/regions.md#renderctx; cases RB1-RB22) through real workers, fallbacks included."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from coordinator.regions import Entry, Region, RenderMeta, RenderReport, SystemBlock, ToolCall

if TYPE_CHECKING:
    from region_pool import Pooled

META = RenderMeta("plan", 2, "m1", 50, 2000)
KEPT = SystemBlock("[brain]:\nkept", "Never", "rewritten", "brain")


def _render(pooled: Pooled, region: Region, meta: RenderMeta = META) -> RenderReport:
    return pooled.run(region.render(meta))


def _with_entries(pooled: Pooled, source: str, *contents: str, **options: Any) -> Region:
    region = pooled.region(source, **options)
    for content in contents:
        assert pooled.run(region.write(content, 10)).ok
    return region


def test_rb1_string_render_and_cache_hint_by_persistence(pooled: Pooled) -> None:
    source = "fn render(ctx) { `<${ctx.region.name}>` }"
    plain = _render(pooled, pooled.region(source, volatility="stable"))
    assert plain.system == (SystemBlock("<brain>", "UntilChanged", "rewritten", ""),) and not plain.fallback
    persistent = _render(pooled, pooled.region(source, persistent=True))
    assert persistent.system == (SystemBlock("<brain>", "Always", "rewritten", ""),)


@pytest.mark.parametrize("body", ['""', "#{}"])
def test_rb2_empty_outputs(pooled: Pooled, body: str) -> None:
    report = _render(pooled, _with_entries(pooled, f"fn render(ctx) {{ {body} }}", "kept"))
    assert report.system == () and report.messages == () and not report.fallback and not report.warnings


def test_rb3_full_map_with_typed_messages(pooled: Pooled) -> None:
    source = """
    fn render(ctx) {
        #{ system: ["s1", "", "s2"],
           messages: [
             #{ role: "user", content: "hello" },
             #{ role: "assistant", content: "thinking",
                tool_calls: [ #{ id: "c1", name: "shell", arguments: #{ command: "ls" } } ] },
             #{ role: "user",
                tool_results: [ #{ tool_call_id: "c1", content: "file_a", is_error: false } ] } ] }
    }"""
    report = _render(pooled, pooled.region(source))
    assert [b.text for b in report.system] == ["s1", "s2"]
    assert [m.to_json() for m in report.messages] == [
        {"role": "user", "content": "hello"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "thinking"},
                {"type": "tool_use", "id": "c1", "name": "shell", "input": {"command": "ls"}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "file_a", "is_error": False}],
        },
    ]


def test_rb4_single_system_string_null_messages(pooled: Pooled) -> None:
    report = _render(pooled, pooled.region('fn render(ctx) { #{ system: "solo", messages: () } }'))
    assert [b.text for b in report.system] == ["solo"] and report.messages == ()


RB5_BODIES = [
    "42",
    "true",
    "[1, 2]",
    "",
    "#{ system: 42 }",
    "#{ system: [1] }",
    '#{ messages: "not an array" }',
    "#{ messages: [42] }",
    '#{ messages: [ #{ content: "no role" } ] }',
    '#{ messages: [ #{ role: "system", content: "x" } ] }',
    '#{ messages: [ #{ role: "user", content: 42 } ] }',
    '#{ messages: [ #{ role: "user" } ] }',
    '#{ messages: [ #{ role: "user", tool_calls: [] } ] }',
    '#{ messages: [ #{ role: "assistant", tool_calls: 42 } ] }',
    '#{ messages: [ #{ role: "assistant", tool_calls: () } ] }',
    '#{ messages: [ #{ role: "assistant", tool_calls: [42] } ] }',
    '#{ messages: [ #{ role: "assistant", tool_calls: [ #{ name: "n" } ] } ] }',
    '#{ messages: [ #{ role: "assistant", tool_calls: [ #{ id: "c" } ] } ] }',
    '#{ messages: [ #{ role: "assistant", tool_results: [] } ] }',
    '#{ messages: [ #{ role: "user", tool_results: 42 } ] }',
    '#{ messages: [ #{ role: "user", tool_results: [42] } ] }',
    '#{ messages: [ #{ role: "user", tool_results: [ #{ content: "x" } ] } ] }',
    '#{ messages: [ #{ role: "user", tool_results: [ #{ tool_call_id: "c" } ] } ] }',
    '#{ system: "good", messages: [ #{ role: "user", content: "ok" }, #{ role: "bot", content: "x" } ] }',
]


@pytest.mark.parametrize("body", RB5_BODIES)
def test_rb5_invalid_shapes_fall_back(pooled: Pooled, body: str) -> None:
    report = _render(pooled, _with_entries(pooled, f"fn render(ctx) {{ {body} }}", "kept"))
    assert report.fallback and report.system == (KEPT,) and report.messages == ()
    assert any("brain" in str(w) and "invalid shape" in str(w) for w in report.warnings)


def test_rb6_invalid_shape_on_empty_region(pooled: Pooled) -> None:
    report = _render(pooled, pooled.region("fn render(ctx) { 42 }"))
    assert report.system == () and report.messages == () and report.fallback


def test_rb7_throw_falls_back(pooled: Pooled) -> None:
    report = _render(pooled, _with_entries(pooled, 'fn render(ctx) { throw "broken" }', "kept"))
    assert report.system == (KEPT,) and report.system[0].cache_hint == "Never"
    warning = str(report.warnings[0])
    assert "region 'brain'" in warning and "broken" in warning and "sha256" in warning
    empty = _render(pooled, pooled.region('fn render(ctx) { throw "broken" }'))
    assert empty.system == () and empty.fallback


def test_rb8_no_script_fallback_joins_entries(pooled: Pooled) -> None:
    region = Region("brain", None, budget=1000, volatility="grows")
    for content in ("a", "b"):
        pooled.run(region.write(content, 10))
    report = _render(pooled, region)
    assert report.system == (SystemBlock("[brain]:\na\n\nb", "Never", "grows", "brain"),) and report.fallback


def test_rb9_operation_limit_falls_back(pooled: Pooled) -> None:
    report = _render(pooled, _with_entries(pooled, "fn render(ctx) { loop {} }", "kept"))
    assert report.system == (KEPT,) and report.fallback


def test_rb10_unrepresentable_return_falls_back(pooled: Pooled) -> None:
    for body in ('Fn("render")', "blob(3)", "|x| x + 1"):
        report = _render(pooled, _with_entries(pooled, f"fn render(ctx) {{ {body} }}", "kept"))
        assert report.system == (KEPT,) and report.fallback, body


def test_rb11_ctx_fields(pooled: Pooled) -> None:
    source = (
        "fn render(ctx) { `${ctx.stage_name}|${ctx.stage_iterations}|${ctx.model}|"
        "${ctx.window.total_tokens}|${ctx.window.max_tokens}` }"
    )
    region = pooled.region(source)
    assert _render(pooled, region).system[0].text == "plan|2|m1|50|2000"
    assert _render(pooled, region, RenderMeta(window_total_tokens=50, window_max_tokens=2000)).system[
        0
    ].text == ("|0||50|2000")


def test_rb12_renders_when_empty(pooled: Pooled) -> None:
    report = _render(pooled, pooled.region("fn render(ctx) { `<empty count=${ctx.entries.len()}>` }"))
    assert report.system[0].text == "<empty count=0>"


HARD_GUARD = " (enable exact_token_counting for a hard guard)"
"""The end of the reference's over-budget warning, which rhaipool words the same way."""


def test_rb13_over_budget_output_still_sent(pooled: Pooled) -> None:
    region = pooled.region("fn render(ctx) { let s = \"\"; s.pad(8000, 'x'); s }")
    report = _render(pooled, region)
    assert len(report.system[0].text) == 8000 and not report.fallback
    assert [w.cause for w in report.warnings] == [
        f"render exceeds its budget (~2000 tokens > 1000); sending anyway{HARD_GUARD}"
    ]


@pytest.mark.parametrize(
    ("body", "cost"),
    [
        ("let s = \"\"; s.pad(41, 'x'); s", 11),
        ("let s = \"\"; s.pad(21, 'x'); #{ system: [s, s] }", 12),
        ('let s = ""; s.pad(41, \'x\'); #{ messages: [ #{ role: "user", content: s } ] }', 11),
        (
            'let s = ""; s.pad(41, \'x\'); #{ messages: [ #{ role: "assistant",'
            ' tool_calls: [ #{ id: "c", name: "n", arguments: #{ a: s } } ] } ] }',
            13,
        ),
        (
            "let s = \"\"; s.pad(41, 'x');"
            ' #{ messages: [ #{ role: "user", tool_results: [ #{ tool_call_id: "c", content: s } ] } ] }',
            11,
        ),
    ],
)
def test_rb13_every_output_over_its_budget_warns_and_is_sent(pooled: Pooled, body: str, cost: int) -> None:
    """The reference sums the estimate over blocks, texts, tool inputs (as JSON) and results: over warns."""
    report = _render(pooled, pooled.region(f"fn render(ctx) {{ {body} }}", budget=10))
    assert not report.fallback and (report.system or report.messages)
    assert [w.cause for w in report.warnings] == [
        f"render exceeds its budget (~{cost} tokens > 10); sending anyway{HARD_GUARD}"
    ]


def test_rb13_output_at_its_budget_does_not_warn(pooled: Pooled) -> None:
    report = _render(pooled, pooled.region("fn render(ctx) { let s = \"\"; s.pad(40, 'x'); s }", budget=10))
    assert len(report.system[0].text) == 40 and not report.fallback and report.warnings == ()


def test_rb14_tool_call_defaults(pooled: Pooled) -> None:
    calls = '[ #{ id: "c", name: "n" }, #{ id: "d", name: "n", thought_signature: "sig123" } ]'
    source = f'fn render(ctx) {{ #{{ messages: [ #{{ role: "assistant", tool_calls: {calls} }} ] }} }}'
    blocks = _render(pooled, pooled.region(source)).messages[0].content
    assert blocks == (
        {"type": "tool_use", "id": "c", "name": "n", "input": {}},
        {"type": "tool_use", "id": "d", "name": "n", "input": {}, "thought_signature": "sig123"},
    )


def test_rb22_entry_serialization(pooled: Pooled) -> None:
    source = """
    fn render(ctx) {
        let e = ctx.entries;
        `${e[0].kind},${e[1].kind},${e[2].kind},${e[3].kind}|${e[0].key}|${e[1].key == ()}|${e[0].tokens}|`
        + `${e[2].tool_calls[0].id}|${e[3].tool_call_id}|${e[3].is_error}|`
        + `${e[2].tool_calls[0].arguments.command}`
        + `|${e[0].timestamp > 0}|${ctx.region.entry_count}|${ctx.region.current_tokens}`
    }"""
    region = pooled.region(source)
    pooled.run(region.write("t", 10, key="k"))
    pooled.run(region.write("u", 10, kind="user_message"))
    pooled.run(
        region.write("a", 10, kind="assistant_turn", tool_calls=[ToolCall("c1", "shell", {"command": "ls"})])
    )
    pooled.run(region.write("r", 10, kind="tool_result", tool_call_id="c1", tool_name="shell", is_error=True))
    text = _render(pooled, region).system[0].text
    assert text == "text,user_message,assistant_turn,tool_result|k|true|10|c1|c1|true|ls|true|4|40"


def test_ctx_mutation_has_no_effect(pooled: Pooled) -> None:
    region = _with_entries(
        pooled, 'fn render(ctx) { ctx.entries.clear(); ctx.region.name = "x"; "" }', "kept"
    )
    _render(pooled, region)
    assert [e.content for e in region.entries] == ["kept"]


def test_top_level_statements_run_before_every_hook(pooled: Pooled) -> None:
    source = 'let n = 40; while n > 0 { n -= 1; } fn render(ctx) { "ran" }'
    assert _render(pooled, pooled.region(source)).system[0].text == "ran"
    failing = _with_entries(pooled, 'throw "top level"; fn render(ctx) { "never" }', "kept")
    assert _render(pooled, failing).system == (KEPT,)


def test_fallback_carries_declared_volatility(pooled: Pooled) -> None:
    region = _with_entries(pooled, "fn render(ctx) { 42 }", "a", "b", volatility="stable")
    assert _render(pooled, region).system == (SystemBlock("[brain]:\na\n\nb", "Never", "stable", "brain"),)


def test_entries_arrive_oldest_first(pooled: Pooled) -> None:
    region = _with_entries(
        pooled,
        "fn render(ctx) { let out = []; for e in ctx.entries { out.push(e.content) } out }",
        "1",
        "2",
        "3",
    )
    # an array is an invalid shape: the fallback shows the order the host stored
    assert _render(pooled, region).system[0].text == "[brain]:\n1\n\n2\n\n3"
    joined = pooled.region('fn render(ctx) { let s = ""; for e in ctx.entries { s += e.content; } s }')
    for content in ("1", "2", "3"):
        pooled.run(joined.write(content, 1))
    assert _render(pooled, joined).system[0].text == "123"


def test_stored_entries_unaffected_by_hidden_big_ints(pooled: Pooled) -> None:
    region = pooled.region("fn render(ctx) { `${ctx.entries[0].tool_calls[0].arguments.n}` }")
    pooled.run(
        region.write_entry(Entry("x", 1, "assistant_turn", tool_calls=(ToolCall("c", "n", {"n": 2**64}),)))
    )
    assert float(_render(pooled, region).system[0].text) == float(2**64)
