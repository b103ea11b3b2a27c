"""Write the region oracle scenarios (every edge of docs/scripts/regions.md) into ``scenarios/``:
``<name>.rhai`` and ``<name>.scenario.json`` (docs/scripts/scenarios.md#the-file format).  The
``<name>.reference.json`` files beside them are the reference runtime's measured output; regenerate them with
the oracle (``docs/differences.md``, "How to rerun")."""

import json
import os
import sys

OUT = (
    sys.argv[1]
    if len(sys.argv) > 1
    else os.path.join(os.path.dirname(os.path.abspath(__file__)), "scenarios")
)
os.makedirs(OUT, exist_ok=True)
META = {
    "stage_name": "plan",
    "stage_iterations": 2,
    "model": "m1",
    "window": {"total_tokens": 50, "max_tokens": 2000},
}
ALL = {}


def W(content, tokens=10, **kw):
    d = {"content": content, "tokens": tokens}
    d.update(kw)
    return {"write": d}


def P(content, tokens=None):
    d = {"content": content}
    if tokens is not None:
        d["tokens"] = tokens
    return {"replace": d}


R = {"render": {}}


def E(n):
    return {"evict": {"needed_tokens": n}}


def S(name, script, steps, budget=1000, **region):
    assert name not in ALL, name
    ALL[name] = (script, steps, budget, region)


RENDER = 'fn render(ctx) { "" }\n'
KEPT = [W("kept"), R]

