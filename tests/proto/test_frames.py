"""Framing and message decoding: round trips, and nothing but ProtocolError on bad input."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import proto
from proto import (
    Call,
    Cancel,
    Chunk,
    Command,
    Credit,
    Error,
    Goodbye,
    Heartbeat,
    HostCall,
    HostChunk,
    HostReply,
    MalformedMessage,
    ProtocolError,
    Ready,
    Result,
    Shutdown,
    TooLarge,
    UnknownCommand,
    VersionMismatch,
    decode,
    encode,
)

SHA = "ab" * 32

SAMPLES = [
    Ready(
        pid=42, versions=[1], capacity=64, sandbox={"rlimits": {"active": True, "detail": "ok"}}, probe=None
    ),
    Heartbeat(stats={"rss": 10}),
    Goodbye(reason="shutdown"),
    Shutdown(reason="recycle"),
    Call(7, "call", "region", SHA, "render", [{"a": [1, 2.5, None, True, "x", b"\x00"]}], 2.0, "t1"),
    Call(8, "load", "provider", SHA, "", [], None, "t1", name="p.rhai", source="fn f() { 1 }"),
    Result(7, {"blocks": ["x"]}, wall=0.001, cpu=0.0005, peak_rss=1 << 20, ops=12, output=["hi"]),
    Error(
        7,
        "ScriptError",
        "boom",
        kind="ScriptThrow",
        line=3,
        column=9,
        value={"message": "m", "transient": True},
    ),
    Error(7, "LimitExceeded", "too many operations", kind="TooManyOperations", limit="operations"),
    Chunk(7, 0, {"delta": "he"}),
    Chunk(7, 1, None, "no wire form"),
    Cancel(7),
    Credit(7, 0, 1),
    HostCall(7, 1, "http_get", ["http://x", {"a": "b"}]),
    HostReply(7, 1, False, {"kind": "api", "message": "HTTP 500"}),
    HostChunk(7, 1, 3, '{"x":1}'),
]


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip(message: object) -> None:
    frames = encode(message)  # type: ignore[arg-type]
    assert frames[0][:4] == proto.SIGNATURE and frames[0][4] == type(message).COMMAND  # type: ignore[attr-defined]
    assert len(frames) == proto.COMMAND_FRAMES
    assert decode(frames) == message


def test_every_command_has_a_sample() -> None:
    assert {type(m).COMMAND for m in SAMPLES} == set(Command)


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: type(m).__name__)
def test_truncation_sweep(message: object) -> None:
    """Cut the frame at every index: a clean ProtocolError every time, never another exception."""
    (frame,) = encode(message)  # type: ignore[arg-type]
    for cut in range(len(frame)):
        with pytest.raises(ProtocolError):
            decode([frame[:cut]])


@given(st.binary(max_size=200), st.binary(max_size=3))
@settings(max_examples=300, deadline=None)
def test_random_bytes_raise_only_protocol_errors(body: bytes, command: bytes) -> None:
    try:
        decode([proto.SIGNATURE + command + body])
    except ProtocolError:
        pass


values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@given(values)
@settings(max_examples=200, deadline=None)
def test_values_round_trip(value: object) -> None:
    assert decode(encode(Chunk(1, 0, value))).value == value


@given(st.lists(st.binary(max_size=20), max_size=5))
@settings(max_examples=200, deadline=None)
def test_random_frame_lists(frames: list[bytes]) -> None:
    try:
        decode(frames)
    except ProtocolError:
        pass


def frame(command: int, body: bytes) -> list[bytes]:
    return [proto.SIGNATURE + bytes((command,)) + body]


def test_version_and_signature_checks() -> None:
    (good,) = encode(Cancel(1))
    with pytest.raises(VersionMismatch, match="version 2"):
        decode([proto.signature_for(2) + good[4:]])
    with pytest.raises(VersionMismatch):
        decode([b"MDPW02" + good[4:]])
    with pytest.raises(UnknownCommand):
        decode([proto.SIGNATURE + b"\x7f" + good[5:]])
    with pytest.raises(MalformedMessage, match="frames"):
        decode([good, good])
    with pytest.raises(MalformedMessage, match="header"):
        decode([proto.SIGNATURE])


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ({"id": -1}, "outside"),
        ({"id": True}, "expected int"),
        ({"id": 2**64 - 1}, "outside"),
        ({}, "missing field 'id'"),
        ([1], "expected a map"),
    ],
)
def test_field_validation(body: object, match: str) -> None:
    with pytest.raises(MalformedMessage, match=match):
        decode(frame(Command.CANCEL, msgpack.packb(body)))


def test_schema_rejects_bad_calls() -> None:
    good = Call(1, "call", "region", SHA, "f", [], 1.0, "t").to_body()
    for key, bad in [
        ("op", "exec"),
        ("kind", "tool"),
        ("sha", "abc"),
        ("timeout", -1.0),
        ("window", 0),
        ("args", {}),
    ]:
        body = dict(good, **{key: bad})
        with pytest.raises(MalformedMessage):
            decode(frame(Command.CALL, msgpack.packb(body)))


def test_error_class_and_host_name_are_closed_sets() -> None:
    with pytest.raises(MalformedMessage, match="error class"):
        decode(frame(Command.ERROR, msgpack.packb(Error(1, "ScriptError", "x").to_body() | {"cls": "Boom"})))
    body = msgpack.packb(HostCall(1, 1, "http_get", []).to_body() | {"name": "open_file"})
    with pytest.raises(MalformedMessage, match="not a brokered"):
        decode(frame(Command.HOST_CALL, body))


def test_size_caps() -> None:
    with pytest.raises(TooLarge):
        proto.unpack(b"\x00" * (proto.MAX_BODY_BYTES + 1))
    with pytest.raises(TooLarge):
        encode(Chunk(1, 0, "x" * proto.MAX_BODY_BYTES))


def test_encode_refuses_values_without_wire_form() -> None:
    with pytest.raises(MalformedMessage):
        encode(Chunk(1, 0, object()))
    with pytest.raises(MalformedMessage):
        encode(Chunk(1, 0, 2**1024))  # past the float range (a wider int within it travels as a float)
