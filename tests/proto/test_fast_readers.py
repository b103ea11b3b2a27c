"""The one-pass readers of CALL and RESULT bodies agree with the field-by-field ones, always.

``Call.from_body`` and ``Result.from_body`` first try a single pass that accepts only plainly valid
bodies and otherwise defer to the careful reader (which names the defect).  Whatever a body holds,
the answer must be the careful reader's: the same message, or the same error.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proto import Call, MalformedMessage, ProtocolError, Result, decode, encode, encode_call

SHA = "ab" * 32


class Text(str):
    """A str subclass: the careful reader refuses it where an exact str is required."""


CALL_BODY: dict[str, Any] = Call(7, "call", "region", SHA, "f", [1], 2.0, "t1", "n.rhai", None, 16).to_body()
RESULT_BODY: dict[str, Any] = Result(7, {"a": [1]}, 0.5, 0.25, 1024, 3, ["line"]).to_body()

ODD_VALUES: list[Any] = [
    None, True, False, 0, 1, -1, 2**63, 2**63 - 1, 1024, 1025, 0.0, -1.0, 2.5, float("nan"), "", "call",
    "stream", "provider", "x" * 64, "AB" * 32, SHA, Text("call"), Text(SHA), [], ["a"], [1], {}, {"k": 1},
    b"bytes",
]  # fmt: skip


def outcome(read: Any, body: dict[str, Any]) -> tuple[str, Any]:
    try:
        return "ok", read(body)
    except MalformedMessage as exc:
        return "error", str(exc)


@pytest.mark.parametrize("reader", [Call, Result])
def test_every_field_with_every_odd_value_is_read_as_the_careful_reader_reads_it(reader: Any) -> None:
    base = CALL_BODY if reader is Call else RESULT_BODY
    for field in [*base, "resident"] if reader is Call else base:
        for value in ODD_VALUES:
            body = {**base, field: value}
            assert outcome(reader.from_body, body) == outcome(reader._checked, body), (field, value)
        absent = {k: v for k, v in base.items() if k != field}
        assert outcome(reader.from_body, absent) == outcome(reader._checked, absent), field


@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(st.sampled_from([*CALL_BODY, "resident"]), st.sampled_from(ODD_VALUES), max_size=4),
    st.sets(st.sampled_from(list(CALL_BODY)), max_size=2),
)
def test_call_reader_agrees_with_the_careful_one(changes: dict[str, Any], removed: set[str]) -> None:
    body = {k: v for k, v in {**CALL_BODY, **changes}.items() if k not in removed}
    careful = outcome(Call._checked, body)
    assert outcome(Call.from_body, body) == careful
    checked = outcome(Call.check, body)
    assert checked[0] == careful[0]
    if careful[0] == "error":
        assert checked == careful


@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(st.sampled_from(list(RESULT_BODY)), st.sampled_from(ODD_VALUES), max_size=4),
    st.sets(st.sampled_from(list(RESULT_BODY)), max_size=2),
)
def test_result_reader_agrees_with_the_careful_one(changes: dict[str, Any], removed: set[str]) -> None:
    body = {k: v for k, v in {**RESULT_BODY, **changes}.items() if k not in removed}
    assert outcome(Result.from_body, body) == outcome(Result._checked, body)


@pytest.mark.parametrize(
    ("field", "value"),
    [("timeout", 2), ("output", ["a", 1]), ("op", Text("call")), ("window", 0), ("sha", "AB" * 32)],
)
def test_bodies_the_one_pass_defers_are_still_read_or_refused_as_before(field: str, value: Any) -> None:
    base = RESULT_BODY if field == "output" else CALL_BODY
    reader = Result if field == "output" else Call
    body = {**base, field: value}
    assert outcome(reader.from_body, body) == outcome(reader._checked, body)


def test_an_int_timeout_is_read_as_a_float_and_a_resident_call_keeps_its_list() -> None:
    call = Call.from_body({**CALL_BODY, "timeout": 2})
    assert call.timeout == 2.0 and type(call.timeout) is float
    resident = {"key": "k" * 43, "version": 3, "base": None, "drop": [], "entries": [{"id": 1}]}
    message = Call(9, "call", "region", SHA, "f", [{"entries": []}], 2.0, "t1", resident=resident)
    assert decode(encode(message)) == message


@pytest.mark.parametrize(
    "fields",
    [
        (7, "call", "region", SHA, "f", [1], 2.0, "t1"),
        (8, "stream", "provider", SHA, "f", [{"a": [1, 2]}], None, "t1", "p.rhai", "fn f() {}", 4),
        (9, "call", "region", SHA, "f", [{"entries": []}], 2.0, "t1", "r.rhai", None, 16,
         {"key": "k" * 43, "version": 3, "base": 2, "drop": [0], "entries": []}),
    ],
)  # fmt: skip
def test_encode_call_sends_the_bytes_encode_sends(fields: tuple[Any, ...]) -> None:
    assert encode_call(*fields) == encode(Call(*fields))


@pytest.mark.parametrize(
    "args",
    [[], [1, -1, 2**63 - 1, 2**64 - 1], [2**64, -(2**63) - 1], [None, True, 1.5, "s", b"b"], ["x" * 70_000]],
)
def test_a_call_of_scalar_arguments_sends_the_bytes_encode_sends(args: list[Any]) -> None:
    """Scalar arguments skip ``pack``'s walk; wide ints still travel as floats, as ``encode`` sends them."""
    fields = (7, "call", "region", SHA, "f", args, 2.0, "t1", "n.rhai", None, 16)
    assert encode_call(*fields) == encode(Call(*fields))