# ---- docs/scripts/regions.md#renderctx render return values ------------------------------------------------
shapes = {
    "empty_string": '""',
    "string": '"hello"',
    "empty_map": "#{}",
    "int": "42",
    "float": "1.5",
    "bool": "true",
    "array": "[1, 2]",
    "unit": "()",
    "sys_string": '#{ system: "solo", messages: () }',
    "sys_array": '#{ system: ["s1", "", "s2"] }',
    "sys_int": "#{ system: 42 }",
    "sys_array_int": "#{ system: [1] }",
    "sys_array_unit": '#{ system: ["a", ()] }',
    "sys_null": "#{ system: () }",
    "other_keys": '#{ extra: 1, system: "x" }',
    "sys_empty_string": '#{ system: "" }',
    "sys_map": "#{ system: #{} }",
    "msgs_string": '#{ messages: "not an array" }',
    "msgs_int_item": "#{ messages: [42] }",
    "msgs_map": "#{ messages: #{} }",
    "msgs_empty": "#{ messages: [] }",
    "msg_no_role": '#{ messages: [ #{ content: "x" } ] }',
    "msg_role_system": '#{ messages: [ #{ role: "system", content: "x" } ] }',
    "msg_role_int": '#{ messages: [ #{ role: 1, content: "x" } ] }',
    "msg_role_upper": '#{ messages: [ #{ role: "User", content: "x" } ] }',
    "msg_content_int": '#{ messages: [ #{ role: "user", content: 42 } ] }',
    "msg_content_missing": '#{ messages: [ #{ role: "user" } ] }',
    "msg_content_unit": '#{ messages: [ #{ role: "user", content: () } ] }',
    "msg_content_blank": '#{ messages: [ #{ role: "user", content: "  " }, #{ role: "user", content: "q" } ] }',
    "msg_user_tool_calls_empty": '#{ messages: [ #{ role: "user", content: "x", tool_calls: [] } ] }',
    "msg_tool_calls_unit": '#{ messages: [ #{ role: "assistant", content: "x", tool_calls: () } ] }',
    "msg_tool_calls_int": '#{ messages: [ #{ role: "assistant", tool_calls: 42 } ] }',
    "msg_tool_calls_item_int": '#{ messages: [ #{ role: "assistant", tool_calls: [42] } ] }',
    "msg_call_no_id": '#{ messages: [ #{ role: "assistant", tool_calls: [ #{ name: "n" } ] } ] }',
    "msg_call_no_name": '#{ messages: [ #{ role: "assistant", tool_calls: [ #{ id: "c" } ] } ] }',
    "msg_call_id_int": '#{ messages: [ #{ role: "assistant", tool_calls: [ #{ id: 1, name: "n" } ] } ] }',
    "msg_tool_calls_empty": '#{ messages: [ #{ role: "user", content: "q" }, #{ role: "assistant", content: "a", tool_calls: [] } ] }',
    "msg_tool_calls_empty_notext": '#{ messages: [ #{ role: "user", content: "q" }, #{ role: "assistant", tool_calls: [] } ] }',
    "msg_call_defaults": '#{ messages: [ #{ role: "assistant", content: "", tool_calls: [ #{ id: "c", name: "n" } ] }, #{ role: "user", tool_results: [ #{ tool_call_id: "c", content: "r" } ] } ] }',
    "msg_call_args_unit": '#{ messages: [ #{ role: "assistant", tool_calls: [ #{ id: "c", name: "n", arguments: () } ] }, #{ role: "user", tool_results: [ #{ tool_call_id: "c", content: "r" } ] } ] }',
    "msg_call_args_scalar": '#{ messages: [ #{ role: "assistant", tool_calls: [ #{ id: "c", name: "n", arguments: [1, "two", 3.5, true] } ] }, #{ role: "user", tool_results: [ #{ tool_call_id: "c", content: "r" } ] } ] }',
    "msg_call_sig": '#{ messages: [ #{ role: "assistant", content: "t", tool_calls: [ #{ id: "c", name: "n", thought_signature: "sig123" }, #{ id: "d", name: "m", thought_signature: 5 } ] }, #{ role: "user", tool_results: [ #{ tool_call_id: "c", content: "r" }, #{ tool_call_id: "d", content: "s" } ] } ] }',
    "msg_assistant_tool_results": '#{ messages: [ #{ role: "assistant", tool_results: [] } ] }',
    "msg_tool_results_int": '#{ messages: [ #{ role: "user", tool_results: 42 } ] }',
    "msg_tool_results_unit": '#{ messages: [ #{ role: "user", tool_results: () } ] }',
    "msg_tool_results_item_int": '#{ messages: [ #{ role: "user", tool_results: [42] } ] }',
    "msg_result_no_id": '#{ messages: [ #{ role: "user", tool_results: [ #{ content: "x" } ] } ] }',
    "msg_result_no_content": '#{ messages: [ #{ role: "user", tool_results: [ #{ tool_call_id: "c" } ] } ] }',
    "msg_result_content_int": '#{ messages: [ #{ role: "user", tool_results: [ #{ tool_call_id: "c", content: 1 } ] } ] }',
    "msg_result_is_error_forms": '#{ messages: [ #{ role: "assistant", tool_calls: [ #{ id: "a", name: "n" }, #{ id: "b", name: "n" }, #{ id: "c", name: "n" } ] }, #{ role: "user", content: "discarded", tool_results: [ #{ tool_call_id: "a", content: "1", is_error: true }, #{ tool_call_id: "b", content: "2", is_error: "yes" }, #{ tool_call_id: "c", content: "3" } ] } ] }',
    "msg_calls_and_results_same": '#{ messages: [ #{ role: "assistant", tool_calls: [ #{ id: "c", name: "n" } ], tool_results: 42 }, #{ role: "user", tool_results: [ #{ tool_call_id: "c", content: "r" } ] } ] }',
    "msg_orphans": '#{ messages: [ #{ role: "user", content: "hello" }, #{ role: "user", tool_results: [ #{ tool_call_id: "ghost", content: "x" } ] }, #{ role: "assistant", content: "t", tool_calls: [ #{ id: "lost", name: "n" } ] } ] }',
    "msg_only_assistant": '#{ messages: [ #{ role: "assistant", content: "a" } ] }',
    "msg_ends_assistant": '#{ messages: [ #{ role: "user", content: "q" }, #{ role: "assistant", content: "a" } ] }',
    "msg_full_rb3": '#{ system: ["s1", "", "s2"], messages: [ #{ role: "user", content: "hello" }, #{ role: "assistant", content: "thinking", tool_calls: [ #{ id: "c1", name: "shell", arguments: #{ command: "ls" } } ] }, #{ role: "user", tool_results: [ #{ tool_call_id: "c1", content: "file_a", is_error: false } ] } ] }',
    "msg_extra_keys": '#{ messages: [ #{ role: "user", content: "x", name: "bob", cache: true } ] }',
    "fn_ptr": 'Fn("render")',
    "closure": "|x| x + 1",
    "timestamp": "timestamp()",
    "map_with_fn": '#{ system: "x", f: Fn("render") }',
    "char": "'c'",
    "nested_unit_ok": '#{ system: "x", messages: [], extra: [(), #{ a: () }] }',
    "big_text": "\"x\".pad(8000, 'y')",
    "unicode": '#{ system: ["héllo ✓ 日本", "tab\\tnew\\nline"], messages: [ #{ role: "user", content: "€uro 🎉" } ] }',
}
for key, body in shapes.items():
    script = f"fn render(ctx) {{ {body} }}\n"
    S(f"render_{key}", script, [W("kept"), R])
    S(f"render_{key}_empty", script, [R])

