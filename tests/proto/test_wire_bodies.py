"""Audit of the wire: hostile-but-well-framed bodies, and encode/decode symmetry.

A sender must never produce a frame its peer's decoder refuses: the peer drops it,
and the call it belonged to then ends only by a deadline (an inline one by killing
the worker and striking the script), see tests/integration/test_lying_worker.py.
"""

from __future__ import annotations

import math
import typing
from dataclasses import fields, replace
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import proto
from proto import (
    MAX_CONTAINER_LEN,
    Call,
    Chunk,
    Command,
    Credit,
    HostCall,
    HostChunk,
    HostReply,
    MalformedMessage,
    ProtocolError,
    Ready,
    Result,
    TooLarge,
    VersionMismatch,
    decode,
    encode,
    pack,
    unpack,
)

SHA = "ab" * 32

SAMPLES: list[Any] = [
    Ready(42, [1], 64, {"rlimits": {"active": True, "detail": "ok"}}, None),
    proto.Heartbeat({"calls": 1}),
    proto.Goodbye("shutdown"),
    proto.Shutdown("recycle"),
    Call(7, "call", "region", SHA, "render", [{"a": 1}], 2.0, "t1"),
    Call(
        9,
        "call",
        "region",
        SHA,
        "render",
        [{"entries": []}],
        2.0,
        "t1",
        resident={"key": "k" * 43, "version": 3, "base": 2, "drop": [0], "entries": []},
    ),
    Result(7, {"x": 1}, 0.1, 0.1, 1, 2, ["hi"]),
    proto.Error(7, "ScriptError", "boom", "ScriptThrow", 3, 9, {"m": 1}, None),
    Chunk(7, 0, "x", None),
    proto.Cancel(7),
    Credit(7, 0, 1),
    HostCall(7, 1, "http_get", ["http://x"]),
    HostReply(7, 1, True, "v"),
    HostChunk(7, 1, 0, "p"),
]

WRONG: list[Any] = [
    None, True, 0, -1, 2**64 - 1, 1.5, math.nan, math.inf, "", "x", b"x", [], [1], {}, {"k": 1},
]  # fmt: skip


def frame(command: int, body: object) -> list[bytes]:
    return [proto.SIGNATURE + bytes((command,)) + msgpack.packb(body, use_bin_type=True)]


