"""Audit of the binding against its acceptance points, stubs and
docs/scripts/host-functions.md#values-between-json-and-rhai: edge cases."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import rhai

LIMITS = (
    "max_operations",
    "max_call_levels",
    "max_expr_depth",
    "max_function_expr_depth",
    "max_string_size",
    "max_array_size",
    "max_map_size",
    "max_variables",
    "max_functions",
)


def each(cb: Callable[[int], Any], n: int) -> list[Any]:
    return [cb(i) for i in range(n)]


# -- limits and keyword misuse ------------------------------------------------------------------


@pytest.mark.parametrize("name", LIMITS)
def test_negative_limit_is_a_value_error_like_zero(name: str) -> None:
    with pytest.raises(ValueError, match=name):
        rhai.Engine(**{name: -1})  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        rhai.Engine(**{name: 0})  # type: ignore[arg-type]


def test_negative_output_limit_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="output_limit"):
        rhai.Engine(output_limit=-1)
    assert rhai.Engine(output_limit=0) is not None  # 0 keeps no output: allowed


@pytest.mark.parametrize("name", (*LIMITS, "output_limit"))
def test_bool_is_not_a_limit(name: str) -> None:
    # `json_functions=1` is refused; `max_operations=True` must not quietly mean 1.
    with pytest.raises(TypeError, match=name):
        rhai.Engine(**{name: True})  # type: ignore[arg-type]


# -- operation budget is per call, callbacks included -------------------------------------------


def test_script_closure_callbacks_share_the_call_budget() -> None:
    engine = rhai.Engine(max_operations=10_000)
    engine.register_fn("each", each)
    # 50 callbacks of ~3 000 operations each: far past the 10 000 budget of the call.
    script = engine.compile("fn f() { each(|i| { let s = 0; for j in 0..1000 { s += j } s }, 50).len() }")
    with pytest.raises(rhai.TooManyOperations):
        script.call("f")


def test_script_closure_budget_cannot_be_caught_by_the_script() -> None:
    engine = rhai.Engine(max_operations=10_000)
    engine.register_fn("each", each)
    script = engine.compile(
        "fn f() { try { each(|i| { let s = 0; for j in 0..1000 { s += j } s }, 50).len() } catch { -1 } }"
    )
    with pytest.raises(rhai.TooManyOperations):
        script.call("f")


def test_operations_count_includes_callbacks() -> None:
    engine = rhai.Engine(max_operations=1_000_000)
    engine.register_fn("each", each)
    script = engine.compile("fn f() { each(|i| { let s = 0; for j in 0..100 { s += j } s }, 20).len() }")
    result = script.call_detailed("f")
    assert result.value == 20
    assert result.operations >= 20 * 100


# -- a nested Script.call is its own call; the outer limits hold again after it ---------------------


def test_a_nested_call_keeps_its_own_deadline_and_token_and_the_outer_ones_hold_after() -> None:
    """A call started in a host function is its own call (rhaipool's worker nests unrelated calls on
    one thread); the outer call's deadline and token apply again as soon as the host function returns."""
    engine = rhai.Engine(max_operations=10**15)
    inner = engine.compile("fn nap() { sleep(0.3); 1 }")
    token = rhai.CancelToken()
    seen: list[object] = []

    def nest() -> None:
        token.cancel()  # the outer call's token: not the nested call's
        seen.append(inner.call("nap", timeout=5))  # outlives the outer 0.1 s deadline: its own budget

    engine.register_fn("nest", nest)
    script = engine.compile("fn f() { nest(); loop {} }")
    with pytest.raises(rhai.Cancelled):
        script.call("f", timeout=0.1, cancel=token)
    assert seen == [1]
    seen.clear()
    with pytest.raises(rhai.DeadlineExceeded):
        script.call("f", timeout=0.1)
    assert seen == [1]


# -- errors from callbacks name the script ------------------------------------------------------


def test_callback_error_names_the_running_script() -> None:
    engine = rhai.Engine()
    seen: list[rhai.RhaiError] = []

    def grab(cb: Callable[[], Any]) -> int:
        try:
            cb()
        except rhai.RhaiError as e:
            seen.append(e)
        return 0

    engine.register_fn("grab", grab)
    engine.compile('fn f() {\n  grab(|| { throw "x" })\n}', name="s.rhai").call("f")
    (err,) = seen
    assert isinstance(err, rhai.ScriptThrow)
    assert (err.script, err.line) == ("s.rhai", 2)


# -- values ------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["a\ud800", {"k\udfff": 1}, ["ok", "\udc80"]])
def test_lone_surrogates_are_a_value_error(value: object) -> None:
    # The type (str) is supported; this value of it cannot be UTF-8.
    script = rhai.Engine().compile("fn f(x) { x }")
    with pytest.raises(ValueError, match=r"args\[0\]"):
        script.call("f", value)
    with pytest.raises(ValueError):
        rhai.to_json(value)


def test_script_closure_inside_a_map_is_callable_during_the_host_call() -> None:
    engine = rhai.Engine()
    engine.register_fn("apply", lambda m: [m["cb"](2), m["more"][0](3)])
    assert engine.compile("fn f() { apply(#{cb: |x| x * 3, more: [|x| x + 1]}) }").call("f") == [6, 4]