# ---- render fallbacks & limits -------------------------------------------------------------------
fallbacks = {
    "throw": 'throw "broken"',
    "throw_map": "throw #{ code: 1 }",
    "loop": "loop {}",
    "op_limit_over": 'let x = 0; loop { x += 1; if x > 200000 { break; } } "done"',
    "op_limit_under": "let x = 0; loop { x += 1; if x > 5000 { break; } } `${x}`",
    "recursion": "f(0)",
    "missing_fn": "no_such_function(1)",
    "index_oob": "let a = [1]; a[5]",
    "type_mismatch": '1 + "a" - 2',
    "string_cap": "let s = \"\"; s.pad(1000001, 'x'); s",
    "string_cap_ok": "let s = \"\"; s.pad(999999, 'x'); `${s.len()}`",
    "array_cap": "let a = []; for i in 0..10001 { a.push(i); } `${a.len()}`",
    "array_cap_ok": "let a = []; for i in 0..10000 { a.push(i); } `${a.len()}`",
    "map_cap": "let m = #{}; for i in 0..10001 { m[`k${i}`] = i; } `${m.len()}`",
    "http_get": 'http_get("http://x")',
    "parse_json": 'parse_json("{}")',
    "env_var": 'env_var("HOME")',
    "to_json_fn": "to_json(#{a: 1})",
    "missing_prop": 'if ctx.nope == () { "unit" } else { "x" }',
    "print_debug": 'print("hello"); debug("world"); "ok"',
    "mutate_ctx": 'ctx.region.name = "other"; ctx.entries.clear(); `${ctx.region.name}`',
    "div_zero": "1 / 0",
    "depth_ok": "let x = 1; f2(60)",
    "depth_over": "f2(70)",
    "import_dead_branch": 'if false { import "m" as m; } "rendered"',
    "import_executed": 'import "m" as m; "x"',
    "sleep": 'sleep(0); "slept"',
    "switch_try": 'let r = switch 2 { 1 => "one", 2 => "two", _ => "many" }; try { throw "e" } catch (err) { r += `|${err}` } r',
}
for key, body in fallbacks.items():
    script = (
        f"fn f(n) {{ f(n + 1) }}\nfn f2(n) {{ if n <= 0 {{ `depth` }} else {{ f2(n - 1) }} }}\n"
        f"fn render(ctx) {{ {body} }}\n"
    )
    S(f"render_fail_{key}", script, [W("a"), W("b"), R])
    S(f"render_fail_{key}_empty", script, [R])
S("render_import_top_level", 'import "m" as m;\nfn render(ctx) { "x" }\n', [W("kept"), R])
S("render_export_top_level", 'export const X = 1;\nfn render(ctx) { "ok" }\n', [W("kept"), R])
S("render_top_level_each_call", "let y = 5;\nfn render(ctx) { `${y}` }\n", [W("kept"), R])
S("render_top_level_throws", 'throw "top";\nfn render(ctx) { "x" }\n', [W("kept"), R])
S(
    "render_top_level_ops",
    'let x = 0; loop { x += 1; if x > 99000 { break; } }\nfn render(ctx) { let y = 0; loop { y += 1; if y > 2000 { break; } } "x" }\n',
    [W("kept"), R],
)
S(
    "render_fallback_volatility_stable",
    'fn render(ctx) { throw "x" }\n',
    [W("a"), W("b"), R],
    volatility="stable",
)
S("render_fallback_volatility_grows", "fn render(ctx) { 42 }\n", [W("a"), R], volatility="grows")
S("render_ok_volatility_stable", 'fn render(ctx) { "ok" }\n', [W("a"), R], volatility="stable")
S("render_persistent", "fn render(ctx) { `<${ctx.region.name}>` }\n", [R], persistent=True)
S("render_persistent_fallback", 'fn render(ctx) { throw "x" }\n', [W("a"), R], persistent=True)
S("render_over_budget", "fn render(ctx) { \"x\".pad(8000, 'y') }\n", [R], budget=1000)
S(
    "render_over_budget_msgs",
    'fn render(ctx) { #{ system: "abcd".pad(20, \'e\'), messages: [ #{ role: "user", content: "12345678" } ] } }\n',
    [R],
    budget=5,
)
S("render_budget_exact", "fn render(ctx) { \"abcd\".pad(40, 'e') }\n", [R], budget=10)
# An output over its budget is sent, with the reference's one warning ("exceeds its budget; sending anyway"):
# the estimate summed over system blocks, message texts, tool inputs (as JSON) and tool results.
PAD = "let s = \"\"; s.pad({n}, 'x');"
over = {
    "string": (PAD.format(n=41) + " s", 10),
    "at_budget": (PAD.format(n=40) + " s", 10),
    "system_array": (PAD.format(n=21) + " #{ system: [s, s] }", 10),
    "message": (PAD.format(n=41) + ' #{ messages: [ #{ role: "user", content: s } ] }', 10),
    "tool_input": (
        PAD.format(n=41)
        + ' #{ messages: [ #{ role: "assistant", tool_calls: [ #{ id: "c", name: "n", arguments: #{ a: s } } ] } ] }',
        10,
    ),
    "tool_result": (
        PAD.format(n=41)
        + ' #{ messages: [ #{ role: "user", tool_results: [ #{ tool_call_id: "c", content: s } ] } ] }',
        10,
    ),
    "zero_budget": ('"abcde"', 0),
    "big": (PAD.format(n=4001) + " s", 1000),
}
for key, (body, budget) in over.items():
    S(f"render_budget_sent_{key}", f"fn render(ctx) {{ {body} }}\n", [W("kept"), R], budget=budget)
    S(f"render_budget_sent_{key}_empty", f"fn render(ctx) {{ {body} }}\n", [R], budget=budget)
