"""The worker's engines: per-kind budgets, helper sets, and the exhaustive rhai error translation."""

from __future__ import annotations

import inspect

import pytest
import rhai

from proto import BROKERED, ERROR_CLASSES
from worker.engine import BUDGETS, NATIVE, Engines, ScriptFailure, translate
from worker.host_bridge import HOST_FUNCTIONS


@pytest.fixture(scope="module")
def engines() -> Engines:
    return Engines(HOST_FUNCTIONS)


def run(
    engines: Engines, kind: str, source: str, fn: str, *args: object, timeout: float | None = None
) -> object:
    compiled = engines.compile(kind, source, "t.rhai")
    return engines.run(compiled, fn, list(args), timeout, None).value


def failure(engines: Engines, kind: str, source: str, fn: str, *args: object) -> ScriptFailure:
    with pytest.raises(ScriptFailure) as info:
        run(engines, kind, source, fn, *args)
    return info.value


def test_budgets_follow_spec() -> None:
    assert BUDGETS["region"]["max_operations"] == 100_000
    assert BUDGETS["provider"]["max_operations"] == 500_000
    assert BUDGETS["region"]["max_string_size"] == 1_000_000
    assert BUDGETS["provider"]["max_array_size"] == 50_000
    assert {b["max_call_levels"] for b in BUDGETS.values()} == {64}


def test_operation_budget_differs_per_kind(engines: Engines) -> None:
    source = "fn count(n) { let i = 0; while i < n { i += 1; } i }"
    assert run(engines, "provider", source, "count", 30_000) == 30_000
    f = failure(engines, "region", source, "count", 30_000)
    assert (f.cls, f.limit, f.kind) == ("LimitExceeded", "operations", "TooManyOperations")


def test_compile_error_has_position(engines: Engines) -> None:
    with pytest.raises(ScriptFailure) as info:
        engines.compile("region", "fn f() {\n  let x = ;\n}", "bad.rhai")
    assert info.value.cls == "CompileError"
    assert info.value.line == 2 and info.value.column


def test_throw_carries_value(engines: Engines) -> None:
    f = failure(engines, "region", 'fn f() { throw #{message: "m", transient: true} }', "f")
    assert (f.cls, f.kind, f.value) == ("ScriptError", "ScriptThrow", {"message": "m", "transient": True})


def test_region_engines_get_no_host_functions(engines: Engines) -> None:
    f = failure(engines, "region", 'fn f() { http_get("http://x") }', "f")
    assert f.cls == "ScriptError" and f.kind == "FunctionNotFound"


def test_provider_host_function_outside_a_call_throws(engines: Engines) -> None:
    f = failure(engines, "provider", 'fn f() { http_get("http://x") }', "f")
    assert f.cls == "ScriptError" and f.value == "provider host channel closed"


def test_deadline_and_cancel(engines: Engines) -> None:
    compiled = engines.compile("provider", "fn f() { sleep(5); 1 }", "t")
    with pytest.raises(ScriptFailure) as info:
        engines.run(compiled, "f", [], 0.05, None)
    assert (info.value.cls, info.value.limit) == ("ScriptTimeout", "deadline")
    token = rhai.CancelToken()
    token.cancel()
    with pytest.raises(ScriptFailure) as info:
        engines.run(compiled, "f", [], None, token)
    assert info.value.cls == "Cancelled"


def test_outcome_measures_cost(engines: Engines) -> None:
    compiled = engines.compile("region", 'fn f() { print("hi"); 2 }', "t")
    outcome = engines.run(compiled, "f", [], 1.0, None)
    assert outcome.value == 2 and outcome.output == ["hi"] and outcome.ops > 0 and outcome.wall > 0


def test_every_rhai_exception_is_translated() -> None:
    """Each exception class rhai exports maps to a wire error class (httpx's exhaustive-mapping test)."""
    classes = [v for v in vars(rhai).values() if inspect.isclass(v) and issubclass(v, rhai.RhaiError)]
    assert len(classes) >= 10
    for cls in classes:
        exc = cls("message")
        if cls is rhai.ScriptThrow:
            exc.value = 1
        result = translate(exc)
        assert result.cls in ERROR_CLASSES, cls
        assert result.cls not in ("Internal", "InvalidValue"), cls


def test_host_functions_match_the_brokered_list() -> None:
    """The worker's host functions and proto's BROKERED table name the same functions and arities
    (the binding's own, ``NATIVE``, are registered from that table's signatures)."""
    for kind, table in BROKERED.items():
        assert set(HOST_FUNCTIONS[kind]) == set(table), kind
        for name, arities in table.items():
            fn = HOST_FUNCTIONS[kind][name]
            if fn is NATIVE:
                continue
            params = inspect.signature(fn).parameters.values()
            required = sum(p.default is inspect.Parameter.empty for p in params)
            assert set(range(required, len(params) + 1)) == set(arities), name