@pytest.mark.parametrize(
    "args", [["\ud800"], [Text("s")], [2**2000], ["x" * (17 * 1024 * 1024)]]
)  # a lone surrogate, a str subclass, an int no float holds, a body over the size cap
def test_a_call_of_scalar_arguments_is_refused_as_encode_refuses_it(args: list[Any]) -> None:
    fields = (7, "call", "region", SHA, "f", args, 2.0, "t1")
    try:
        expected: Any = encode(Call(*fields))
    except ProtocolError as refused:
        expected = (type(refused), str(refused))
    try:
        got: Any = encode_call(*fields)
    except ProtocolError as also_refused:
        got = (type(also_refused), str(also_refused))
    assert got == expected


@pytest.mark.parametrize(
    "fields",
    [
        (7, "call", "region", SHA, "f", [1], 0.0, "t1"),  # a timeout the wire cannot carry
        (7, "call", "region", SHA, "f", [{1: 2}], 2.0, "t1"),  # a map key that is not a string
        (7, "call", "region", SHA, 3, [1], 2.0, "t1"),  # a function name that is not a string
        (7, "call", "region", SHA, "f", [1], 2.0, "t1", "n", None, 16, {"key": "short"}),
    ],
)
def test_encode_call_refuses_what_encode_refuses(fields: tuple[Any, ...]) -> None:
    with pytest.raises(ProtocolError) as refused:
        encode(Call(*fields))
    with pytest.raises(ProtocolError) as also_refused:
        encode_call(*fields)
    assert type(also_refused.value) is type(refused.value)
    assert str(also_refused.value) == str(refused.value)


RESIDENT_CALL_BODY: dict[str, Any] = Call(
    9, "call", "region", SHA, "render", [{"entries": []}], 2.0, "t1", "r.rhai", None, 16,
    {"key": "k" * 43, "version": 3, "base": 2, "drop": [0, 4], "entries": [{"id": 5}]},
).to_body()  # fmt: skip
RESIDENT_ODD_VALUES: list[Any] = [
    *ODD_VALUES, "k" * 15, "k" * 16, "k" * 128, "k" * 129, 2**63 - 1, [0], [3, 1], [1, 1], [-1, 2], [0, True],
    [1.0], [0, 2**63], [{}], [{"entries": []}],
]  # fmt: skip


def _agree(body: dict[str, Any]) -> None:
    careful = outcome(Call._checked, body)
    assert outcome(Call.from_body, body) == careful, body
    checked = outcome(Call.check, body)
    assert checked[0] == careful[0], body
    if careful[0] == "error":
        assert checked == careful, body


def _with_resident(**fields: Any) -> dict[str, Any]:
    resident = {k: v for k, v in {**RESIDENT_CALL_BODY["resident"], **fields}.items() if v is not _ABSENT}
    return {**RESIDENT_CALL_BODY, "resident": resident}


_ABSENT = object()


def test_every_resident_field_with_every_odd_value_is_read_as_the_careful_reader_reads_it() -> None:
    for field in ["key", "version", "base", "drop", "entries", "extra"]:
        for value in [*RESIDENT_ODD_VALUES, _ABSENT]:
            _agree(_with_resident(**{field: value}))
    for field in ["op", "kind", "args"]:
        for value in RESIDENT_ODD_VALUES:
            _agree({**RESIDENT_CALL_BODY, field: value})


def test_every_base_and_drop_pair_is_read_as_the_careful_reader_reads_it() -> None:
    for base in [None, 0, 2, -1, 2**63, True, 1.0]:
        for drop in RESIDENT_ODD_VALUES:
            _agree(_with_resident(base=base, drop=drop))


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["key", "version", "base", "drop", "entries", "extra"]),
        st.sampled_from(RESIDENT_ODD_VALUES),
        max_size=3,
    ),
    st.dictionaries(
        st.sampled_from(["op", "kind", "args"]), st.sampled_from(RESIDENT_ODD_VALUES), max_size=1
    ),
)
def test_resident_call_reader_agrees_with_the_careful_one(
    changes: dict[str, Any], outer: dict[str, Any]
) -> None:
    _agree({**_with_resident(**changes), **outer})


def test_a_plainly_valid_resident_call_is_read_in_one_pass() -> None:
    """The steady render's CALL (a resident map on every call) takes the one-pass reader."""
    from proto.calls import _plain_call_fields

    fields = _plain_call_fields(RESIDENT_CALL_BODY)
    assert fields is not None and fields[-1] == RESIDENT_CALL_BODY["resident"]
    assert Call.from_body(RESIDENT_CALL_BODY) == Call._checked(RESIDENT_CALL_BODY)


def test_encode_call_agrees_with_encode_for_every_field_with_every_odd_value() -> None:
    """``encode_call`` checks its parameters without a body lookup: whatever a field holds, it sends
    or refuses exactly what ``encode(Call(...))`` does."""
    names = ["id", "op", "kind", "sha", "fn", "args", "timeout", "tenant", "name", "source", "window"]
    base = dict(zip(names, (7, "call", "region", SHA, "f", [1], 2.0, "t1", "n.rhai", None, 16), strict=True))
    for field in names:
        for value in ODD_VALUES:
            fields = tuple({**base, field: value}.values())
            try:
                expected: Any = encode(Call(*fields))
            except ProtocolError as refused:
                expected = (type(refused), str(refused))
            try:
                got: Any = encode_call(*fields)
            except ProtocolError as also_refused:
                got = (type(also_refused), str(also_refused))
            assert got == expected, (field, value)