S(
    "render_budget_sent_twice",
    f"fn render(ctx) {{ {PAD.format(n=41)} s }}\n",
    [W("a"), R, R, W("b"), R],
    budget=10,
)
S(
    "render_budget_sent_persistent",
    f"fn render(ctx) {{ {PAD.format(n=41)} s }}\n",
    [W("a"), R],
    budget=10,
    persistent=True,
)

# ---- docs/scripts/regions.md#renderctx ctx shapes ----------------------------------------------------------
CTX_RENDER = r"""fn show(v) { `${type_of(v)}:${v}` }
fn render(ctx) {
    let out = [];
    out.push(`keys=${ctx.keys()}`);
    out.push(`region=${ctx.region.keys()}|${ctx.region.name}|${ctx.region.budget}|${ctx.region.current_tokens}|${ctx.region.entry_count}`);
    out.push(`meta=${show(ctx.stage_name)}|${show(ctx.stage_iterations)}|${show(ctx.model)}|${ctx.window.keys()}|${ctx.window.total_tokens}|${ctx.window.max_tokens}`);
    for e in ctx.entries {
        let k = e.keys(); k.remove(k.index_of("timestamp"));
        out.push(`entry=${k}|${show(e.content)}|${show(e.tokens)}|${show(e.key)}|${e.kind}|${type_of(e.timestamp)}`);
        if e.kind == "assistant_turn" { for c in e.tool_calls { out.push(`call=${c.keys()}|${c.id}|${c.name}|${type_of(c.arguments)}|${c.arguments}|${c.thought_signature}`); } }
        if e.kind == "tool_result" { out.push(`result=${show(e.tool_call_id)}|${show(e.tool_name)}|${show(e.is_error)}`); }
    }
    out
}
"""
CTX_STEPS = [
    W("plain"),
    W("keyed", 3, key="k"),
    W("user", 4, kind="user_message"),
    W(
        "",
        5,
        kind="assistant_turn",
        tool_calls=[
            {
                "id": "c1",
                "name": "shell",
                "arguments": {
                    "command": "ls",
                    "n": 2,
                    "f": 1.5,
                    "big": 18446744073709551615,
                    "neg": -3,
                    "nested": [None, True, {"z": 1, "a": 2}],
                },
            },
            {"id": "c2", "name": "x", "arguments": None, "thought_signature": "sig"},
        ],
    ),
    W("", 2, kind="assistant_turn"),
    W("output", 6, kind="tool_result", tool_call_id="c1", tool_name="shell", is_error=True),
    W("ok", 1, kind="tool_result", tool_call_id="c2", tool_name="x"),
    W("tainted", 2, tainted=True),
    W("ütf8 ✓", 3),
]
S("ctx_render_shape", CTX_RENDER.replace("    out\n}", '    out.join("\\n")\n}'), [*CTX_STEPS, R])
S(
    "ctx_render_meta_override",
    "fn render(ctx) { `${ctx.stage_name}|${ctx.stage_iterations}|${ctx.model}|${ctx.window.total_tokens}|${ctx.window.max_tokens}` }\n",
    [
        R,
        {
            "render": {
                "stage_name": "",
                "stage_iterations": 0,
                "model": "",
                "window": {"total_tokens": 0, "max_tokens": 0},
            }
        },
        {"render": {"stage_name": "build", "stage_iterations": 7}},
    ],
)
S(
    "ctx_render_entry_args_roundtrip",
    'fn render(ctx) { let e = ctx.entries[0]; #{ messages: [ #{ role: "assistant", tool_calls: e.tool_calls }, #{ role: "user", tool_results: [ #{ tool_call_id: "c1", content: "r" }, #{ tool_call_id: "c2", content: "r" } ] } ] } }\n',
    [CTX_STEPS[3], R],
)
S(
    "ctx_on_write_shape",
    'fn render(ctx) { "" }\nfn on_write(ctx) { let e = ctx.entry; `${ctx.keys()}|${ctx.region}|${e.keys()}|${e.content}|${type_of(e.tokens)}:${e.tokens}|${e.kind}|${ctx.entry.key}|${ctx.window}` }\n',
    [
        W("plain"),
        W("keyed", 3, key="k"),
        W("u", 4, kind="user_message"),
        W("a", 5, kind="assistant_turn", tool_calls=[{"id": "c", "name": "n"}]),
        W("t", 6, kind="tool_result", tool_call_id="c", tool_name="n"),
        W("x", 2, tainted=True),
        W("y", 2, kind="user_message", tainted=True),
        P("rep", 7),
    ],
)
S(
    "ctx_on_overflow_shape",
    'fn render(ctx) { "" }\nfn on_overflow(ctx) { if ctx.keys() == ["entries", "needed_tokens", "region"] && ctx.needed_tokens == 7 && ctx.entries.len() == 2 && ctx.region.current_tokens == 20 && ctx.entries[1].key == "k" { [0] } else { throw `${ctx.keys()}|${ctx.needed_tokens}|${ctx.region}` } }\n',
    [W("a"), W("b", key="k"), E(7)],
    budget=20,
)
S(
    "ctx_on_overflow_write_needed",
    'fn render(ctx) { "" }\nfn on_overflow(ctx) { if ctx.needed_tokens == 25 && ctx.region.current_tokens == 90 && ctx.region.entry_count == 2 { [1] } else { throw `${ctx.needed_tokens}|${ctx.region}` } }\n',
    [W("a", 40), W("b", 50), W("c", 35)],
    budget=100,
)

