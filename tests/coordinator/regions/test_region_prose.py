"""Audit of the region contract's prose (docs/scripts/regions.md, docs/scripts/errors.md#limits,
docs/scripts/host-functions.md#values-between-json-and-rhai, docs/scripts/scenarios.md#the-file) beyond the
numbered cases.

Every case runs real hooks in real sandboxed workers through a real ``Pool``.
`import` and `export` are the one deliberate divergence: the binding refuses them when a script
compiles (rhai-python's contract, stricter than the reference, where `import` compiles and fails
when it runs), so such a region fails to load with a message naming the keyword.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from coordinator.regions import SystemBlock, ToolCall

if TYPE_CHECKING:
    from region_pool import Pooled

RENDER = 'fn render(ctx) { "" }\n'
KEPT = SystemBlock("[brain]:\nkept", "Never", "rewritten", "brain")

# -- docs/scripts/errors.md#limits modules: compiled as in the reference; an executed import fails at run time


@pytest.mark.parametrize(
    "source",
    [
        'fn render(ctx) { import "other" as m; "x" }',
        'import "other" as m;\nfn render(ctx) { "x" }',
    ],
    ids=["import-in-hook", "top-level-import"],
)
def test_an_executed_import_is_module_not_found_and_falls_back(pooled: Pooled, source: str) -> None:
    region = pooled.region(source)
    pooled.run(region.write("kept", 10))
    report = pooled.run(region.render())
    assert report.fallback and report.system == (KEPT,)
    assert any("Module not found: other" in str(w) for w in report.warnings)


def test_export_loads_and_renders(pooled: Pooled) -> None:
    region = pooled.region('export const X = 1;\nfn render(ctx) { "ok" }')
    assert pooled.run(region.render()).system[0].text == "ok"


# -- docs/scripts/host-functions.md#values-between-json-and-rhai conversions as the hooks' contracts read them


def test_on_write_nan_is_null_so_accepted_without_warning(pooled: Pooled) -> None:
    """NaN converts to null (docs/scripts/host-functions.md#values-between-json-and-rhai), and null is `()`:
    accept unchanged, not "any other value"."""
    region = pooled.region(RENDER + "fn on_write(ctx) { 0.0 / 0.0 }")
    report = pooled.run(region.write("keep", 5))
    assert report.outcome == "accepted" and report.warnings == ()
    assert [(e.content, e.tokens) for e in region.entries] == [("keep", 5)]


def test_char_results_are_strings(pooled: Pooled) -> None:
    """A Rhai char converts to a one-character string: a block from render, a replacement from on_write."""
    region = pooled.region("fn render(ctx) { 'x' }\nfn on_write(ctx) { 'y' }")
    report = pooled.run(region.write("hello", 5))
    assert report.outcome == "replaced"
    assert [(e.content, e.tokens) for e in region.entries] == [("y", 1)]
    assert pooled.run(region.render()).system == (SystemBlock("x", "UntilChanged", "rewritten", ""),)


def test_unconvertible_value_under_an_ignored_key_still_falls_back(pooled: Pooled) -> None:
    """Conversion to JSON precedes the shape check (docs/scripts/regions.md#how-a-hook-is-called): ignored
    keys do not rescue a closure/blob."""
    for extra in ["|x| x", "blob(2, 1)", "timestamp()"]:
        region = pooled.region(f'fn render(ctx) {{ #{{ system: "s", extra: {extra} }} }}')
        assert pooled.run(region.write("kept", 10)).ok
        report = pooled.run(region.render())
        assert report.fallback and report.system == (KEPT,), extra


def test_blob_answer_from_on_overflow_frees_nothing_itself(pooled: Pooled) -> None:
    """A blob has no JSON form in [M] (docs/scripts/host-functions.md#values-between-json-and-rhai), so it is
    not read as indices; oldest-first makes up."""
    region = pooled.region(RENDER + "fn on_overflow(ctx) { blob(1, 2) }")
    for content in ("a", "b", "c"):
        assert pooled.run(region.write(content, 10)).ok
    report = pooled.run(region.evict(5))
    assert report.warnings and [e.content for e in report.dropped] == ["a"]
    assert [e.content for e in region.entries] == ["b", "c"]


def test_u64_arguments_reach_the_script_as_floats(pooled: Pooled) -> None:
    """JSON integers beyond i64 become (lossy) floats on the way into Rhai
    (docs/scripts/host-functions.md#values-between-json-and-rhai)."""
    region = pooled.region("fn render(ctx) { type_of(ctx.entries[0].tool_calls[0].arguments.n) }")
    call = ToolCall("c1", "shell", {"n": 2**63})
    assert pooled.run(region.write("", 1, kind="assistant_turn", tool_calls=[call])).ok
    assert [b.text for b in pooled.run(region.render()).system] == ["f64"]


# -- docs/scripts/regions.md#renderctx grammar details through a real worker ---------------------------------


def test_tool_calls_unit_is_invalid_through_the_worker(pooled: Pooled) -> None:
    """`tool_calls: ()` keeps its key across the conversion, so the message is invalid (subtle)."""
    region = pooled.region(
        'fn render(ctx) { #{ messages: [#{ role: "assistant", content: "x", tool_calls: () }] } }'
    )
    assert pooled.run(region.write("kept", 10)).ok
    report = pooled.run(region.render())
    assert report.fallback and report.system == (KEPT,) and report.messages == ()


def test_unit_arguments_stay_null_through_the_worker(pooled: Pooled) -> None:
    """Present-but-unit `arguments` becomes `input: null`, absent becomes `{}`
    (docs/scripts/regions.md#renderctx)."""
    source = """fn render(ctx) { #{ messages: [#{ role: "assistant", tool_calls: [
        #{ id: "a", name: "n", arguments: () }, #{ id: "b", name: "n" } ] }] } }"""
    report = pooled.run(pooled.region(source).render())
    assert [b["input"] for b in report.messages[0].content] == [None, {}]


def test_mutating_ctx_does_not_leak_into_the_next_call(pooled: Pooled) -> None:
    """Arguments are by value (docs/scripts/regions.md#how-a-hook-is-called): a render that rewrites
    ctx.entries sees fresh entries next time."""
    source = """fn render(ctx) {
        let seen = ctx.entries.map(|e| e.content).join(",");
        ctx.entries[0].content = "MUT"; ctx.entries.push(#{ content: "Z" });
        seen
    }"""
    region = pooled.region(source)
    for content in ("a", "b"):
        assert pooled.run(region.write(content, 10)).ok
    texts = [pooled.run(region.render()).system[0].text for _ in range(2)]
    assert texts == ["a,b", "a,b"]
