"""Window cases of render (RB15-RB18, RB21) and the sandbox (RE1-RE9; docs/scripts/errors.md#limits), through
real workers."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from coordinator.regions import BuiltinRegion, Entry, Region, RenderMeta, SystemBlock, Window

if TYPE_CHECKING:
    from region_pool import Pooled

KEPT = SystemBlock("[brain]:\nkept", "Never", "rewritten", "brain")


def _conversation(*texts: str) -> BuiltinRegion:
    return BuiltinRegion("conversation", "sliding_window", [Entry(t, 5, "user_message") for t in texts])


def test_rb15_preamble_before_conversation_either_declaration_order(pooled: Pooled) -> None:
    source = 'fn render(ctx) { #{ messages: [ #{ role: "user", content: "REFERENCE" } ] } }'
    for corpus_first in (False, True):
        corpus = pooled.region(source, name="corpus")
        conversation = _conversation("find the conflicts", "keep going")
        regions = [corpus, conversation] if corpus_first else [conversation, corpus]
        request, _ = pooled.run(Window(2000, regions).assemble())
        assert [m.content for m in request.messages] == ["REFERENCE", "find the conflicts", "keep going"]


def test_rb16_orphans_stripped(pooled: Pooled) -> None:
    source = """fn render(ctx) { #{ messages: [ #{ role: "user", content: "hello" },
        #{ role: "user", tool_results: [ #{ tool_call_id: "ghost", content: "x" } ] } ] } }"""
    request, reports = pooled.run(Window(2000, [pooled.region(source)]).assemble())
    assert len(reports[0].messages) == 2
    assert [m.to_json() for m in request.messages] == [{"role": "user", "content": "hello"}]


def test_rb17_begin_injection(pooled: Pooled) -> None:
    request, _ = pooled.run(Window(2000, [pooled.region('fn render(ctx) { "" }')]).assemble())
    assert request.system == () and [m.to_json() for m in request.messages] == [
        {"role": "user", "content": "Begin."}
    ]


def test_rb18_continue_and_begin(pooled: Pooled) -> None:
    both = pooled.region(
        'fn render(ctx) { #{ messages: [ #{ role: "user", content: "q" }, '
        '#{ role: "assistant", content: "a" } ] } }'
    )
    request, _ = pooled.run(Window(2000, [both]).assemble())
    assert [(m.role, m.content) for m in request.messages] == [
        ("user", "q"),
        ("assistant", "a"),
        ("user", "Continue."),
    ]
    only = pooled.region('fn render(ctx) { #{ messages: [ #{ role: "assistant", content: "a" } ] } }')
    request, _ = pooled.run(Window(2000, [only]).assemble())
    assert [(m.role, m.content) for m in request.messages] == [("assistant", "a"), ("user", "Begin.")]


def test_rb21_twelve_factor_takeover(pooled: Pooled) -> None:
    source = """
    fn render(ctx) {
        let xml = "<context>";
        for entry in ctx.entries { xml += `<event kind="${entry.kind}">${entry.content}</event>`; }
        xml += "</context>";
        #{ messages: [ #{ role: "user", content: xml } ] }
    }"""
    region = pooled.region(source, name="conversation")
    pooled.run(region.write("do the task", 5, kind="user_message"))
    pooled.run(region.write("output", 5, kind="tool_result", tool_call_id="c1", tool_name="shell"))
    request, _ = pooled.run(Window(2000, [region]).assemble(stage_name="plan", model="m1"))
    assert request.system == ()
    assert [m.to_json() for m in request.messages] == [
        {
            "role": "user",
            "content": '<context><event kind="user_message">do the task</event>'
            '<event kind="tool_result">output</event></context>',
        }
    ]


def test_window_meta_and_hidden_regions(pooled: Pooled) -> None:
    seen = pooled.region(
        "fn render(ctx) { `${ctx.stage_name}:${ctx.window.total_tokens}/${ctx.window.max_tokens}` }"
    )
    hidden = pooled.region('fn render(ctx) { "must not show" }', name="hidden")
    window = Window(2000, [seen, hidden, BuiltinRegion("task", "pinned", [Entry("goal", 7)])])
    window.hidden.add("hidden")
    request, reports = pooled.run(window.assemble(stage_name="plan", stage_iterations=3, model="m1"))
    assert [b.text for b in request.system] == ["goal", "plan:7/2000"] and len(reports) == 1


# -- the sandbox (RE) -----------------------------------------------------------


def _fallback(pooled: Pooled, source: str) -> tuple[SystemBlock, ...]:
    region = pooled.region(source)
    pooled.run(region.write("kept", 10))
    report = pooled.run(region.render(RenderMeta()))
    return report.system if report.fallback else ()


def test_re1_operation_limit_is_100k(pooled: Pooled) -> None:
    over = 'let x = 0; loop { x += 1; if x > 200000 { break; } } "done"'
    assert _fallback(pooled, f"fn render(ctx) {{ {over} }}") == (KEPT,)
    under = pooled.region("fn render(ctx) { let x = 0; loop { x += 1; if x > 5000 { break; } } `${x}` }")
    assert pooled.run(under.render()).system[0].text == "5001"


def test_re2_print_and_debug_are_no_ops(pooled: Pooled) -> None:
    region = pooled.region('fn render(ctx) { print("hello"); debug("world"); "ok" }')
    assert pooled.run(region.render()).system[0].text == "ok"


def test_re3_import_and_eval_fail(pooled: Pooled) -> None:
    assert _fallback(pooled, 'fn render(ctx) { let f = "eva" + "l"; call(f, "1+1") }') == (KEPT,)
    assert _fallback(pooled, 'import "other" as m; fn render(ctx) { "x" }') == (KEPT,)
    from coordinator.regions import RegionLoadError

    with pytest.raises(RegionLoadError, match="eval"):
        pooled.region('fn render(ctx) { eval("1+1") }')


def test_re4_recursion_cap_and_worker_survives(pooled: Pooled) -> None:
    assert _fallback(pooled, "fn f(n) { f(n + 1) } fn render(ctx) { f(0) }") == (KEPT,)
    assert pooled.run(pooled.region('fn render(ctx) { "alive" }').render()).system[0].text == "alive"


def test_re5_region_string_cap(pooled: Pooled) -> None:
    assert _fallback(pooled, "fn render(ctx) { let s = \"\"; s.pad(1000001, 'x'); s }") == (KEPT,)
    for size in (999_999, 1_000_000):  # up to the limit the output is sent, as the reference sends it
        fits = pooled.region(f"fn render(ctx) {{ let s = \"\"; s.pad({size}, 'x'); s }}", budget=10_000_000)
        report = pooled.run(fits.render())
        assert len(report.system[0].text) == size and not report.fallback and report.warnings == ()
    message = (
        'fn render(ctx) { let s = ""; s.pad(999990, "x"); #{ messages: [ #{ role: "user", content: s } ] } }'
    )
    report = pooled.run(pooled.region(message, budget=10_000_000).render())
    assert len(report.messages[0].content) == 999_990 and not report.fallback


def test_re6_region_array_cap(pooled: Pooled) -> None:
    assert _fallback(pooled, "fn render(ctx) { let a = []; for i in 0..10001 { a.push(i); } a.len() }") == (
        KEPT,
    )


@pytest.mark.parametrize(
    "call",
    ['http_get("http://x")', 'parse_json("{}")', 'env_var("HOME")', 'encode_base64("x")', "to_json([1])"],
)
def test_re7_no_host_io_in_regions(pooled: Pooled, call: str) -> None:
    assert _fallback(pooled, f"fn render(ctx) {{ {call} }}") == (KEPT,)


def test_re9_missing_property_is_unit(pooled: Pooled) -> None:
    region = pooled.region('fn render(ctx) { if ctx.nope == () { "unit" } else { "x" } }')
    assert pooled.run(region.render()).system[0].text == "unit"


def test_deadline_behaves_like_a_throw(pooled: Pooled) -> None:
    # each iteration is cheap in operations but slow in time: the deadline ends it, not the op budget
    source = 'fn render(ctx) { let s = ""; s.pad(900000, \'x\'); loop { let t = s.index_of("y"); } }'
    region = pooled.region(source, timeout=1.0)
    pooled.run(region.write("kept", 10))
    report = pooled.run(region.render())
    assert report.system == (KEPT,) and report.fallback
    assert any("brain" in str(w) for w in report.warnings)


def test_a_hook_that_kills_its_worker_is_a_failed_hook(pooled: Pooled) -> None:
    # index assignment escapes Rhai's map-size check: only the worker's memory cap stops this
    bomb = 'let s = ""; s.pad(999000, "x"); let m = #{}; let i = 0; loop { m[`k${i}`] = s + i; i += 1; }'
    region: Region = pooled.region(f'fn render(ctx) {{ "fine" }} fn on_write(ctx) {{ {bomb} }}', timeout=60.0)
    report = pooled.run(region.write("survives", 3))
    assert report.outcome == "accepted" and [e.content for e in region.entries] == ["survives"]
    assert "memory" in str(report.warnings[0]) and "on_write" in str(report.warnings[0])
    assert pooled.run(region.render()).system[0].text == "fine"


def test_region_helpers_are_registered(pooled: Pooled) -> None:
    source = (
        'fn render(ctx) { `${count_tokens("abcde")}|${is_json("[1]")}|${is_mermaid("graph TD")}|'
        '${tokens_remaining(100, 30)}|${usage_ratio(0, 5)}|${join(["a", 1], "-")}|${region_pinned()}|'
        '${content_format("yaml")}` }'
    )
    assert pooled.run(pooled.region(source).render()).system[0].text == "2|true|true|70|1.0|a-1|pinned|text"


def test_helpers_shadow_builtin_string_methods_like_the_reference(pooled: Pooled) -> None:
    source = 'fn render(ctx) { `${trim("  hi  ")}|${is_empty("   ")}|${contains("abc", "b")}` }'
    assert pooled.run(pooled.region(source).render()).system[0].text == "hi|true|true"


def test_a_large_region_renders_like_the_reference(pooled: Pooled) -> None:
    region = pooled.region("fn render(ctx) { `${ctx.entries.len()}` }", budget=100_000)
    region.restore(Entry(f"e{i}", 1) for i in range(2000))
    assert pooled.run(region.render()).system[0].text == "2000"


def test_timestamp_is_in_the_standard_library(pooled: Pooled) -> None:
    region = pooled.region('fn render(ctx) { let t = timestamp(); "ok" }')
    assert pooled.run(region.render()).system[0].text == "ok"


def test_helpers_leave_builtin_methods_on_other_types_alone(pooled: Pooled) -> None:
    source = """fn render(ctx) {
        let a = [1, 2]; let m = #{a: 1};
        `${a.contains(2)}|${m.contains("a")}|${"abc".contains('b')}|${a.is_empty()}|${"abc".split(1)}`
    }"""
    assert pooled.run(pooled.region(source).render()).system[0].text == 'true|true|true|false|["a", "bc"]'