# ---- docs/scripts/regions.md#on_writectx on_write ----------------------------------------------------------
ow = {
    "upper": "ctx.entry.content.to_upper()",
    "empty_string": '""',
    "true": "true",
    "unit": "()",
    "false": "false",
    "int": "42",
    "float": "1.0",
    "map": "#{ a: 1 }",
    "array": "[1]",
    "throw": 'throw "bad"',
    "fn_ptr": 'Fn("render")',
    "loop": "loop {}",
    "cjk": '"日本語"',
    "abcde": '"abcde"',
    "kind": "ctx.entry.kind",
    "both": "`${ctx.entry.kind}:${ctx.entry.content}`",
    "char": "'c'",
    "timestamp": "timestamp()",
    "map_action_reject": '#{ action: "reject", reason: "no" }',
    "big_string": "\"x\".pad(6000, 'y')",
    "drop_errors": 'if ctx.entry.content.contains("ERROR") { false } else { () }',
}
OW_STEPS = [
    W("hi", 5),
    W("orig text", 7, kind="user_message"),
    W("", 3, kind="assistant_turn", tool_calls=[{"id": "c", "name": "n"}]),
    W("res ERROR", 4, kind="tool_result", tool_call_id="c", tool_name="n", is_error=False),
    W("k", 2, key="key1"),
    W("t", 2, tainted=True),
    W("tu", 2, kind="user_message", tainted=True),
    R,
    P("e", 5),
    R,
]
for key, body in ow.items():
    S(
        f"on_write_{key}",
        f"fn render(ctx) {{ ctx.entries.map(|e| `${{e.kind}}:${{e.content}}:${{e.tokens}}:${{e.key}}`) }}\nfn on_write(ctx) {{ {body} }}\n",
        OW_STEPS,
    )
