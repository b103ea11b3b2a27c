"""CALL and RESULT bodies as ``proto``'s one reader of each reads them: every field checked, the first
bad one named, an int where a float is due read as that float; and what ``encode`` refuses to send."""

from __future__ import annotations

from dataclasses import astuple, fields
from typing import Any

import pytest

from proto import Call, MalformedMessage, ProtocolError, Result, TooLarge, decode, encode, encode_call

SHA = "ab" * 32
MISSING = object()

CALL_BODY: dict[str, Any] = Call(7, "call", "region", SHA, "f", [1], 2.0, "t1", "n.rhai", None, 16).to_body()
RESULT_BODY: dict[str, Any] = Result(7, {"a": [1]}, 0.5, 0.25, 1024, 3, ["line"]).to_body()
RESIDENT: dict[str, Any] = {"key": "k" * 43, "version": 3, "base": 2, "drop": [0, 4], "entries": [{"id": 5}]}


class Text(str):
    """A str subclass: the reader wants an exact str."""


def changed(body: dict[str, Any], field: str, value: Any) -> dict[str, Any]:
    if value is MISSING:
        return {k: v for k, v in body.items() if k != field}
    return {**body, field: value}


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("id", MISSING, "missing field 'id'"),
        ("id", -1, "field 'id' = -1 is outside 0..2**63-1"),
        ("id", 2**63, "field 'id' = 9223372036854775808 is outside 0..2**63-1"),
        ("id", True, "field 'id' is bool, expected int"),
        ("op", MISSING, "missing field 'op'"),
        ("op", "run", "unknown op 'run' or kind 'region'"),
        ("op", Text("call"), "field 'op' is Text, expected str"),
        ("kind", 3, "field 'kind' is int, expected str"),
        ("kind", "other", "unknown op 'call' or kind 'other'"),
        ("sha", "AB" * 32, "field 'sha' must be 64 lowercase hex digits"),
        ("sha", "ab", "field 'sha' must be 64 lowercase hex digits"),
        ("fn", None, "field 'fn' is NoneType, expected str"),
        ("args", {}, "field 'args' is dict, expected array"),
        ("timeout", 0.0, "field 'timeout' must be positive"),
        ("timeout", -1.0, "field 'timeout' must be positive"),
        ("timeout", float("nan"), "field 'timeout' must be positive"),
        ("timeout", "2", "field 'timeout' is str, expected float"),
        ("timeout", True, "field 'timeout' is bool, expected float"),
        ("tenant", b"t", "field 'tenant' is bytes, expected str"),
        ("name", MISSING, "missing field 'name'"),
        ("source", 3, "field 'source' is int, expected str or nil"),
        ("window", 0, "field 'window' must be in 1..1024"),
        ("window", 1025, "field 'window' must be in 1..1024"),
        ("window", 1.0, "field 'window' is float, expected int"),
        ("resident", [1], "field 'resident' is list, expected map or nil"),
        ("resident", RESIDENT, "field 'resident' needs op=call, kind=region and a map as first argument"),
    ],
)
def test_a_call_body_with_a_bad_field_is_refused_naming_it(field: str, value: Any, error: str) -> None:
    with pytest.raises(MalformedMessage) as refused:
        Call.from_body(changed(CALL_BODY, field, value))
    assert str(refused.value) == error


def test_the_first_bad_field_is_the_one_named() -> None:
    """Fields are checked in one order (op, kind, sha, timeout, window, args, id, fn, tenant, name,
    source, resident): the message names the first defect, whatever else is wrong."""
    body = {**CALL_BODY, "id": -1, "window": 0, "timeout": 0.0}
    with pytest.raises(MalformedMessage, match="'timeout' must be positive"):
        Call.from_body(body)
    with pytest.raises(MalformedMessage, match="'window'"):
        Call.from_body({**body, "timeout": None})
    with pytest.raises(MalformedMessage, match="'id'"):
        Call.from_body({**body, "timeout": None, "window": 4})


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("key", "k" * 15, "field 'resident.key' must be 16..128 characters"),
        ("key", "k" * 129, "field 'resident.key' must be 16..128 characters"),
        ("key", 3, "field 'key' is int, expected str"),
        ("version", -1, "field 'version' = -1 is outside 0..2**63-1"),
        ("version", MISSING, "missing field 'version'"),
        ("base", -1, "field 'resident.base' must be an id or nil"),
        ("base", 1.0, "field 'base' is float, expected int or nil"),
        ("drop", [1, 1], "field 'resident.drop' must be strictly ascending ints"),
        ("drop", [3, 1], "field 'resident.drop' must be strictly ascending ints"),
        ("drop", [0, True], "field 'resident.drop' must be strictly ascending ints"),
        ("drop", [-1, 2], "field 'resident.drop' must not be negative"),
        ("drop", MISSING, "missing field 'drop'"),
        ("entries", MISSING, "missing field 'entries'"),
        ("entries", {}, "field 'entries' is dict, expected array"),
    ],
)
def test_a_resident_map_with_a_bad_field_is_refused_naming_it(field: str, value: Any, error: str) -> None:
    body = {**CALL_BODY, "args": [{"entries": []}], "resident": changed(RESIDENT, field, value)}
    with pytest.raises(MalformedMessage) as refused:
        Call.from_body(body)
    assert str(refused.value) == error


