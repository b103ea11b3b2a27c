"""`to_json` / `parse_json`, for Python and for scripts (SPEC §2.5, design note §7)."""

from __future__ import annotations

import json

import pytest

import rhai
from rhai_helpers import run


def test_to_json_format() -> None:
    value = {"b": [1, 2.0, None, True], "a": "x\u202f\u200b\ufeff/\"\\\n\x01"}
    assert rhai.to_json(value) == '{"a":"x\u202f\u200b\ufeff/\\"\\\\\\n\\u0001","b":[1,2.0,null,true]}'


def test_to_json_matches_python_dumps_except_exponents() -> None:
    value = {"z": "é", "y": [1.5, -3, {"k": None}]}
    assert rhai.to_json(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1e21, "1e21"),
        (1e16, "1e16"),
        (1e15, "1000000000000000.0"),
        (1e-7, "1e-7"),
        (1e-5, "0.00001"),
        (-2.5e-8, "-2.5e-8"),
        (123456789012345680.0, "1.2345678901234568e17"),
        (0.1, "0.1"),
        (-0.0, "-0.0"),
    ],
)
def test_floats_are_spelled_as_the_reference_spells_them(value: float, text: str) -> None:
    """SPEC §2.5: ryu's spelling (``1e21``, ``1e-7``), where Python writes ``1e+21`` and ``1e-07``."""
    assert rhai.to_json([value]) == f"[{text}]"
    assert rhai.parse_json(text) == value


def test_nan_and_inf_become_null() -> None:
    assert rhai.to_json([float("nan"), float("inf")]) == "[null,null]"


def test_blob_is_not_json() -> None:
    with pytest.raises(ValueError, match="to_json"):
        rhai.to_json({"b": b"x"})


def test_parse_json_any_top_level() -> None:
    assert rhai.parse_json("[1,2]") == [1, 2]
    assert rhai.parse_json("5") == 5
    assert rhai.parse_json('"a\\/b\\ud83d\\ude00"') == "a/b\U0001f600"
    assert rhai.parse_json("18446744073709551615") == float(18446744073709551615)
    assert rhai.parse_json("1e2") == 100.0


def test_parse_json_does_not_evaluate() -> None:
    with pytest.raises(ValueError, match="parse_json"):
        rhai.parse_json('{"a": 1 + 2}')


def test_script_to_json_escapes_invisible_characters_validly(engine: rhai.Engine) -> None:
    text = run(engine, r'to_json(#{s: "a\u202fb", n: [1, 2.0]})')
    assert text == '{"n":[1,2.0],"s":"a\u202fb"}'
    assert json.loads(text) == {"n": [1, 2.0], "s": "a\u202fb"}  # type: ignore[arg-type]
    assert run(engine, r'#{s: "\u202f"}.to_json()') == '{"s":"\u202f"}'
    assert run(engine, "to_json([1, ()])") == "[1,null]"
    assert run(engine, 'to_json("x")') == '"x"'


def test_script_parse_json(engine: rhai.Engine) -> None:
    assert run(engine, 'parse_json("[1,2]")') == [1, 2]
    assert run(engine, 'let m = parse_json("{\\"a\\": {\\"b\\": 3}}"); m.a.b') == 3
    with pytest.raises(rhai.ScriptThrow) as info:
        run(engine, 'parse_json("{\\"a\\": 1 + 2}")')
    assert str(info.value.value).startswith("parse_json:")
    assert run(engine, 'let r = (); try { parse_json("nope") } catch (e) { r = e.sub_string(0, 11) } r') == "parse_json:"


def test_script_to_json_of_function_pointer_fails(engine: rhai.Engine) -> None:
    with pytest.raises(rhai.ScriptThrow, match="to_json"):
        run(engine, "to_json(#{f: Fn(\"x\")})")


def test_pe4_to_json_invisible_characters(engine: rhai.Engine) -> None:
    text = run(engine, r'to_json(#{content:"NASDAQ:\u202fCBRS\u200b wafer\u2011scale\ufeff"})')
    assert isinstance(text, str)
    assert "\\u{" not in text
    assert json.loads(text) == {"content": "NASDAQ:\u202fCBRS\u200b wafer\u2011scale\ufeff"}
    text2 = run(engine, r'to_json([#{a:"x\u202fy"},"b\u200bc",1])')
    assert json.loads(text2) == [{"a": "x\u202fy"}, "b\u200bc", 1]  # type: ignore[arg-type]
    assert run(engine, r'parse_json(to_json([#{a:"x\u202fy"},"b\u200bc",1]))') == [{"a": "x\u202fy"}, "b\u200bc", 1]


def test_pe5_to_json_basics(engine: rhai.Engine) -> None:
    assert run(engine, "to_json(#{a:1})") == '{"a":1}'
    assert run(engine, "to_json(#{b:1,a:2})") == '{"a":2,"b":1}'
    with pytest.raises(rhai.ScriptThrow, match="to_json"):
        run(engine, "to_json(|x| x + 1)")