S(
    "on_write_replace_keeps_existing_when_dropped",
    'fn render(ctx) { "" }\nfn on_write(ctx) { if ctx.entry.content == "new" { false } else { () } }\n',
    [W("old", 5), P("new", 5), R],
)
S("on_write_replace_oversize", RENDER + "fn on_write(ctx) { () }\n", [W("old", 5), P("huge", 50)], budget=20)
S(
    "on_write_replace_oversize_rewritten",
    RENDER + "fn on_write(ctx) { \"x\".pad(200, 'y') }\n",
    [W("old", 5), P("small", 2)],
    budget=20,
)
S(
    "on_write_then_budget",
    RENDER + "fn on_write(ctx) { \"x\".pad(100, 'y') }\n",
    [W("a", 1), W("b", 1)],
    budget=40,
)
S("on_write_shrinks_to_fit", RENDER + 'fn on_write(ctx) { "ok" }\n', [W("a", 500)], budget=10)
S("replace_plain", RENDER, [W("a"), W("b"), P("c", 4), R, P("d")])
S("replace_empty_region", RENDER, [P("c", 4)])
S("replace_reject_region", RENDER, [W("a", 60), P("c", 70), P("d", 200)], budget=100, admission="reject")

# ---- docs/scripts/regions.md#on_overflowctx on_overflow, path A (write time) -------------------------------
ovf = {
    "dedupe": "[2, 0, 2]",
    "empty": "[]",
    "float": "[1.0]",
    "negative": "[-1]",
    "string": '["x"]',
    "unit_item": "[()]",
    "oob": "[99]",
    "oob_mixed": "[0, 3]",
    "not_array": '"not an array"',
    "map": "#{ a: 0 }",
    "unit": "()",
    "int": "0",
    "throw": 'throw "no"',
    "loop": "loop {}",
    "all": "[0, 1, 2]",
    "last": "[2]",
    "bool_item": "[true]",
    "big_index": "[9223372036854775807]",
}
for key, body in ovf.items():
    S(
        f"on_overflow_write_{key}",
        f"{RENDER}fn on_overflow(ctx) {{ {body} }}\n",
        [W("a"), W("b"), W("c"), W("next", 15), R],
        budget=30,
    )
    S(
        f"on_overflow_evict_{key}",
        f"{RENDER}fn on_overflow(ctx) {{ {body} }}\n",
        [W("a"), W("b"), W("c"), E(15), R],
        budget=30,
    )
S("write_no_hook_error", RENDER, [W("big", 90), W("more", 50)], budget=100)
S("write_hook_not_enough", RENDER + "fn on_overflow(ctx) { [] }\n", [W("big", 90), W("more", 50)], budget=100)
S(
    "write_hook_partial_drop_stays",
    RENDER + "fn on_overflow(ctx) { [0] }\n",
    [W("a", 30), W("b", 60), W("more", 50)],
    budget=100,
)
S("write_retry_succeeds", RENDER + "fn on_overflow(ctx) { [0] }\n", [W("big", 90), W("next", 20)], budget=100)
S(
    "write_entry_alone_too_big",
    RENDER + "fn on_overflow(ctx) { [0] }\n",
    [W("a", 10), W("huge", 150)],
    budget=100,
)
S("write_entry_alone_too_big_empty", RENDER + "fn on_overflow(ctx) { [] }\n", [W("huge", 150)], budget=100)
S("write_exact_budget", RENDER, [W("a", 60), W("b", 40), W("c", 0), W("d", 1)], budget=100)
S(
    "write_persistent_overflow",
    RENDER + "fn on_overflow(ctx) { [0] }\n",
    [W("big", 90), W("next", 20)],
    budget=100,
    persistent=True,
)
S("write_zero_budget", RENDER, [W("a", 0), W("b", 1)], budget=0)
S(
    "write_reject_full",
    RENDER + "fn on_overflow(ctx) { [0] }\n",
    [W("held", 60), W("incoming", 60), W("fits", 40)],
    budget=100,
    admission="reject",
)
S("write_reject_empty_too_big", RENDER, [W("x", 120)], budget=100, admission="reject")
S(
    "write_reject_evict",
    RENDER + "fn on_overflow(ctx) { [0] }\n",
    [W("a", 50), W("b", 40), E(30)],
    budget=100,
    admission="reject",
)
S(
    "write_default_tokens",
    RENDER,
    [{"write": {"content": "abcde"}}, {"write": {"content": "日"}}, {"write": {"content": ""}}, R],
)

