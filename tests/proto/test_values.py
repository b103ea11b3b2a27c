"""msgpack value encoding: allowed types only, string keys only, no extensions."""

from __future__ import annotations

import contextlib
import threading

import msgpack
import pytest

from proto import MalformedMessage, ProtocolError, TooLarge, pack, unpack
from proto.values import copy_nested


def test_bytes_travel_as_bin_and_tuples_as_arrays() -> None:
    assert pack(b"\x01") == b"\xc4\x01\x01"
    assert unpack(pack((1, 2))) == [1, 2]


@pytest.mark.parametrize(
    "data",
    [
        msgpack.packb({b"k": 1}),
        msgpack.packb({1: 2}),
        msgpack.packb(msgpack.ExtType(5, b"xx")),
        msgpack.packb(msgpack.Timestamp(1)),
        b"\xa3\xff\xfe\xfd",
        msgpack.packb(1) + b"\x00",
        b"\xc1",
        b"",
    ],
)
def test_refused(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        unpack(data)


def test_container_caps() -> None:
    with pytest.raises(TooLarge):
        unpack(b"\xdd" + (2_000_000).to_bytes(4, "big"))
    with pytest.raises(MalformedMessage):
        unpack(b"\x91" * 5000 + b"\xc0")  # nesting deeper than the unpacker's stack


def test_every_msgpack_exception_is_translated() -> None:
    """Each exception class msgpack exports is a subclass of something unpack() catches."""
    caught = (ValueError, TypeError, OverflowError, RecursionError, msgpack.UnpackException)
    for name in dir(msgpack.exceptions):
        cls = getattr(msgpack.exceptions, name)
        if isinstance(cls, type) and issubclass(cls, BaseException) and name != "PackException":
            if cls is msgpack.exceptions.BufferFull:
                continue  # streaming Unpacker only; unpackb never raises it
            assert issubclass(cls, caught), name


def _nest(depth: int, kind: str) -> object:
    value: object = "leaf"
    for i in range(depth):
        value = [value, i] if kind == "array" else {"k": value, "n": i, "e": {}}
    return value


def _depth(value: object) -> int:
    """How deep ``_nest`` went, walked without recursion (== on such values recurses in C)."""
    depth = 0
    while value != "leaf":
        value = value[0] if isinstance(value, list) else value["k"]  # type: ignore[index]
        depth += 1
    return depth


@pytest.mark.parametrize("kind", ["array", "map"])
@pytest.mark.parametrize("depth", [1, 1000, 1001, 1024, 1025, 10_000])
def test_any_depth_crosses_the_wire(kind: str, depth: int) -> None:
    data = pack(_nest(depth, kind))
    back = unpack(data)
    assert _depth(back) == depth
    inner = back
    for _ in range(depth - 1):
        inner = inner[0] if kind == "array" else inner["k"]
    assert inner == (["leaf", 0] if kind == "array" else {"k": "leaf", "n": 0, "e": {}})


def test_shallow_values_stay_plain_msgpack() -> None:
    value = _nest(1000, "array")
    assert pack(value) == msgpack.packb(value)


def _flat(nodes: list[object], code: int = 1) -> bytes:
    return msgpack.packb(msgpack.ExtType(code, msgpack.packb(nodes)))  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("nodes", "error"),
    [
        ([], MalformedMessage),
        ([[0, 2], 1], MalformedMessage),  # ends inside a container
        ([[0, 1], 1, 2], MalformedMessage),  # nodes after the end
        ([1, 2], MalformedMessage),
        ([[1, 1], 5, 1], MalformedMessage),  # non-string key
        ([[1, 1], b"k", 1], MalformedMessage),
        ([[2, 1], 1], MalformedMessage),  # unknown header
        ([[0, -1]], MalformedMessage),
        ([[0, 1, 2], 1], MalformedMessage),
        ([[0, 2_000_000]], TooLarge),
        ([{"a": 1}], ProtocolError),  # maps never appear in a flat body
    ],
)
def test_hostile_flat_bodies_are_refused(nodes: list[object], error: type[Exception]) -> None:
    with pytest.raises(error):
        unpack(_flat(nodes))


def test_only_the_flat_extension_and_only_as_the_whole_body() -> None:
    with pytest.raises(MalformedMessage):
        unpack(_flat([1], code=5))
    with pytest.raises(MalformedMessage):
        unpack(msgpack.packb([msgpack.ExtType(1, msgpack.packb([1]))]))
    inner_ext = msgpack.packb([[0, 1], msgpack.ExtType(1, msgpack.packb([1]))])
    with pytest.raises(MalformedMessage):
        unpack(msgpack.packb(msgpack.ExtType(1, inner_ext)))
    with pytest.raises(MalformedMessage):
        unpack(msgpack.packb(msgpack.ExtType(1, b"\xc1")))


def test_hostile_deep_flat_body_rebuilds_without_recursion() -> None:
    depth = 200_000
    nodes: list[object] = [[0, 1]] * depth + [None]
    value = unpack(_flat(nodes))
    for _ in range(depth):
        value = value[0]
    assert value is None


def test_copy_nested_walks_any_depth_and_applies_leaf_and_key() -> None:
    value: object = 1
    for _ in range(100_000):
        value = ({"k": value, "x": 2.5},)
    out = copy_nested(value, lambda v: v * 2, str.upper, sort_keys=True)
    for _ in range(100_000):
        assert isinstance(out, list) and list(out[0]) == ["K", "X"] and out[0]["X"] == 5.0
        out = out[0]["K"]
    assert out == 2
    with pytest.raises(ZeroDivisionError):
        copy_nested([[[0]]], lambda v: 1 / v, str)


@pytest.mark.parametrize("wide", [2**64, -(2**63) - 1, 10**30, -(10**30), 2**1023])
def test_ints_beyond_64_bits_travel_as_the_nearest_float(wide: int) -> None:
    """What msgpack cannot carry arrives as the float a script would read
    (docs/scripts/host-functions.md#values-between-json-and-rhai), at any depth."""
    body = {"args": [1, (2**64 - 1, {"n": wide})], "flag": True}
    out = unpack(pack(body))
    assert out == {"args": [1, [2**64 - 1, {"n": float(wide)}]], "flag": True}
    assert type(out["args"][1][1]["n"]) is float
    assert type(out["args"][1][0]) is int  # the 64-bit ints msgpack carries stay ints
    deep: object = wide
    for _ in range(1100):  # past msgpack's own nesting: the flattened form converts too
        deep = [deep]
    deep_out = unpack(pack(deep))
    for _ in range(1100):
        deep_out = deep_out[0]
    assert deep_out == float(wide) and type(deep_out) is float


def test_an_int_past_the_float_range_has_no_wire_form() -> None:
    with pytest.raises(MalformedMessage):
        pack({"n": [2**1024]})
    with pytest.raises(MalformedMessage):
        pack(-(10**400))


def test_a_refused_or_big_value_leaves_nothing_behind_for_the_next_one() -> None:
    """``pack`` reuses one packer per thread: a failure must not leave bytes in it, and a body bigger
    than what it keeps must not stay allocated (nor change what the next body packs to)."""
    expected = msgpack.packb({"x": [1, 2]}, use_bin_type=True)
    for bad in [object(), {"a": {1}}, [1, 2, {3}], 2**70, "x" * 200_000, [b"y" * 100_000]]:
        with contextlib.suppress(ProtocolError):
            pack(bad)
        assert pack({"x": [1, 2]}) == expected

    def other_thread() -> None:
        results.append(pack({"x": [1, 2]}))

    results: list[bytes] = []
    threads = [threading.Thread(target=other_thread) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [expected] * 4
