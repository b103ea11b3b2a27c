"""Values between Python and Rhai (docs/scripts/host-functions.md#values-between-json-and-rhai and the
binding's own rules)."""

from __future__ import annotations

import math

import pytest
import rhai
from hypothesis import given, settings
from hypothesis import strategies as st

ECHO = rhai.Engine(max_string_size=10**7, max_array_size=10**6, max_map_size=10**6).compile("fn f(x) { x }")


def echo(value: object) -> object:
    return ECHO.call("f", value)


@pytest.mark.parametrize(
    "value", [None, True, False, 0, -1, 2**63 - 1, -(2**63), 1.5, "", "héllo\u202f", b"\x00\xff"]
)
def test_scalars_round_trip(value: object) -> None:
    out = echo(value)
    assert out == value
    assert type(out) is type(value)


def test_true_and_one_stay_apart() -> None:
    assert echo([True, 1]) == [True, 1]
    assert [type(x) for x in echo([True, 1])] == [bool, int]  # type: ignore[union-attr]


def test_tuple_becomes_list() -> None:
    assert echo((1, "a")) == [1, "a"]


def test_bytearray_and_memoryview_become_bytes() -> None:
    assert echo(bytearray(b"ab")) == b"ab"
    assert echo(memoryview(b"cd")) == b"cd"


def test_maps_come_back_key_sorted() -> None:
    out = echo({"b": 1, "a": 2, "é": 3, "A": 4})
    assert list(out) == ["A", "a", "b", "é"]  # type: ignore[call-overload]


BEYOND_I64 = [2**63, -(2**63) - 1, 2**64 - 1, 2**64, 10**30, -(10**30), 2**1023]


@pytest.mark.parametrize("value", BEYOND_I64)
def test_ints_beyond_i64_become_the_nearest_float(value: int) -> None:
    """docs/scripts/host-functions.md#values-between-json-and-rhai: the reference reads a number beyond i64 as
    a (lossy) FLOAT, both signs."""
    out = echo({"amount": value})
    assert out == {"amount": float(value)}
    assert type(out["amount"]) is float  # type: ignore[index]


def test_a_script_sees_ints_beyond_i64_as_floats() -> None:
    script = rhai.Engine().compile("fn kinds(xs) { xs.map(|x| type_of(x)) } fn half(x) { x / 2 }")
    assert script.call("kinds", [2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 10**30]) == [
        "i64",
        "f64",
        "i64",
        "f64",
        "f64",
    ]
    assert script.call("half", 10**30) == 5e29


def test_the_float_is_the_nearest_one_as_serde_json_reads_the_number() -> None:
    """What `parse_json` makes of the same digits (serde_json) is what a Python int becomes."""
    for value in BEYOND_I64:
        assert echo(value) == rhai.parse_json(str(value)), value
    assert echo(2**64 - 1) == 18446744073709551616.0  # rounds up to 2**64, like `u64 as f64`


def test_int_past_the_float_range_is_an_overflow_naming_the_path() -> None:
    with pytest.raises(OverflowError, match=r"args\[0\]\[\"amount\"\]\[1\]"):
        echo({"amount": [0, 2**1024]})
    with pytest.raises(OverflowError):
        echo(-(10**400))


def test_non_str_keys_are_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"args\[0\]\[1\].*keys must be str"):
        echo([0, {1: "x"}])


def test_unknown_objects_are_a_type_error() -> None:
    with pytest.raises(TypeError, match="set"):
        echo({1, 2})


def nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def test_no_nesting_limit_of_our_own() -> None:
    """The reference converts any depth its engine lets a script build (issue 12): so do we, both ways."""
    for depth in (64, 65, 900):  # == itself recurses in Python; test_binding_deep goes to 10 000
        assert echo(nested(depth)) == nested(depth)


def test_script_nesting_beyond_64_on_the_way_out() -> None:
    engine = rhai.Engine()
    script = engine.compile("fn f() { let a = 1; for i in 0..70 { a = [a]; } a }")
    assert script.call("f") == nested(70)


def test_char_becomes_str() -> None:
    engine = rhai.Engine()
    assert engine.compile("fn f() { 'x' }").call("f") == "x"


def test_float_specials() -> None:
    assert math.isnan(echo(float("nan")))  # type: ignore[arg-type]
    assert echo(float("inf")) == float("inf")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=5),
    max_leaves=30,
)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_round_trip_property(value: object) -> None:
    assert echo(value) == value


finite_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=5),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(finite_json_values)
def test_json_matches_python_json_module(value: object) -> None:
    import json

    text = rhai.to_json(value)
    assert json.loads(text) == value
    assert rhai.parse_json(text) == value


def test_a_bad_argument_is_named_by_its_path_of_keys_and_indices() -> None:
    with pytest.raises(TypeError) as info:
        echo({"a": 1, "k": [1, 2, {"ok": 1, 'q"': object()}]})
    assert str(info.value) == 'args[0]["k"][2]["q\\""]: cannot pass a object to a script'


def test_a_result_without_python_form_is_named_by_its_path_of_keys_and_indices() -> None:
    script = rhai.Engine().compile('fn f() { #{b: 1, a: [1, 2, #{"x y": 1..3}]} }')
    with pytest.raises(TypeError) as info:
        script.call("f")
    assert str(info.value).startswith('result["a"][2]["x y"]: a script value of type ')
    assert str(info.value).endswith(" has no Python form")
