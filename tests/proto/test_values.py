"""msgpack value encoding: allowed types only, string keys only, no extensions."""

from __future__ import annotations

import msgpack
import pytest

from proto import MalformedMessage, ProtocolError, TooLarge, pack, unpack


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