# ---- docs/scripts/regions.md#on_overflowctx (window eviction) ----------------------------------------------
S(
    "evict_retention",
    RENDER
    + 'fn on_overflow(ctx) { let d = []; for (e, i) in ctx.entries { if !e.content.contains("ERROR") { d.push(i) } } d }\n',
    [W("ok one", 30), W("ERROR two", 30), W("ok three", 30), E(40), R],
    budget=100,
)
S(
    "evict_empty_answer_oldest",
    RENDER + "fn on_overflow(ctx) { [] }\n",
    [W("old", 40), W("new", 40), E(30)],
    budget=100,
)
S("evict_no_hook_oldest", RENDER, [W("old", 40), W("new", 40), E(30)], budget=100)
S(
    "evict_hook_not_enough_then_oldest",
    RENDER + "fn on_overflow(ctx) { [2] }\n",
    [W("a", 10), W("b", 10), W("c", 10), W("d", 10), E(25)],
    budget=100,
)
S(
    "evict_turn_group",
    RENDER,
    [
        W("", 5, kind="assistant_turn", tool_calls=[{"id": "c", "name": "n"}]),
        W("r1", 5, kind="tool_result", tool_call_id="c", tool_name="n"),
        W("r2", 5, kind="tool_result", tool_call_id="d", tool_name="n"),
        W("u", 5, kind="user_message"),
        E(3),
        R,
    ],
    budget=100,
)
S(
    "evict_turn_group_two",
    RENDER,
    [
        W("", 5, kind="assistant_turn"),
        W("r1", 5, kind="tool_result", tool_call_id="c", tool_name="n"),
        W("", 5, kind="assistant_turn"),
        W("r2", 5, kind="tool_result", tool_call_id="d", tool_name="n"),
        E(12),
    ],
    budget=100,
)
S(
    "evict_result_first",
    RENDER,
    [
        W("r0", 5, kind="tool_result", tool_call_id="c", tool_name="n"),
        W("r1", 5, kind="tool_result", tool_call_id="c", tool_name="n"),
        E(3),
    ],
    budget=100,
)
S(
    "evict_nothing_needed_hook",
    RENDER + "fn on_overflow(ctx) { throw `called ${ctx.needed_tokens}` }\n",
    [W("a"), W("b"), E(0)],
    budget=100,
)
S("evict_nothing_needed", RENDER, [W("a"), W("b"), E(0)], budget=100)
S("evict_more_than_held", RENDER, [W("a"), W("b"), E(500)], budget=100)
S(
    "evict_persistent",
    RENDER + "fn on_overflow(ctx) { [0] }\n",
    [W("a", 40), W("b", 40), E(10)],
    budget=100,
    persistent=True,
)
S("evict_empty_region", RENDER + 'fn on_overflow(ctx) { throw "must not run" }\n', [E(10)], budget=100)
S("evict_hook_enough", RENDER + "fn on_overflow(ctx) { [1] }\n", [W("a"), W("b"), W("c"), E(5)], budget=100)
S(
    "evict_hook_exact",
    RENDER + "fn on_overflow(ctx) { [0, 1] }\n",
    [W("a"), W("b"), W("c"), E(20)],
    budget=100,
)
S("evict_zero_token_entries", RENDER, [W("z", 0), W("a", 10), E(5)], budget=100)
S(
    "evict_needed_tokens_seen",
    RENDER + "fn on_overflow(ctx) { if ctx.needed_tokens == 15 { [0] } else { [] } }\n",
    [W("a", 20), W("b", 20), E(15)],
    budget=100,
)

