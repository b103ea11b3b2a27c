"""One real script per exception class, and host exceptions crossing the engine."""

from __future__ import annotations

import pytest
import rhai
from rhai_helpers import run


def test_hierarchy() -> None:
    assert issubclass(rhai.CompileError, rhai.RhaiError)
    assert issubclass(rhai.ScriptThrow, rhai.ScriptError)
    assert issubclass(rhai.FunctionNotFound, rhai.ScriptError)
    for cls in (rhai.TooManyOperations, rhai.DataTooLarge, rhai.CallDepthExceeded, rhai.DeadlineExceeded):
        assert issubclass(cls, rhai.LimitExceeded)
    assert issubclass(rhai.DeadlineExceeded, TimeoutError)
    assert issubclass(rhai.Cancelled, rhai.RhaiError)
    assert not issubclass(rhai.Throw, rhai.RhaiError)


def test_thrown_map(engine: rhai.Engine) -> None:
    script = engine.compile(
        'fn f() {\n  throw #{message: "upstream down", transient: true, kind: "net"};\n}', name="p.rhai"
    )
    with pytest.raises(rhai.ScriptThrow) as info:
        script.call("f")
    err = info.value
    assert err.value == {"message": "upstream down", "transient": True, "kind": "net"}
    assert err.message == "upstream down"
    assert err.transient is True
    assert err.thrown_kind == "net"
    assert (err.line, err.column) == (2, 3)
    assert err.script == "p.rhai"


def test_thrown_string_and_number(engine: rhai.Engine) -> None:
    with pytest.raises(rhai.ScriptThrow) as info:
        run(engine, 'throw "bad"')
    assert info.value.value == "bad"
    assert info.value.message == "bad"
    assert info.value.transient is False
    with pytest.raises(rhai.ScriptThrow) as info2:
        run(engine, "throw 5")
    assert info2.value.value == 5


def test_error_inside_nested_function_keeps_frames(engine: rhai.Engine) -> None:
    script = engine.compile('fn inner() {\n  throw "deep"\n}\nfn outer() { inner() }', name="n.rhai")
    with pytest.raises(rhai.ScriptThrow) as info:
        script.call("outer")
    assert info.value.line == 2
    assert [f[0] for f in info.value.frames] == ["inner"]


def test_type_mismatch_is_script_error(engine: rhai.Engine) -> None:
    with pytest.raises(rhai.ScriptError) as info:
        run(engine, '1 + "a" - 3')
    assert not isinstance(info.value, rhai.ScriptThrow)


def test_calling_unknown_function_from_script(engine: rhai.Engine) -> None:
    with pytest.raises(rhai.FunctionNotFound) as info:
        run(engine, 'http_get("http://x")')
    assert "http_get" in info.value.signature


def test_host_throw_is_catchable(engine: rhai.Engine) -> None:
    def fail(kind: str) -> None:
        raise rhai.Throw({"message": "nope", "kind": kind})

    engine.register_fn("fail", fail)
    assert (
        run(engine, 'let r = (); try { fail("x"); r = 1 } catch (e) { r = e.kind + e.message } r') == "xnope"
    )
    with pytest.raises(rhai.ScriptThrow) as info:
        run(engine, 'fail("y")')
    assert info.value.value == {"message": "nope", "kind": "y"}


def test_host_exception_is_not_catchable_and_reraised_unchanged(engine: rhai.Engine) -> None:
    original = ValueError("host bug")

    def broken() -> None:
        raise original

    engine.register_fn("broken", broken)
    with pytest.raises(ValueError, match="host bug") as info:
        run(engine, "try { broken() } catch { 99 }")
    assert info.value is original
    assert any("t.rhai" in note for note in getattr(info.value, "__notes__", []))


def test_keyboard_interrupt_from_host_passes_through(engine: rhai.Engine) -> None:
    def stop() -> None:
        raise KeyboardInterrupt

    engine.register_fn("stop", stop)
    with pytest.raises(KeyboardInterrupt):
        run(engine, "try { stop() } catch { 1 }")


def test_region_engine_has_no_json_functions_re7() -> None:
    region = rhai.Engine(json_functions=False)
    for body in ['parse_json("{}")', "to_json(5)", 'env_var("HOME")']:
        with pytest.raises(rhai.FunctionNotFound):
            run(region, body)
    assert run(region, "#{b: 1, a: 2}.to_json()") == '{"a":2,"b":1}'


def test_str_includes_location(engine: rhai.Engine) -> None:
    with pytest.raises(rhai.ScriptThrow) as info:
        engine.compile('fn f() { throw "x" }', name="loc.rhai").call("f")
    assert str(info.value) == "x (loc.rhai:1:10)"
