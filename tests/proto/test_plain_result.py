"""``decode_plain_result`` (the coordinator's RESULT reader) against ``decode``: whatever it reads is
exactly the ``Result`` that ``decode`` returns; anything else it leaves to ``decode``."""

from __future__ import annotations

import random
from typing import Any

import msgpack
import pytest

from proto import Cancel, Error, ErrorClass, ProtocolError, Result, decode, encode
from proto.frames import HEADER_BYTES, PlainResult, decode_plain_result, encode_result


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
    1.5,
    "héllo",
    b"\x00bin",
    [],
    {},
    [1, "two", [3.0, {"k": None}]],
    {"a": {"b": [1, 2, {"c": b"x"}]}},
    _deep(1_200),  # travels flattened
]


def _decoded(frames: list[bytes]) -> Any:
    try:
        return decode(frames)
    except ProtocolError as exc:
        return exc


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
@pytest.mark.parametrize("output", [[], ["line 1", "line 2"]])
def test_reads_every_plain_result_as_decode_does(value: Any, output: list[str]) -> None:
    frames = encode_result(7, value, 0.25, 0.125, 4096, 12, output)
    plain = decode_plain_result(frames)
    assert type(plain) is PlainResult
    assert encode(Result(*plain)) == encode(decode(frames))  # ``==`` on the deep value would recurse
    assert plain._fields == ("id", "value", "wall", "cpu", "peak_rss", "ops", "output")


def _result_frame(body: dict[str, Any]) -> list[bytes]:
    header = encode(Result(1, None))[0][:HEADER_BYTES]
    return [header + msgpack.packb(body, use_bin_type=True)]


GOOD = {"id": 1, "value": 2, "wall": 0.5, "cpu": 0.25, "peak_rss": 3, "ops": 4, "output": []}
LEFT_TO_DECODE = [
    encode(Cancel(3)),  # another command
    encode(Error(3, ErrorClass.SCRIPT_ERROR, "boom")),
    [encode(Result(1, 2))[0], b"extra frame"],
    [encode(Result(1, 2))[0][:-1]],  # cut short
    [encode(Result(1, 2))[0] + b"\x00"],  # trailing data
    [b"RHP\x02" + encode(Result(1, 2))[0][4:]],  # another version
    _result_frame({**GOOD, "id": -1}),
    _result_frame({**GOOD, "id": True}),
    _result_frame({**GOOD, "wall": 1}),  # an int where a float belongs
    _result_frame({**GOOD, "ops": 1.0}),
    _result_frame({**GOOD, "output": ["ok", 3]}),
    _result_frame({k: v for k, v in GOOD.items() if k != "value"}),
    _result_frame({k: v for k, v in GOOD.items() if k != "output"}),
    [encode(Result(1, 2))[0][:HEADER_BYTES] + msgpack.packb([1, 2])],  # not a map
    [encode(Result(1, 2))[0][:HEADER_BYTES] + msgpack.packb({b"id": 1}, use_bin_type=True)],
]


@pytest.mark.parametrize("frames", LEFT_TO_DECODE, ids=range(len(LEFT_TO_DECODE)))
def test_leaves_everything_else_to_decode(frames: list[bytes]) -> None:
    assert decode_plain_result(frames) is None


def test_agrees_with_decode_on_thousands_of_mutated_frames() -> None:
    rng = random.Random(31)
    seeds = [encode_result(9, v, 0.5, 0.25, 10, 20, ["x"])[0] for v in VALUES[:-1]]
    read = 0
    for _ in range(5000):
        frame = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 2)):
            if len(frame) <= HEADER_BYTES:
                break
            at = rng.randrange(HEADER_BYTES - 1, len(frame))
            if rng.random() < 0.7:
                frame[at] = rng.randrange(256)
            else:
                del frame[at:]
        frames = [bytes(frame)]
        plain = decode_plain_result(frames)
        if plain is not None:
            assert Result(*plain) == _decoded(frames)
            read += 1
    assert read > 100  # some mutations keep a plainly valid RESULT (a changed number, say)
