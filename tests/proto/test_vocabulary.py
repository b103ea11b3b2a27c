"""The shared vocabulary: enums that are their strings on the wire, one brokered-function table."""

from __future__ import annotations

import pytest

from proto import (
    BROKERED,
    BROKERED_FUNCTIONS,
    ERROR_CLASSES,
    KINDS,
    OPS,
    STREAMING_HOST_CALLS,
    Call,
    Error,
    ErrorClass,
    HostCall,
    Kind,
    MalformedMessage,
    Op,
    decode,
    encode,
    rhai_type_name,
)

SHA = "ab" * 32


def test_enum_members_are_the_same_bytes_as_their_strings() -> None:
    typed = Call(1, Op.STREAM, Kind.PROVIDER, SHA, "stream", [], 1.0, "t")
    bare = Call(1, "stream", "provider", SHA, "stream", [], 1.0, "t")  # type: ignore[arg-type]
    assert encode(typed) == encode(bare)
    assert encode(Error(2, ErrorClass.SCRIPT_MISSING, "m")) == encode(Error(2, "ScriptMissing", "m"))  # type: ignore[arg-type]


def test_decoded_fields_are_members() -> None:
    call = decode(encode(Call(1, Op.LOAD, Kind.REGION, SHA, "", [], None, "t")))
    assert isinstance(call, Call) and call.op is Op.LOAD and call.kind is Kind.REGION
    error = decode(encode(Error(3, ErrorClass.INTERNAL, "bug")))
    assert isinstance(error, Error) and error.cls is ErrorClass.INTERNAL


@pytest.mark.parametrize(("field", "value"), [("op", "Load"), ("kind", "tool"), ("cls", "Other")])
def test_a_word_outside_the_vocabulary_is_malformed(field: str, value: str) -> None:
    if field == "cls":
        frames = encode(Error(3, ErrorClass.INTERNAL, "bug"))
        frames[-1] = frames[-1].replace(b"Internal", value.encode().ljust(8, b"x"))
    else:
        frames = encode(Call(1, Op.LOAD, Kind.REGION, SHA, "", [], None, "t"))
        old = b"load" if field == "op" else b"region"
        frames[-1] = frames[-1].replace(old, value.encode().ljust(len(old), b"x"))
    with pytest.raises(MalformedMessage):
        decode(frames)


def test_the_old_sets_are_the_enums() -> None:
    assert {"load", "call", "stream"} == OPS == set(Op)
    assert {"region", "provider"} == KINDS == set(Kind)
    assert set(ErrorClass) == ERROR_CLASSES and "ResidentMissing" in ERROR_CLASSES


def test_brokered_lists_derive_from_the_one_table() -> None:
    assert BROKERED == {
        "region": {},
        "provider": {"http_get": (1, 2), "http_post": (2, 3), "stream_request": (4,), "env_var": (1,)},
    }
    assert {"stream_request"} == STREAMING_HOST_CALLS
    stream = BROKERED_FUNCTIONS[Kind.PROVIDER]["stream_request"]
    assert stream.wire_signatures == (("string", "string", "map"),)
    assert stream.signatures == (("string", "string", "map", "fnptr"),)


def test_host_call_names_come_from_the_table() -> None:
    for name in BROKERED_FUNCTIONS[Kind.PROVIDER]:
        assert decode(encode(HostCall(1, 1, name, []))) == HostCall(1, 1, name, [])
    frames = encode(HostCall(1, 1, "env_var", []))
    frames[-1] = frames[-1].replace(b"env_var", b"env_bar")
    with pytest.raises(MalformedMessage):
        decode(frames)


@pytest.mark.parametrize(
    ("value", "name"),
    [(None, "()"), (True, "bool"), (3, "i64"), (1.5, "f64"), ("s", "string"), (b"b", "blob"),
     ([], "array"), ({}, "map"), (object(), "object")],
)  # fmt: skip
def test_rhai_type_names(value: object, name: str) -> None:
    assert rhai_type_name(value) == name
