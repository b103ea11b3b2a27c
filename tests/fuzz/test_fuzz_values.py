"""Fuzzing the binding's value converters (issue 10 point 9): any Python value passed to a script,
any value a script builds, any text given to ``parse_json`` either converts or raises one of the
documented exceptions (``TypeError``, ``ValueError``, ``OverflowError``); nothing else, and never a
crash of the process running it. Whatever comes out of the binding, the wire can carry or refuses
cleanly. Bounded: fixed example counts, no deadline.
"""

from __future__ import annotations

import json
import math
from typing import Any

import rhai
from hypothesis import given, settings
from hypothesis import strategies as st

from proto import ProtocolError
from proto.values import pack, unpack

ENGINE = rhai.Engine(max_string_size=1 << 20, max_array_size=10_000, max_map_size=10_000)
ECHO = ENGINE.compile("fn f(x) { x }")
CONVERSION_ERRORS = (TypeError, ValueError, OverflowError)


class Opaque:
    """An object the binding has no conversion for."""


# surrogates included (``st.text`` never draws them): Python can hold them, UTF-8 cannot
text = st.lists(st.characters() | st.integers(0xD800, 0xDFFF).map(chr), max_size=12).map("".join)
python_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | text
    | st.binary(max_size=12)
    | st.builds(bytearray, st.binary(max_size=4))
    | st.just(Opaque())
    | st.frozensets(st.integers(0, 3), max_size=2)
)
python_values = st.recursive(
    python_scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(text | st.integers(-3, 3) | st.none(), inner, max_size=4)
    ),
    max_leaves=16,
)


def nested(depth: int, leaf: Any) -> Any:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


def same(a: Any, b: Any) -> bool:
    """Equality where NaN equals NaN and a tuple equals its list (what conversion does to them)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, (list, tuple)) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (bytearray, memoryview)):
        return bytes(a) == b
    # beyond INT: the nearest FLOAT (docs/scripts/host-functions.md#values-between-json-and-rhai)
    if type(a) is int and not -(2**63) <= a < 2**63:
        return type(b) is float and b == float(a)
    return bool(type(a) is type(b) and a == b)


@given(python_values)
@settings(max_examples=400, deadline=None)
def test_any_python_value_into_a_script_converts_or_is_refused(value: Any) -> None:
    try:
        out = ECHO.call("f", value)
    except CONVERSION_ERRORS:
        return
    assert same(value, out), (value, out)
    try:  # what a worker would send back: carried, or refused as a protocol error
        assert same(out, unpack(pack(out)))
    except ProtocolError:
        pass


@given(python_values)
@settings(max_examples=300, deadline=None)
def test_to_json_of_any_value_is_json_or_refused(value: Any) -> None:
    try:
        encoded = rhai.to_json(value)
    except CONVERSION_ERRORS:
        return
    json.loads(encoded)  # always valid JSON text


json_text = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=12,
).map(lambda v: json.dumps(v, ensure_ascii=False, allow_nan=True))


@st.composite
def mangled_json(draw: st.DrawFn) -> str:
    doc = list(draw(json_text))
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(doc)))
        doc[at:at] = draw(
            st.sampled_from(['"', "\\", "\\u", "\\ud800", "[", "{", "}", ",", ":", "1e999", "\x00"])
        )
    return "".join(doc)


@given(mangled_json() | st.text(max_size=40))
@settings(max_examples=400, deadline=None)
def test_parse_json_of_any_text_is_a_value_or_a_value_error(document: str) -> None:
    try:
        value = rhai.parse_json(document)
    except ValueError:
        return
    assert isinstance(rhai.to_json(value), str)  # what parsed can be written back


@given(st.integers(0, 80), python_scalars)
@settings(max_examples=100, deadline=None)
def test_nesting_around_the_limit(depth: int, leaf: Any) -> None:
    try:
        ECHO.call("f", nested(depth, leaf))
    except CONVERSION_ERRORS:
        return


# Values built *inside* the engine: Rhai literals of every shape, converted on the way out.
rhai_literals = st.recursive(
    st.sampled_from(["()", "true", "false", "0", "-1", "9223372036854775807", "1.5", "-0.0", "'x'", '"s"'])
    | st.sampled_from(["blob(3, 255)", "#{}", "[]", '"\\u{1F600}"', "1.0 / 0.0", "0.0 / 0.0", 'Fn("f")'])
    | st.sampled_from(["|x| x + 1", "timestamp()", "1..3", "'a'.to_string()", "[1, 2].len()"]),
    lambda inner: (
        st.lists(inner, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]")
        | st.lists(st.tuples(st.sampled_from(["a", "b", "`c d`", '"é"']), inner), max_size=3).map(
            lambda kv: "#{" + ", ".join(f"{k}: {v}" for k, v in kv) + "}"
        )
    ),
    max_leaves=10,
)


@given(rhai_literals)
@settings(max_examples=200, deadline=None)
def test_any_value_a_script_builds_converts_or_is_refused(literal: str) -> None:
    try:
        script = ENGINE.compile(f"fn f() {{ {literal} }}")
    except rhai.CompileError:
        return
    try:
        out = script.call("f")
    except (*CONVERSION_ERRORS, rhai.RhaiError):
        return
    try:
        unpack(pack(out))
    except ProtocolError:
        pass
