"""CALL's optional ``resident`` field: absent keeps the old bytes; present, every field is checked."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from proto import SIGNATURE, Call, Command, Error, MalformedMessage, decode, encode

SHA = "cd" * 32
KEY = "k" * 43


def frame(body: dict[str, Any]) -> list[bytes]:
    return [SIGNATURE + bytes([Command.CALL.value]) + msgpack.packb(body)]


def resident(**fields: Any) -> dict[str, Any]:
    return {"key": KEY, "version": 3, "base": 2, "drop": [0, 4], "entries": [{"content": "x"}]} | fields


def region_call(**fields: Any) -> dict[str, Any]:
    return Call(1, "call", "region", SHA, "render", [{"entries": []}], 1.0, "t").to_body() | fields


def test_absent_field_keeps_the_exact_old_body() -> None:
    body = Call(1, "call", "region", SHA, "render", [{"entries": []}], 1.0, "t").to_body()
    assert "resident" not in body and len(body) == 11  # the §11 worked example's 11-field map
    assert decode(encode(Call(1, "call", "region", SHA, "f", [{}], 1.0, "t"))).resident is None


@pytest.mark.parametrize("value", [resident(), resident(base=None, drop=[]), resident(drop=[], entries=[])])
def test_round_trip(value: dict[str, Any]) -> None:
    call = Call(9, "call", "region", SHA, "render", [{"entries": []}], 1.0, "t", resident=value)
    assert decode(encode(call)) == call


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"resident": resident(key="short")}, "16..128"),
        ({"resident": resident(key="x" * 129)}, "16..128"),
        ({"resident": resident(version=-1)}, "version"),
        ({"resident": resident(version=True)}, "version"),
        ({"resident": resident(base="2")}, "base"),
        ({"resident": resident(base=-1)}, "base"),
        ({"resident": resident(base=None, drop=[1])}, "empty for a full list"),
        ({"resident": resident(drop=[3, 3])}, "ascending"),
        ({"resident": resident(drop=[4, 1])}, "ascending"),
        ({"resident": resident(drop=[-2, 1])}, "negative"),
        ({"resident": resident(drop=[1.0])}, "ascending ints"),
        ({"resident": resident(entries={})}, "entries"),
        ({"resident": [1]}, "resident"),
        ({"resident": resident(), "args": []}, "first argument"),
        ({"resident": resident(), "args": [[1]]}, "first argument"),
        ({"resident": resident(), "kind": "provider"}, "kind=region"),
        ({"resident": resident(), "op": "stream"}, "op=call"),
    ],
)
def test_malformed_resident_is_refused(fields: dict[str, Any], match: str) -> None:
    with pytest.raises(MalformedMessage, match=match):
        decode(frame(region_call(**fields)))


def test_missing_resident_subfield_is_refused() -> None:
    for field in ("key", "version", "drop", "entries"):
        value = {k: v for k, v in resident().items() if k != field}
        with pytest.raises(MalformedMessage, match=field):
            decode(frame(region_call(resident=value)))


def test_resident_missing_is_an_error_class() -> None:
    error = Error(4, "ResidentMissing", "resident entries at version 2 are not held here")
    assert decode(encode(error)) == error
