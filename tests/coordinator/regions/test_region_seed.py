"""Audit of what the seed (seeds/custom-context-regions.txt) promises script authors, beyond the numbered
cases.

The seed's own example region runs verbatim through real sandboxed workers; each statement the seed
makes about its output, about eviction and about what the model sees is checked here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pool_support import run

from coordinator._core.pool import Pool
from coordinator.errors import PoolClosed
from coordinator.regions import BuiltinRegion, Entry, RenderMeta, ToolCall, Window, open_region

if TYPE_CHECKING:
    from region_pool import Pooled

# The seed's "A complete region", character for character.
SEED_BRAIN = r"""// context_hooks/brain.rhai

fn render(ctx) {
    let xml = "<context>";
    for entry in ctx.entries {
        xml += `<event kind="${entry.kind}">${entry.content}</event>`;
    }
    xml += "</context>";
    #{ messages: [ #{ role: "user", content: xml } ] }
}

fn on_write(ctx) {
    // Keep tool errors verbatim; trim chatty successes to their first line.
    let entry = ctx.entry;
    if entry.kind == "tool_result" && !entry.content.contains("ERROR") {
        let head = entry.content.split("\n")[0];
        return head;                 // replace content (kind preserved)
    }
    ()                               // accept everything else unchanged
}

fn on_overflow(ctx) {
    // Drop successes first; oldest-first eviction covers any shortfall.
    let drops = [];
    for (entry, i) in ctx.entries {
        if !entry.content.contains("ERROR") { drops.push(i); }
    }
    drops
}
"""
RENDER = 'fn render(ctx) { "" }\n'


def _contents(entries: object) -> list[str]:
    return [e.content for e in entries]  # type: ignore[attr-defined]


# -- the seed's complete region ------------------------------------------------------------------------------


def test_seed_brain_on_write_trims_successes_keeps_errors_and_kinds(pooled: Pooled) -> None:
    """ "trim chatty successes to their first line" (kind preserved, tokens re-estimated); errors verbatim."""
    region = pooled.region(SEED_BRAIN)
    ok = pooled.run(
        region.write("README.md\nsrc\ntests", 9, kind="tool_result", tool_call_id="c1", tool_name="shell")
    )
    error = "ERROR: test_login failed\nexpected 200, got 500"
    bad = pooled.run(
        region.write(error, 12, kind="tool_result", tool_call_id="c2", tool_name="pytest", is_error=True)
    )
    user = pooled.run(region.write("fix it\nplease", 4, kind="user_message"))
    assert (ok.outcome, bad.outcome, user.outcome) == ("replaced", "accepted", "accepted")
    stored = [(e.content, e.tokens, e.kind, e.tool_call_id, e.tool_name, e.is_error) for e in region.entries]
    assert stored == [
        ("README.md", 3, "tool_result", "c1", "shell", False),
        (error, 12, "tool_result", "c2", "pytest", True),
        ("fix it\nplease", 4, "user_message", "", "", False),
    ]


def test_seed_brain_is_what_the_model_sees(pooled: Pooled) -> None:
    """ "It renders everything as one XML user message": no system block, one message, entries in order."""
    region = pooled.region(SEED_BRAIN)
    pooled.run(region.write("do the task", 5, kind="user_message"))
    call = ToolCall("c1", "shell", {"command": "ls"})
    pooled.run(region.write("", 2, kind="assistant_turn", tool_calls=[call]))
    pooled.run(region.write("a.py\nb.py", 3, kind="tool_result", tool_call_id="c1", tool_name="shell"))
    request, reports = pooled.run(Window(200_000, [region]).assemble(stage_name="plan", model="m1"))
    assert not reports[0].fallback and request.system == ()
    xml = (
        '<context><event kind="user_message">do the task</event><event kind="assistant_turn"></event>'
        '<event kind="tool_result">a.py</event></context>'
    )
    assert [m.to_json() for m in request.messages] == [{"role": "user", "content": xml}]


def test_seed_brain_evicts_successes_before_errors(pooled: Pooled) -> None:
    """Under window pressure the script's choice is honoured exactly: successes go, errors stay."""
    region = pooled.region(SEED_BRAIN)
    for content in ("ERROR one", "ok two", "ERROR three", "ok four"):
        pooled.run(region.write(content, 20))
    window = Window(100, [region])
    result = pooled.run(window.try_evict(30))
    assert _contents(result.dropped["brain"]) == ["ok two", "ok four"]
    assert _contents(region.entries) == ["ERROR one", "ERROR three"]