def conforms(value: Any, hint: Any) -> bool:
    """Whether ``value`` is of the dataclass field type ``hint`` (exact int: never bool)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
        return any(conforms(value, a) for a in args)
    if hint is type(None):
        return value is None
    if origin is list:
        return type(value) is list and all(conforms(v, args[0]) for v in value)
    if origin is dict:
        return type(value) is dict and all(type(k) is str for k in value)
    if hint is float:
        return type(value) is float
    return type(value) is hint


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: type(m).__name__)
def test_every_field_with_every_wrong_value_is_refused_or_conforms(message: Any) -> None:
    """Each field replaced by each hostile value: a ProtocolError,
    or a message whose fields have their types."""
    hints = typing.get_type_hints(type(message))
    body = message.to_body()
    for key in list(body):
        for bad in WRONG:
            try:
                decoded = decode(frame(message.COMMAND, body | {key: bad}))
            except ProtocolError:
                continue
            for f in fields(decoded):
                assert conforms(getattr(decoded, f.name), hints[f.name]), (key, bad, f.name)
        without = frame(message.COMMAND, {k: v for k, v in body.items() if k != key})
        if conforms(None, hints[key]) and hints[key] is not Any:  # ``?`` fields: absent means nil (§6.3)
            assert getattr(decode(without), key) is None, key
        else:
            with pytest.raises(MalformedMessage, match="missing"):
                decode(without)


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: type(m).__name__)
def test_envelope_defects(message: Any) -> None:
    """Wrong version, extra bytes, a non-map body, extra frames: each a typed ProtocolError."""
    (good,) = encode(message)
    for version in (0, 2, 255):
        with pytest.raises(VersionMismatch):
            decode([proto.signature_for(version) + good[4:]])
    with pytest.raises(MalformedMessage):
        decode([good + b"\xc0"])
    for body in ([1], 1, None, "x", b"x"):
        with pytest.raises(MalformedMessage, match="expected a map"):
            decode(frame(message.COMMAND, body))
    for frames in ([], [good, b""], [b"", good]):
        with pytest.raises(MalformedMessage, match="frames"):
            decode(frames)
    assert decode([bytearray(good)]) == message  # zmq may hand over any buffer


def test_unknown_keys_are_ignored() -> None:
    """§6.3: unknown extra keys MUST be ignored (also ones that are not valid fields anywhere)."""
    for message in SAMPLES:
        body = message.to_body() | {"zz_future": {"nested": [1, b"x"]}}
        assert decode(frame(message.COMMAND, body)) == message


# -- encode/decode symmetry ---------------------------------------------------------------------

NON_STR_KEYS: list[Any] = [{1: 2}, {b"k": 1}, {None: 1}, {1.5: 2}, {True: 1}, {(1, 2): 3}, [{"ok": {2: 3}}]]


@pytest.mark.parametrize("value", NON_STR_KEYS, ids=repr)
def test_pack_refuses_non_string_map_keys(value: Any) -> None:
    """``unpack`` refuses them, so ``pack`` must: else the peer silently drops the whole message."""
    with pytest.raises(MalformedMessage, match="key"):
        pack(value)


def test_pack_refuses_containers_over_the_cap() -> None:
    with pytest.raises(TooLarge):
        pack([0] * (MAX_CONTAINER_LEN + 1))
    with pytest.raises(TooLarge):
        pack({"a": [{str(i): 0 for i in range(MAX_CONTAINER_LEN + 1)}]})
    assert unpack(pack([0] * MAX_CONTAINER_LEN)) == [0] * MAX_CONTAINER_LEN


@pytest.mark.parametrize("shape", ["array", "map"])
def test_unpack_refuses_containers_over_the_cap_that_msgpack_itself_would_accept(shape: str) -> None:
    """The receiving side's element caps, on a body a hostile peer packed itself: one element over the cap,
    well inside msgpack's own defaults (which allow as many elements as the body has bytes) and inside the
    body cap, so only our cap refuses it."""
    over = MAX_CONTAINER_LEN + 1
    value: Any = [0] * over if shape == "array" else {str(i): 0 for i in range(over)}
    body = msgpack.packb(value)
    assert len(body) < proto.values.MAX_BODY_BYTES
    assert len(msgpack.unpackb(body, strict_map_key=False)) == over  # msgpack's own defaults accept it
    with pytest.raises(TooLarge, match=f"{shape}_len"):
        unpack(body)


def test_pack_accepts_str_subclass_keys_and_deep_but_allowed_nesting() -> None:
    import enum

    class Key(enum.StrEnum):
        A = "a"

    assert unpack(pack({Key.A: 1})) == {"a": 1}
    deep: Any = None
    for _ in range(1000):
        deep = {"n": [deep]}  # 2000 levels packs and unpacks, or neither does
    try:
        data = pack(deep)
    except ProtocolError:
        return
    unpack(data)


hostile_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.binary(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.text(max_size=4) | st.integers() | st.binary(max_size=2) | st.none(), inner, max_size=4
        )
    ),
    max_leaves=20,
)


@given(hostile_values)
@settings(max_examples=300, deadline=None)
def test_whatever_pack_accepts_unpack_accepts(value: Any) -> None:
    try:
        data = pack(value)
    except ProtocolError:
        return
    unpack(data)


BAD_CALLS: list[tuple[str, Any]] = [
    ("timeout", 0.0),
    ("timeout", -1.0),
    ("timeout", math.nan),
    ("window", 0),
    ("window", 1025),
    ("tenant", 5),
    ("tenant", b"t"),
    ("fn", None),
    ("name", 3),
    ("sha", "AB" * 32),
    ("sha", "zz" * 32),
    ("op", "exec"),
    ("args", {"a": 1}),
]


@pytest.mark.parametrize(("field", "bad"), BAD_CALLS, ids=lambda v: repr(v))
def test_encode_refuses_a_call_the_worker_would_drop(field: str, bad: Any) -> None:
    """A CALL the worker's decoder refuses is never answered: ``encode`` must refuse it up front."""
    call = replace(Call(1, "call", "region", SHA, "f", [1], 1.0, "t"), **{field: bad})
    with pytest.raises(MalformedMessage):
        encode(call)
    with pytest.raises(MalformedMessage):  # and the decoder agrees
        decode(frame(Command.CALL, call.to_body()))


def test_sha_must_be_lowercase_hex_as_documented() -> None:
    body = Call(1, "call", "region", SHA, "f", [], 1.0, "t").to_body()
    for sha in ("AB" * 32, "zz" * 32, "ab" * 31 + "a ", "é" * 64):
        with pytest.raises(MalformedMessage, match="sha"):
            decode(frame(Command.CALL, body | {"sha": sha}))


@pytest.mark.parametrize(
    "message", [HostCall(7, 1, "env_var", ["K"]), HostReply(7, 1, True, 1), HostChunk(7, 1, 0, 1)]
)
def test_host_call_ids_count_from_one(message: Any) -> None:
    """§6.3: ``hid`` is 1, 2, …; 0 names the call's own output stream in CREDIT and is no host call."""
    with pytest.raises(MalformedMessage, match="hid"):
        decode(frame(message.COMMAND, message.to_body() | {"hid": 0}))
