"""Engine construction, compile, function listing, calls and top-level semantics."""

from __future__ import annotations

import pytest
import rhai
from rhai_helpers import run


def test_every_limit_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        rhai.Engine(1000)  # type: ignore[misc]


@pytest.mark.parametrize(
    "limit",
    [
        "max_operations",
        "max_call_levels",
        "max_expr_depth",
        "max_function_expr_depth",
        "max_string_size",
        "max_array_size",
        "max_map_size",
        "max_variables",
        "max_functions",
    ],
)
def test_zero_limit_is_refused(limit: str) -> None:
    with pytest.raises(ValueError, match="positive"):
        rhai.Engine(**{limit: 0})


def test_functions_lists_public_script_functions(engine: rhai.Engine) -> None:
    src = "fn render(ctx) { 1 } fn on_write(e) { e } private fn helper(a, b) { 0 } fn render(a, b) { 2 }"
    script = engine.compile(src, name="r.rhai")
    assert script.functions == [("on_write", 1), ("render", 1), ("render", 2)]
    assert script.has_function("render", 1)
    assert script.has_function("render", 2)
    assert not script.has_function("helper", 2)
    assert not script.has_function("render", 3)
    assert script.name == "r.rhai"


def test_private_and_missing_functions_are_not_callable(engine: rhai.Engine) -> None:
    script = engine.compile("private fn hidden() { 1 } fn shown() { 2 }")
    with pytest.raises(rhai.FunctionNotFound):
        script.call("hidden")
    with pytest.raises(rhai.FunctionNotFound):
        script.call("shown", 1)
    assert script.call("shown") == 2


def test_top_level_statements_run_before_each_call(engine: rhai.Engine) -> None:
    script = engine.compile('const GREETING = "hi"; print("top"); fn f() { global::GREETING }')
    for _ in range(3):
        result = script.call_detailed("f")
        assert result.value == "hi"
        assert result.output == ["top"]


def test_no_state_survives_between_calls(engine: rhai.Engine) -> None:
    script = engine.compile("let counter = 0; fn bump(m) { m.n += 1; m }")
    assert script.call("bump", {"n": 1}) == {"n": 2}
    assert script.call("bump", {"n": 1}) == {"n": 2}


def test_eval_rejected_at_compile_time(engine: rhai.Engine) -> None:
    with pytest.raises(rhai.CompileError) as info:
        engine.compile('fn f() { eval("1 + 1") }', name="bad.rhai")
    assert info.value.script == "bad.rhai"
    assert info.value.line == 1


def test_import_compiles_and_fails_at_run_time_as_module_not_found(engine: rhai.Engine) -> None:
    script = engine.compile('fn f() { 1 } fn g() { import "other" as m; 2 } export const X = 1;')
    assert script.call("f") == 1
    with pytest.raises(rhai.RhaiError, match="Module not found: other"):
        script.call("g")


def test_compile_error_has_position(engine: rhai.Engine) -> None:
    with pytest.raises(rhai.CompileError) as info:
        engine.compile("fn f() {\n  let x = ;\n}", name="broken.rhai")
    err = info.value
    assert err.line == 2
    assert err.column is not None
    assert "broken.rhai:2" in str(err)
    assert isinstance(err, rhai.RhaiError)


def test_deeply_nested_parentheses_is_a_compile_error_and_process_lives(engine: rhai.Engine) -> None:
    src = "fn f() { " + "(" * 10_000 + "1" + ")" * 10_000 + " }"
    with pytest.raises(rhai.CompileError) as info:
        engine.compile(src)
    assert "ExprTooDeep" in (info.value.kind or "") or "deep" in info.value.message.lower()
    assert run(engine, "1 + 1") == 2


def test_print_and_debug_are_captured_per_call(engine: rhai.Engine) -> None:
    script = engine.compile('fn f(x) { print("p" + x); debug("d"); x }')
    first = script.call_detailed("f", 1)
    second = script.call_detailed("f", 2)
    assert first.output == ["p1", '"d"']
    assert second.output == ["p2", '"d"']
    assert first.value == 1
    assert first.output_truncated is False
    assert first.operations > 0
    assert first.elapsed >= 0


def test_print_capture_is_bounded() -> None:
    engine = rhai.Engine(output_limit=100)
    script = engine.compile('fn f() { for i in 0..1000 { print("0123456789") } 7 }')
    result = script.call_detailed("f", timeout=5)
    assert result.value == 7
    assert result.output_truncated is True
    assert sum(len(line) for line in result.output) <= 100
    assert len(result.output) == 10


def test_exit_returns_its_value(engine: rhai.Engine) -> None:
    assert run(engine, "exit(42); 1") == 42


def test_register_fn_after_compile_leaves_old_script_unchanged(engine: rhai.Engine) -> None:
    old = engine.compile("fn f() { later() }")
    engine.register_fn("later", lambda: "yes")
    new = engine.compile("fn f() { later() }")
    assert new.call("f") == "yes"
    with pytest.raises(rhai.FunctionNotFound):
        old.call("f")


def test_missing_map_property_reads_unit(engine: rhai.Engine) -> None:
    assert run(engine, 'let m = #{}; if m.nope == () { "unit" } else { "x" }') == "unit"


def test_version_is_exported() -> None:
    assert rhai.__version__
    assert rhai.RHAI_VERSION == "1.26.0"


def test_standard_library_has_timestamp(engine: rhai.Engine) -> None:
    assert run(engine, "let t = timestamp(); t.elapsed >= 0.0") is True
    with pytest.raises(TypeError, match="timestamp"):
        run(engine, "timestamp()")