def test_a_full_resident_list_drops_nothing_and_a_delta_keeps_its_list() -> None:
    full = {**CALL_BODY, "args": [{"entries": []}], "resident": {**RESIDENT, "base": None, "drop": []}}
    assert Call.from_body(full).resident == full["resident"]
    with pytest.raises(MalformedMessage, match="must be empty for a full list"):
        Call.from_body({**full, "resident": {**RESIDENT, "base": None}})
    for refused in ({"op": "stream"}, {"kind": "provider"}, {"args": [1]}, {"args": []}):
        with pytest.raises(MalformedMessage, match="needs op=call, kind=region"):
            Call.from_body({**CALL_BODY, "args": [{"entries": []}], "resident": RESIDENT, **refused})
    message = Call(9, "call", "region", SHA, "render", [{"entries": []}], 2.0, "t1", resident=RESIDENT)
    assert decode(encode(message)) == message


def test_an_int_timeout_is_read_as_a_float() -> None:
    call = Call.from_body({**CALL_BODY, "timeout": 2})
    assert call.timeout == 2.0 and type(call.timeout) is float
    assert Call.from_body({**CALL_BODY, "timeout": None}).timeout is None


def test_a_call_reads_back_as_the_message_sent() -> None:
    for message in (
        Call(7, "call", "region", SHA, "f", [1], 2.0, "t1"),
        Call(8, "stream", "provider", SHA, "f", [{"a": [1, 2]}], None, "t1", "p.rhai", "fn f() {}", 4),
    ):
        read = decode(encode(message))
        assert type(read) is Call and read == message
        assert encode_call(*astuple(message)) == encode(message)


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("id", MISSING, "missing field 'id'"),
        ("value", MISSING, "missing field 'value'"),
        ("wall", "x", "field 'wall' is str, expected float"),
        ("cpu", MISSING, "missing field 'cpu'"),
        ("peak_rss", 1.0, "field 'peak_rss' is float, expected int"),
        ("ops", None, "field 'ops' is NoneType, expected int"),
        ("output", ["a", 1], "field 'output' must be an array of str"),
        ("output", [Text("a")], "field 'output' must be an array of str"),
        ("output", "a", "field 'output' is str, expected array"),
        ("output", MISSING, "missing field 'output'"),
    ],
)
def test_a_result_body_with_a_bad_field_is_refused_naming_it(field: str, value: Any, error: str) -> None:
    with pytest.raises(MalformedMessage) as refused:
        Result.from_body(changed(RESULT_BODY, field, value))
    assert str(refused.value) == error


def test_a_result_reads_its_int_times_as_floats_and_any_value() -> None:
    read = Result.from_body({**RESULT_BODY, "wall": 1, "cpu": 0})
    assert (read.wall, read.cpu) == (1.0, 0.0) and type(read.wall) is type(read.cpu) is float
    for value in (None, True, 2**64 - 1, -(2**63), 1.5, "s", b"b", [], {"k": [1, {"x": None}]}):
        message = Result(3, value, 0.5, 0.25, 1, 2, ["out"])
        assert decode(encode(message)) == message
    deep: Any = "leaf"
    for _ in range(1_200):  # deeper than msgpack nests: the body travels flattened
        deep = [deep]
    read = decode(encode(Result(4, deep)))
    assert type(read) is Result and encode(read) == encode(Result(4, deep))  # ``==`` would recurse


WIDE = [2**64, -(2**63) - 1]


@pytest.mark.parametrize(
    ("args", "sent"),
    [([2**64 - 1, -(2**63)], [2**64 - 1, -(2**63)]), (WIDE, [float(w) for w in WIDE])],
)
def test_ints_past_64_bits_travel_as_the_nearest_floats(args: list[Any], sent: list[Any]) -> None:
    read = decode(encode(Call(7, "call", "region", SHA, "f", args, 2.0, "t1")))
    assert read.args == sent and [type(a) for a in read.args] == [type(s) for s in sent]


def call_fields(args: list[Any], timeout: float = 2.0, fn: Any = "f", **extra: Any) -> tuple[Any, ...]:
    call = Call(7, "call", "region", SHA, fn, args, timeout, "t1", **extra)
    return tuple(getattr(call, f.name) for f in fields(call))


@pytest.mark.parametrize(
    ("fields", "refusal"),
    [
        (call_fields([1], timeout=0.0), (MalformedMessage, "field 'timeout' must be positive")),
        (call_fields([1], fn=3), (MalformedMessage, "field 'fn' is int, expected str")),
        (call_fields([Text("s")]), None),  # sent: a str subclass packs as a str
        (call_fields([{1: 2}]), (MalformedMessage, "map key of type int")),
        (call_fields(["\ud800"]), (MalformedMessage, "value cannot be encoded")),  # a lone surrogate
        (call_fields([2**2000]), (MalformedMessage, "value cannot be encoded")),  # past any float
        (call_fields(["x" * (17 * 1024 * 1024)]), (TooLarge, "exceeds")),
        (call_fields([1], resident={"key": "short"}), (MalformedMessage, "needs op=call, kind=region")),
    ],
)
def test_encode_refuses_a_call_the_worker_would_drop(fields: tuple[Any, ...], refusal: Any) -> None:
    """A CALL the worker drops is answered only by its deadline: ``encode`` refuses it up front."""
    if refusal is None:
        assert decode(encode_call(*fields)).args == ["s"]
        return
    with pytest.raises(ProtocolError) as refused:
        encode_call(*fields)
    assert type(refused.value) is refusal[0] and refusal[1] in str(refused.value)
