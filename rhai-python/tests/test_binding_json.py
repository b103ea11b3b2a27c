"""`to_json` / `parse_json`, for Python and for scripts
(docs/scripts/host-functions.md#values-between-json-and-rhai, design note §7)."""

from __future__ import annotations

import json
import math
import random

import pytest
import rhai
from rhai_helpers import run


def test_to_json_format() -> None:
    value = {"b": [1, 2.0, None, True], "a": 'x\u202f\u200b\ufeff/"\\\n\x01'}
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
    """docs/scripts/host-functions.md#values-between-json-and-rhai: ryu's spelling (``1e21``, ``1e-7``), where
    Python writes ``1e+21`` and ``1e-07``."""
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


def test_integers_beyond_i64_are_floats_both_ways() -> None:
    """docs/scripts/host-functions.md#values-between-json-and-rhai: read as the nearest float, either sign; a
    Python int beyond i64 writes as that float."""
    for value in (2**63, -(2**63) - 1, 10**30, -(10**30)):
        parsed = rhai.parse_json(str(value))
        assert type(parsed) is float and parsed == float(value), value
        assert rhai.to_json(value) == rhai.to_json(float(value))
    assert rhai.to_json([2**63, -(2**63)]) == "[9.223372036854776e18,-9223372036854775808]"


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
    assert (
        run(engine, 'let r = (); try { parse_json("nope") } catch (e) { r = e.sub_string(0, 11) } r')
        == "parse_json:"
    )


def test_script_to_json_of_function_pointer_fails(engine: rhai.Engine) -> None:
    with pytest.raises(rhai.ScriptThrow, match="to_json"):
        run(engine, 'to_json(#{f: Fn("x")})')


def test_pe4_to_json_invisible_characters(engine: rhai.Engine) -> None:
    text = run(engine, r'to_json(#{content:"NASDAQ:\u202fCBRS\u200b wafer\u2011scale\ufeff"})')
    assert isinstance(text, str)
    assert "\\u{" not in text
    assert json.loads(text) == {"content": "NASDAQ:\u202fCBRS\u200b wafer\u2011scale\ufeff"}
    text2 = run(engine, r'to_json([#{a:"x\u202fy"},"b\u200bc",1])')
    assert json.loads(text2) == [{"a": "x\u202fy"}, "b\u200bc", 1]  # type: ignore[arg-type]
    assert run(engine, r'parse_json(to_json([#{a:"x\u202fy"},"b\u200bc",1]))') == [
        {"a": "x\u202fy"},
        "b\u200bc",
        1,
    ]


def test_pe5_to_json_basics(engine: rhai.Engine) -> None:
    assert run(engine, "to_json(#{a:1})") == '{"a":1}'
    assert run(engine, "to_json(#{b:1,a:2})") == '{"a":2,"b":1}'
    with pytest.raises(rhai.ScriptThrow, match="to_json"):
        run(engine, "to_json(|x| x + 1)")


def _ryu_spelling(value: float) -> str:
    """ryu's layout of the shortest round-trip digits (an oracle independent of the binding:
    the digits come from Python's ``repr``, the layout rules from ryu's ``format64``)."""
    if value == 0:
        return "-0.0" if str(value).startswith("-") else "0.0"
    sign = "-" if value < 0 else ""
    mantissa, _, exp = repr(abs(value)).partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = (whole + frac).lstrip("0")
    k = int(exp or 0) - len(frac)  # value == int(whole + frac) * 10**k
    stripped = digits.rstrip("0")
    k += len(digits) - len(stripped)
    digits, length = stripped, len(stripped)
    kk = length + k
    if k >= 0 and kk <= 16:
        text = digits + "0" * k + ".0"
    elif 0 < kk <= 16:
        text = digits[:kk] + "." + digits[kk:]
    elif -5 < kk <= 0:
        text = "0." + "0" * -kk + digits
    elif length == 1:
        text = f"{digits}e{kk - 1}"
    else:
        text = f"{digits[0]}.{digits[1:]}e{kk - 1}"
    return sign + text


EDGE_FLOATS = [
    5e-324,  # smallest subnormal
    2.225073858507201e-308,  # largest subnormal
    2.2250738585072014e-308,  # smallest normal
    1e-308,
    1.7976931348623157e308,
    1e308,
    1.5e300,
    1e-7,
    1.2e-6,
    0.000012,
    0.0001,
    0.1,
    0.3,
    1.0,
    2.0,
    100.0,
    1e15,
    9007199254740993.0,
    1e16,
    1.5e16,
    12345678901234567.0,
    1e21,
    1e22,
    -0.0,
    0.0,
    -1e-7,
    -123.456,
]


@pytest.mark.parametrize("value", EDGE_FLOATS)
def test_edge_floats_match_the_ryu_layout(value: float) -> None:
    text = rhai.to_json(value)
    assert text == _ryu_spelling(value)
    assert rhai.to_json([value, -value]) == f"[{_ryu_spelling(value)},{_ryu_spelling(-value)}]"
    assert rhai.parse_json(text) == value


def test_floats_across_the_whole_range_match_the_ryu_layout() -> None:
    """Every binary exponent, several mantissas each: subnormals up to 1e308."""
    rng = random.Random(12)
    checked = 0
    for exponent in range(-1074, 1024):
        for _ in range(4):
            value = math.ldexp(rng.random() or 0.5, exponent)
            if not math.isfinite(value) or value == 0:
                continue
            for v in (value, -value, float(round(value)) if abs(value) < 1e300 else value):
                assert rhai.to_json(v) == _ryu_spelling(v), repr(v)
                checked += 1
    assert checked > 20_000


def test_integers_as_floats_print_with_a_fraction() -> None:
    for n in [0, 1, 7, 10, 255, 10**6, 2**53, 10**15, 10**16, 10**17, 2**63]:
        assert rhai.to_json(float(n)) == _ryu_spelling(float(n))
    assert rhai.to_json(3.0) == "3.0"
    assert rhai.to_json(1e16) == "1e16"


def test_strings_are_escaped_as_serde_json_escapes_them() -> None:
    """serde_json escapes `"`, `\\` and control characters only; Python's json does the same with
    ``ensure_ascii=False`` (lowercase ``\\u00xx``), so it is the oracle for every non-float value."""
    text = "".join(chr(c) for c in range(0x80)) + "é\u2028\u2029\u202f\ufeff\U0001f600"
    assert rhai.to_json(text) == json.dumps(text, ensure_ascii=False)
    value = {"k\n\x00": [text, {"\x7f": None, "": True}], "a": -1}
    expected = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    assert rhai.to_json(value) == expected
