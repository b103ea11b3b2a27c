"""Host functions, callbacks both ways, threads and re-entrancy."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import rhai
from rhai_helpers import run


def test_register_fn_every_arity(engine: rhai.Engine) -> None:
    def http_get(url: str, headers: dict[str, Any] | None = None) -> str:
        return f"{url}|{sorted(headers or {})}"

    engine.register_fn("http_get", http_get)
    assert run(engine, 'http_get("u")') == "u|[]"
    assert run(engine, 'http_get("u", #{b: 1, a: 2})') == "u|['a', 'b']"
    with pytest.raises(rhai.FunctionNotFound):
        run(engine, 'http_get("u", #{}, 3)')


def test_varargs_register_up_to_eight(engine: rhai.Engine) -> None:
    engine.register_fn("count", lambda *a: len(a))
    assert run(engine, "count() + count(1, 2, 3, 4, 5, 6, 7, 8)") == 8


def test_stream_request_callback(engine: rhai.Engine) -> None:
    calls: list[Callable[..., Any]] = []

    def stream_request(url: str, body: str, headers: dict[str, Any], callback: Callable[[str], Any]) -> None:
        calls.append(callback)
        for chunk in ("a", "b", "c"):
            callback(chunk)

    engine.register_fn("stream_request", stream_request)
    script = engine.compile(
        'fn f() { let seen = []; stream_request("u", "{}", #{}, |c| { seen.push(c.to_upper()); }); seen }'
    )
    assert script.call("f") == ["A", "B", "C"]
    assert isinstance(calls[0], rhai.Callback)
    with pytest.raises(RuntimeError, match="after its host call"):
        calls[0]("late")


def test_callback_return_value_and_throw(engine: rhai.Engine) -> None:
    def apply(cb: Callable[[int], Any], x: int) -> Any:
        return cb(x)

    engine.register_fn("apply", apply)
    assert run(engine, "apply(|x| x * 2, 21)") == 42
    # A throw inside the closure that the host lets escape reaches the script unchanged.
    assert run(engine, "let r = (); try { apply(|x| throw #{k: x}, 5) } catch (e) { r = e.k } r") == 5


def test_callback_limit_errors_are_not_swallowed() -> None:
    engine = rhai.Engine(max_operations=10**15)

    def apply(cb: Callable[[], Any]) -> Any:
        try:
            return cb()
        except rhai.DeadlineExceeded:
            return "host swallowed"

    engine.register_fn("apply", apply)
    # Even if the host swallows it, the deadline is re-checked when the host returns.
    with pytest.raises(rhai.DeadlineExceeded):
        run(engine, "try { apply(|| { loop {} }) } catch { 0 }", timeout=0.2)


def test_python_callable_as_fn_pointer(engine: rhai.Engine) -> None:
    chunks: list[Any] = []
    script = engine.compile(
        'fn stream(req, on_chunk) { on_chunk.call(#{delta: req}); call(on_chunk, "x"); 1 }'
    )
    assert script.call("stream", "hi", chunks.append) == 1
    assert chunks == [{"delta": "hi"}, "x"]


def test_python_callable_in_array_map(engine: rhai.Engine) -> None:
    script = engine.compile("fn f(xs, g) { xs.map(g) }")
    assert script.call("f", [1, 2], lambda x: x + 10) == [11, 12]


def test_python_callable_method_style_gets_map_first(engine: rhai.Engine) -> None:
    seen: list[Any] = []
    script = engine.compile("fn f(g) { let ctx = #{emit: g}; ctx.emit(5); 0 }")
    script.call("f", lambda *a: seen.append(a))
    assert seen and seen[0][-1] == 5


def test_python_callable_returned_is_the_same_object(engine: rhai.Engine) -> None:
    def g() -> int:
        return 1

    script = engine.compile("fn f(g) { g }")
    assert script.call("f", g) is g


def test_script_fn_pointer_round_trip(engine: rhai.Engine) -> None:
    script = engine.compile('fn f() { Fn("g") } fn g(x) { x } fn h(p) { p.call(3) }')
    fp = script.call("f")
    assert isinstance(fp, rhai.FnPtr)
    assert fp.name == "g"
    assert script.call("h", fp) == 3


def test_eight_threads_one_script() -> None:
    engine = rhai.Engine(max_operations=10**9)
    script = engine.compile("fn f(n) { let s = 0; for i in 0..n { s += i } s }")
    results: dict[int, object] = {}
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            for _ in range(5):
                results[k] = script.call("f", 20_000 + k, timeout=30)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert results == {k: sum(range(20_000 + k)) for k in range(8)}


def test_gil_is_released_while_a_script_runs() -> None:
    engine = rhai.Engine(max_operations=10**15)
    script = engine.compile("fn f() { loop {} }")
    ticks = 0
    stop = threading.Event()

    def python_work() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1

    t = threading.Thread(target=python_work)
    t.start()
    with pytest.raises(rhai.DeadlineExceeded):
        script.call("f", timeout=0.3)
    stop.set()
    t.join()
    assert ticks > 10_000


def test_reentrancy_is_bounded(engine: rhai.Engine) -> None:
    holder: dict[str, rhai.Script] = {}

    def again(n: int) -> Any:
        return holder["s"].call("f", n + 1)

    engine.register_fn("again", again)
    holder["s"] = engine.compile("fn f(n) { if n >= 10 { n } else { again(n) } }")
    with pytest.raises(RuntimeError, match="deeper than 4"):
        holder["s"].call("f", 0)
    assert holder["s"].call("f", 8) == 10


def test_current_call_remaining_inside_host(engine: rhai.Engine) -> None:
    seen: list[float | None] = []
    engine.register_fn("probe", lambda: seen.append(rhai.current_call_remaining()))
    run(engine, "probe()", timeout=2.0)
    assert seen[0] is not None and 1.5 < seen[0] <= 2.0
    assert rhai.current_call_remaining() is None


def test_typed_registration_shadows_the_standard_library(engine: rhai.Engine) -> None:
    # Rhai's own `trim` trims in place and returns (); a typed host `trim` wins.
    assert run(engine, 'trim("  a  ")') is None
    engine.register_fn("trim", lambda s: s.strip(), types=["string"])
    assert run(engine, 'trim("  a  ")') == "a"
    with pytest.raises(rhai.FunctionNotFound):
        run(engine, "trim(5)")


def test_typed_overloads_coexist(engine: rhai.Engine) -> None:
    engine.register_fn("kind", lambda _: "s", types=["string"])
    engine.register_fn("kind", lambda _: "i", types=["int"])
    engine.register_fn("kind", lambda _: "m", types=["map"])
    assert run(engine, 'kind("x") + kind(1) + kind(#{})') == "sim"


def test_a_fnptr_parameter_takes_closures_and_refuses_other_values(engine: rhai.Engine) -> None:
    engine.register_fn("twice", lambda f, x: f(f(x)), types=["fnptr", "int"])
    assert run(engine, "twice(|v| v * 3, 2)") == 18
    script = engine.compile('fn inc(v) { v + 1 }\nfn main() { twice(Fn("inc"), 2) }', name="t.rhai")
    assert script.call("main") == 4
    with pytest.raises(rhai.FunctionNotFound):
        run(engine, 'twice("not a function", 2)')


def test_unknown_type_name_is_refused(engine: rhai.Engine) -> None:
    with pytest.raises(ValueError, match="unknown parameter type"):
        engine.register_fn("f", lambda x: x, types=["strng"])


def test_method_style_host_call_leaves_the_receiver_intact(engine: rhai.Engine) -> None:
    engine.register_fn("shout", lambda s: s.upper(), types=["string"])
    engine.register_fn("size", lambda m: len(m))
    assert run(engine, 'let s = "abc"; let t = s.shout(); s + t') == "abcABC"
    assert run(engine, "let m = #{a: 1}; let n = m.size(); m.a + n") == 2
