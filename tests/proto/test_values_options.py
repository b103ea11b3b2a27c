"""``unpack`` spells its msgpack options out in the call: it must decode and refuse exactly as
``msgpack.unpackb(..., **_UNPACK_OPTIONS)`` with the same hooks, on good bodies and broken ones."""

from __future__ import annotations

import random
from typing import Any

import msgpack
import pytest

from proto.errors import MalformedMessage, ProtocolError, TooLarge
from proto.values import (
    _EXT_HEADERS,
    _UNPACK_OPTIONS,
    MAX_CONTAINER_LEN,
    _no_ext,
    _string_keys,
    pack,
    unpack,
)


def _reference(data: bytes) -> Any:
    """``unpack``'s plain path as it read with the options dict (the error mapping unchanged)."""
    try:
        return msgpack.unpackb(data, object_hook=_string_keys, ext_hook=_no_ext, **_UNPACK_OPTIONS)
    except MalformedMessage:
        raise
    except (ValueError, TypeError, OverflowError, RecursionError, msgpack.UnpackException) as exc:
        if "max_ext_len" in str(exc):
            raise MalformedMessage("msgpack extension types are not allowed") from exc
        if "exceeds max_" in str(exc):
            raise TooLarge(f"msgpack value too large: {exc}") from exc
        raise MalformedMessage(f"invalid msgpack: {exc}") from exc


def _outcome(decode: Any, data: bytes) -> tuple[str, Any]:
    try:
        return "value", decode(data)
    except ProtocolError as exc:
        return type(exc).__name__, str(exc)


_BODIES: list[bytes] = [
    pack({"id": 7, "value": 45, "wall": 0.001, "cpu": 0.0005, "peak_rss": 1 << 24, "ops": 17, "output": []}),
    pack({"a": [1, "x", b"\x00\xff", None, True, 1.5, {"b": {"c": [[], {}]}}], "é": "ü" * 40}),
    pack([2**64 - 1, -(2**63), 0.0, "", b""]),
    msgpack.packb({b"bin-key": 1}, use_bin_type=True),  # binary key: refused by the hook
    msgpack.packb({"a": {b"k": 1}}, use_bin_type=True),  # ... at any depth
    msgpack.packb({1: 2}),  # int key: strict_map_key refuses it
    msgpack.packb([msgpack.ExtType(5, b"abc")]),  # ext inside: max_ext_len=0
    msgpack.packb("ok") + b"\x01",  # trailing data
    b"\xa3\xff\xfe\xfd",  # bad UTF-8
    b"\xdb\x00\xff\xff\xff",  # str32 declaring more than there is
    b"\xdd" + (MAX_CONTAINER_LEN + 1).to_bytes(4, "big"),  # array over the cap
    b"\xdf" + (MAX_CONTAINER_LEN + 1).to_bytes(4, "big"),  # map over the cap
    b"\xdd" + (MAX_CONTAINER_LEN - 1).to_bytes(4, "big") + b"\xc0" * 10,  # under the cap, cut short
    b"\xc6" + (1 << 25).to_bytes(4, "big"),  # bin over the byte cap
    b"\xc1",  # never-used byte
    b"",
]


@pytest.mark.parametrize("data", _BODIES, ids=range(len(_BODIES)))
def test_same_outcome_as_the_options_dict(data: bytes) -> None:
    assert _outcome(unpack, data) == _outcome(_reference, data)


def test_same_outcome_on_thousands_of_mutated_bodies() -> None:
    rng = random.Random(13)
    checked = 0
    for _ in range(4000):
        data = bytearray(rng.choice(_BODIES[:5]))
        for _ in range(rng.randint(1, 3)):
            roll = rng.random()
            if roll < 0.5 and data:
                data[rng.randrange(len(data))] = rng.randrange(256)
            elif roll < 0.75 and data:
                del data[rng.randrange(len(data)) :]
            else:
                data.insert(rng.randrange(len(data) + 1), rng.randrange(256))
        if data and data[0] in _EXT_HEADERS:
            continue  # the flattened path, not the one changed
        body = bytes(data)
        assert _outcome(unpack, body) == _outcome(_reference, body), body.hex()
        checked += 1
    assert checked > 3000