def test_seed_brain_shortfall_made_up_oldest_first(pooled: Pooled) -> None:
    """ "oldest-first eviction covers any shortfall": after the successes,
    the oldest error goes, and no more."""
    region = pooled.region(SEED_BRAIN)
    for content in ("ERROR one", "ok two", "ERROR three", "ERROR four"):
        pooled.run(region.write(content, 20))
    window = Window(100, [region])
    result = pooled.run(window.try_evict(50))
    assert _contents(result.dropped["brain"]) == ["ok two", "ERROR one"]
    assert _contents(region.entries) == ["ERROR three", "ERROR four"] and window.free() == 60


# -- "when over budget" / "when the region must shrink" ------------------------------------------------------


def test_window_with_room_evicts_nothing(pooled: Pooled) -> None:
    """on_overflow runs "when over budget"; with the goal already met nothing is dropped, by any phase."""
    region = pooled.region(RENDER + "fn on_overflow(ctx) { [0] }")
    pooled.run(region.write("a", 10))
    plain = pooled.region(RENDER)
    pooled.run(plain.write("b", 10))
    scratch = BuiltinRegion("scratch", "temporary", [Entry("t", 10)])
    clear = BuiltinRegion("clear", "clearable", [Entry("x", 10)])
    window = Window(100, [clear, region, plain, scratch])
    result = pooled.run(window.try_evict(60))
    assert result.freed == 0 and result.dropped == {}
    assert [_contents(r.entries) for r in (clear, region, plain, scratch)] == [["x"], ["a"], ["b"], ["t"]]


# -- "Recreating the built-ins" ------------------------------------------------------------------------------

SLIDING = r"""
fn render(ctx) {
    let messages = [];
    let results = [];
    for e in ctx.entries {
        if e.kind == "tool_result" {
            results.push(#{ tool_call_id: e.tool_call_id, content: e.content, is_error: e.is_error });
            continue;
        }
        if results.len() > 0 { messages.push(#{ role: "user", tool_results: results }); results = []; }
        if e.kind == "assistant_turn" && e.tool_calls.len() > 0 {
            messages.push(#{ role: "assistant", content: e.content, tool_calls: e.tool_calls });
        } else if e.kind == "assistant_turn" {
            messages.push(#{ role: "assistant", content: e.content });
        } else {
            messages.push(#{ role: "user", content: e.content });
        }
    }
    if results.len() > 0 { messages.push(#{ role: "user", tool_results: results }); }
    #{ messages: messages }
}
"""


def test_sliding_window_recreated_with_typed_messages_is_exact(pooled: Pooled) -> None:
    """ "sliding_window: ... a render emitting typed messages. Exact": the request equals the built-in's."""
    calls = (ToolCall("c1", "shell", {"command": "ls"}), ToolCall("c2", "read", {}, "sig"))
    entries = [
        Entry("what is here?", 5, "user_message"),
        Entry("Let me look.", 5, "assistant_turn", tool_calls=calls),
        Entry("a.py", 5, "tool_result", tool_call_id="c1", tool_name="shell"),
        Entry("denied", 5, "tool_result", tool_call_id="c2", tool_name="read", is_error=True),
        Entry("Two files.", 5, "assistant_turn"),
        Entry("and a.py?", 5, "user_message"),
    ]
    custom = pooled.region(SLIDING, name="conversation")
    for entry in entries:
        assert pooled.run(custom.write_entry(entry)).outcome == "accepted"
    builtin = BuiltinRegion("conversation", "sliding_window", list(entries))
    scripted, reports = pooled.run(Window(2000, [custom]).assemble())
    native, _ = pooled.run(Window(2000, [builtin]).assemble())
    assert not reports[0].fallback
    assert scripted.to_json() == native.to_json() and len(native.messages) == 5


def test_keyed_writes_are_not_upserted(pooled: Pooled) -> None:
    """ "hashmap: not recreatable. Keyed upsert is built-in only":
    a second write with the same key appends."""
    region = pooled.region('fn render(ctx) { ctx.entries.map(|e| `${e.key}=${e.content}`).join(";") }')
    pooled.run(region.write("v1", 2, key="k"))
    pooled.run(region.write("v2", 2, key="k"))
    assert [b.text for b in pooled.run(region.render()).system] == ["k=v1;k=v2"]


def test_pinned_recreated_with_persistent_join(pooled: Pooled) -> None:
    """ "pinned: persistent = true with a render that joins entries":
    same text and cache hint, never evicted."""
    source = 'fn render(ctx) { ctx.entries.map(|e| e.content).join("\\n\\n") }'
    custom = pooled.region(source, name="system", persistent=True)
    builtin = BuiltinRegion("system", "pinned", [Entry("rule one", 30), Entry("rule two", 30)])
    for entry in builtin.entries:
        pooled.run(custom.write_entry(entry))
    scripted, _ = pooled.run(Window(1000, [custom]).assemble())
    native, _ = pooled.run(Window(1000, [builtin]).assemble())
    assert [(b.text, b.cache_hint) for b in scripted.system] == [
        (b.text, b.cache_hint) for b in native.system
    ]
    with_scratch = Window(80, [custom, BuiltinRegion("scratch", "temporary", [Entry("t", 10)])])
    result = pooled.run(with_scratch.try_evict(10))
    assert "system" not in result.dropped and _contents(custom.entries) == ["rule one", "rule two"]