# ---- docs/scripts/regions.md#helpers-a-hook-can-call region helper functions and the engine's built-ins ----
helpers = {
    "types": 'let a = [region_pinned(), region_temporary(), region_clearable(), region_sliding_window(5), region_compacting(0.5), region_custom("r.rhai", true), region_custom("s", false), region_entry("c", 3)]; a.map(|m| { let k = m.keys(); k.sort(); k.map(|x| `${x}=${m[x]}`).join(",") }).join(" | ")',
    "format": '[content_format("markdown"), content_format("json"), content_format("mermaid"), content_format("text"), content_format("weird"), content_format("")].join(",")',
    "numbers": "`${tokens_remaining(10, 20)}|${tokens_remaining(20, 5)}|${usage_ratio(0, 5)}|${usage_ratio(100, 25)}|${needs_eviction(0, 1, 0.5)}|${needs_eviction(100, 90, 0.8)}|${needs_eviction(100, 10, 0.8)}`",
    "text": '`${is_json("{}")}|${is_json("[1")}|${is_mermaid("graph TD; A-->B")}|${is_mermaid("x")}|${is_markdown("")}|${is_markdown("x")}|${is_empty("  ")}|${is_empty("a")}|${count_tokens("abcde")}|${count_tokens("")}|${count_tokens("\u65e5")}|${split("a,b,,c", ",")}|${join([1, "a", 2.5, ()], "-")}|${trim("  x ")}|${contains("abc", "b")}|${starts_with("abc", "a")}|${ends_with("abc", "bc")}`',
    "to_json_special": 'to_json(#{ s: "q\\"\\\\\\u202f\\u200b\\ufeff\\n\\t\\u0001/\\u00e9", n: 1, f: 1.5, a: [(), true], m: #{} })',
    "to_json_array": "to_json([1, 2])",
    "to_json_string": 'to_json("x")',
    "parse_json_object": 'let m = parse_json("{\\"b\\": [1, 2.5, null, \\"s\\"], \\"a\\": {\\"z\\": true}}"); `${m.a.z}|${m.b}|${type_of(m.b[2])}`',
    "parse_json_array": 'let m = parse_json("[1, 2]"); `${m}`',
    "parse_json_invalid": 'let m = parse_json("{bad"); `${m}`',
    "parse_json_scalar": 'let m = parse_json("5"); `${m}`',
    "map_to_json_method": 'let m = #{ b: 2, a: "x\u202f" }; m.to_json()',
    "sleep_float": 'sleep(0.0); "ok"',
    "timestamp_elapsed": "let t = timestamp(); `${type_of(t)}`",
    "string_methods": 'let s = "Hello, World"; `${s.to_upper()}|${s.len()}|${s.index_of("o")}|${s.sub_string(0, 5)}|${s.split(", ")}|${s.replace("l", "L")}`',
    "float_format": "`${1.0}|${0.1 + 0.2}|${1e21}|${1e-7}|${-0.0}|${10.0 / 3.0}|${1 / 3}|${2 ** 62}`",
    "int_overflow": "let x = 9223372036854775807; x + 1",
    "chars": '`${"é✓日".chars().len()}|${"é✓日".len()}|${"é✓日".bytes}`',
}
for key, body in helpers.items():
    S(f"helpers_{key}", f"fn render(ctx) {{ {body} }}\n", [W("kept"), R])

# ---- docs/scripts/regions.md#loading load ------------------------------------------------------------------
loads = {
    "syntax": "fn render(ctx) {",
    "no_render": "fn on_write(ctx) { true }",
    "render_two": 'fn render(a, b) { "" }',
    "render_zero": 'fn render() { "" }',
    "on_write_zero": RENDER + "fn on_write() { true }",
    "on_overflow_two": RENDER + "fn on_overflow(a, b) { [] }",
    "eval": 'fn render(ctx) { eval("1+1") }',
    "overload_first_bad": 'fn render(a, b) { "" }\nfn render(ctx) { "one" }',
    "overload_first_good": 'fn render(ctx) { "one" }\nfn render(a, b) { "" }',
    "private_render": 'private fn render(ctx) { "p" }',
    "empty_file": "",
    "only_comment": "// nothing",
    "import_fn": 'fn render(ctx) { import "other" as m; "x" }',
    "export": 'export const X = 1;\nfn render(ctx) { "ok" }',
    "bad_token": 'fn render(ctx) { let x = 08x; "" }',
    "unterminated": 'fn render(ctx) { "abc }',
    "reserved_word": 'fn render(ctx) { let fn = 1; "" }',
    "var_name_reserved": 'fn render(ctx) { let this = 1; "" }',
    "on_write_overload": RENDER + "fn on_write(ctx) { true }\nfn on_write() { false }",
}
for key, src in loads.items():
    S(f"load_{key}", src + "\n", [W("kept"), R])

for name, (script, steps, budget, region) in sorted(ALL.items()):
    with open(os.path.join(OUT, f"{name}.rhai"), "w", encoding="utf-8") as f:
        f.write(script)
    reg = {"name": "brain", "budget": budget, "persistent": region.pop("persistent", False)}
    reg.update(region)
    doc = {"script": f"{name}.rhai", "region": reg, "meta": META, "steps": steps}
    with open(os.path.join(OUT, f"{name}.scenario.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
print(len(ALL), "scenarios")
