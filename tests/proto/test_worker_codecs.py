"""The worker's one-pass codecs: ``encode_result`` and ``decode_plain_call`` against the messages' own."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from proto import (
    MAX_CONTAINER_LEN,
    Call,
    Cancel,
    Kind,
    Op,
    ProtocolError,
    Result,
    decode,
    encode,
)
from proto.frames import decode_plain_call, encode_result

SHA = "ab" * 32


def _deep(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = [value]
    return value


VALUES = [
    None,
    True,
    -(2**63),
    2**64 - 1,
    2**70,  # wider than 64 bits: travels as the nearest float, both ways
    1.5,
    "héllo",
    b"\x00bin",
    [],
    {},
    [1, "two", [3.0, {"k": None}]],
    {"a": {"b": [1, 2, {"c": b"x"}]}},
    _deep(1_200),  # deeper than msgpack nests: the body travels flattened
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_encode_result_is_byte_for_byte_encode_of_result(value: Any) -> None:
    fields = (7, value, 0.25, 0.125, 4096, 12, ["line 1", "line 2"])
    assert encode_result(*fields) == encode(Result(*fields))


class _Opaque:
    pass


REFUSED = [
    {1: "int key"},
    {"nested": {b"bin": 1}},
    [0] * (MAX_CONTAINER_LEN + 1),
    {"a": [_Opaque()]},
    _Opaque(),
    {1, 2},
]


@pytest.mark.parametrize("value", REFUSED, ids=range(len(REFUSED)))
def test_encode_result_refuses_what_encode_refuses_with_the_same_error(value: Any) -> None:
    with pytest.raises(ProtocolError) as ours:
        encode_result(3, value, 0.0, 0.0, 0, 0, [])
    with pytest.raises(ProtocolError) as theirs:
        encode(Result(3, value))
    assert (type(ours.value), str(ours.value)) == (type(theirs.value), str(theirs.value))


def _call(**overrides: Any) -> Call:
    fields: dict[str, Any] = {
        "id": 9, "op": Op.CALL, "kind": Kind.REGION, "sha": SHA, "fn": "f", "args": [{"x": 1}, 2],
        "timeout": 5.0, "tenant": "t", "name": "n.rhai", "source": "fn f(x) { x }", "window": 16,
    }  # fmt: skip
    return Call(**(fields | overrides))


PLAIN = [
    _call(),
    _call(timeout=None, source=None),
    _call(op=Op.STREAM, kind=Kind.PROVIDER, window=1024),
    _call(resident={"key": "k" * 16, "version": 3, "base": None, "drop": [], "entries": [[1, "a"]]}),
]


@pytest.mark.parametrize("call", PLAIN, ids=range(len(PLAIN)))
def test_decode_plain_call_reads_the_fields_decode_reads(call: Call) -> None:
    frames = encode(call)
    fields = decode_plain_call(frames)
    assert fields is not None
    assert Call(*fields) == decode(frames) == call


def _body(call: Call, **overrides: Any) -> list[bytes]:
    frame = encode(call)[0]
    body = msgpack.unpackb(frame[5:]) | overrides
    return [frame[:5] + msgpack.packb(body)]


NOT_PLAIN = {
    "another command": encode(Cancel(9)),
    "two frames": [*encode(_call()), b""],
    "wrong version": [b"RHP\x02" + encode(_call())[0][4:]],
    "truncated body": [encode(_call())[0][:-3]],
    "body not a map": [encode(_call())[0][:5] + msgpack.packb([1, 2])],
    "int timeout": _body(_call(), timeout=5),
    "bad sha": _body(_call(), sha="AB" * 32),
    "window 0": _body(_call(), window=0),
    "unknown op": _body(_call(), op="run"),
    "resident on a provider call": _body(
        _call(kind=Kind.PROVIDER),
        resident={"key": "k" * 16, "version": 1, "base": None, "drop": [], "entries": []},
    ),
}


@pytest.mark.parametrize("frames", NOT_PLAIN.values(), ids=NOT_PLAIN.keys())
def test_decode_plain_call_leaves_all_else_to_decode(frames: list[bytes]) -> None:
    assert decode_plain_call(frames) is None


ODD_FIELDS = [
    ("x" * (16 * 1024 * 1024), []),  # a scalar too big for one body
    (1, ["fine", 2]),  # an output line that is not a string
    (1, [""] * (MAX_CONTAINER_LEN + 1)),  # more lines than an array may hold
    (True, ("a", "b")),  # output as a tuple
]


@pytest.mark.parametrize(("value", "output"), ODD_FIELDS, ids=range(len(ODD_FIELDS)))
def test_encode_result_off_its_fast_path_still_matches_encode(value: Any, output: Any) -> None:
    ours: Any
    theirs: Any
    try:
        ours = encode_result(4, value, 0.0, 0.0, 0, 0, output)
    except ProtocolError as exc:
        ours = (type(exc), str(exc))
    try:
        theirs = encode(Result(4, value, output=output))
    except ProtocolError as exc:
        theirs = (type(exc), str(exc))
    assert ours == theirs


def test_encode_result_checks_every_field_not_only_the_value() -> None:
    with pytest.raises(ProtocolError) as ours:
        encode_result({1: 2}, 1, 0.0, 0.0, 0, 0, [])  # type: ignore[arg-type]
    with pytest.raises(ProtocolError) as theirs:
        encode(Result({1: 2}, 1))  # type: ignore[arg-type]
    assert str(ours.value) == str(theirs.value)