# -- "a script with a bug in it cannot produce a request the provider will refuse" ---------------------------


def test_entries_split_from_their_turn_never_reach_the_provider_unpaired(pooled: Pooled) -> None:
    """A retention bug that drops a turn but keeps its result (or the reverse) still sends a valid request."""
    region = pooled.region(SLIDING + "fn on_overflow(ctx) { [1, 4] }", name="conversation")
    calls = (ToolCall("c1", "shell", {}),)
    for entry in (
        Entry("go", 5, "user_message"),
        Entry("", 5, "assistant_turn", tool_calls=calls),  # dropped: its result c1 is now an orphan
        Entry("out1", 5, "tool_result", tool_call_id="c1"),
        Entry("checking", 5, "assistant_turn", tool_calls=(ToolCall("c2", "read", {}),)),
        Entry("out2", 5, "tool_result", tool_call_id="c2"),  # dropped: tool use c2 is now an orphan
    ):
        pooled.run(region.write_entry(entry))
    window = Window(30, [region])
    assert pooled.run(window.try_evict(10)).freed == 10
    request, _ = pooled.run(window.assemble())
    blocks = [b for m in request.messages if m.is_blocks for b in m.content]  # type: ignore[union-attr]
    assert [b["type"] for b in blocks] == ["text"]
    assert [m.to_json() for m in request.messages] == [
        {"role": "user", "content": "go", "cache_breakpoint": True},
        {"role": "assistant", "content": [{"type": "text", "text": "checking"}]},
        {"role": "user", "content": "Continue."},
    ]


def test_on_overflow_mutating_ctx_changes_nothing_but_its_answer(pooled: Pooled) -> None:
    """ "mutating ctx does nothing":
    clearing ctx.entries inside on_overflow neither drops nor hides entries."""
    source = 'fn render(ctx) { ctx.entries.map(|e| e.content).join(",") }\n'
    region = pooled.region(source + "fn on_overflow(ctx) { ctx.entries.clear(); ctx.needed_tokens = 0; [1] }")
    for content in ("a", "b", "c"):
        pooled.run(region.write(content, 10))
    assert pooled.run(region.render()).system[0].text == "a,b,c"
    report = pooled.run(region.evict(5))
    assert _contents(report.dropped) == ["b"] and pooled.run(region.render()).system[0].text == "a,c"


def test_render_sees_the_seeds_ctx_for_a_live_inference(pooled: Pooled) -> None:
    """The seed's render ctx: region numbers before the call, key null, window totals of the whole window."""
    source = """fn render(ctx) {
        let r = ctx.region; let e = ctx.entries[0];
        `${r.name}|${r.budget}|${r.current_tokens}|${r.entry_count}|${e.key == ()}|${e.tokens}|`
        + `${ctx.stage_name}|${ctx.stage_iterations}|${ctx.model}|`
        + `${ctx.window.total_tokens}|${ctx.window.max_tokens}`
    }"""
    region = pooled.region(source, budget=80_000)
    for _ in range(7):
        pooled.run(region.write("x", 12))
    other = BuiltinRegion("notes", "temporary", [Entry("n", 100)])
    meta = RenderMeta("plan", 2, "claude-x", 9000, 200_000)
    assert (
        pooled.run(region.render(meta)).system[0].text
        == "brain|80000|84|7|true|12|plan|2|claude-x|9000|200000"
    )
    request, _ = pooled.run(Window(200_000, [region, other]).assemble(stage_name="plan", stage_iterations=2))
    assert [b.text for b in request.system] == [
        "brain|80000|84|7|true|12|plan|2||184|200000",
        "[notes]:\nn",
    ]


def test_a_closed_pool_surfaces_from_assemble_as_itself(tmp_path: Path) -> None:
    """Hook failures are fallbacks; a pool-level error (here: closed) reaches the caller unwrapped."""
    script = tmp_path / "r.rhai"
    script.write_text('fn render(ctx) { "x" }', encoding="utf-8")

    async def scenario() -> None:
        async with Pool(workers=1, spares=0) as pool:
            window = Window(1000, [await open_region(pool, "brain", str(script), budget=100)])
            request, _ = await window.assemble(stage_name="s", model="m")
            assert request.system and request.system[0].text == "x"
        with pytest.raises(PoolClosed):
            await window.assemble(stage_name="s", model="m")

    run(scenario())
