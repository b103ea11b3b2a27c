"""The worker's codec (``worker/wire.py``, ``rhai.Codec``) against ``proto``, the coordinator's codec.

The worker reads every frame it receives and writes every frame it sends natively; ``proto`` is
the one definition of the wire.  So: every frame a worker can receive is refused by the codec
exactly when ``proto.decode`` refuses it (``OverflowError`` exactly where ``proto`` says
``TooLarge``), and read into the same fields, of the same types, when it accepts it; every frame the
worker writes is byte for byte ``proto.encode``'s for the same message; and a value without wire
form ends as ``proto``'s refusal says (the ERROR ``InvalidValue``, a CHUNK carrying its error, a
refused HOST_CALL with ``proto``'s words).  A command only a worker sends is refused (RHP §8.6.2).
"""

from __future__ import annotations

import enum
import hashlib
import random
import re
import tempfile
from collections.abc import Callable
from typing import Any

import msgpack
import pytest
from bare_worker import BareWorker

from proto import (
    FROM_COORDINATOR,
    FROM_WORKER,
    SIGNATURE,
    Call,
    Cancel,
    Chunk,
    Command,
    Credit,
    Error,
    ErrorClass,
    Goodbye,
    Heartbeat,
    HostCall,
    HostChunk,
    HostReply,
    Kind,
    Limit,
    Op,
    ProtocolError,
    Ready,
    Result,
    Shutdown,
    TooLarge,
    decode,
    encode,
    pack,
)
from proto.values import MAX_BODY_BYTES, MAX_CONTAINER_LEN, MAX_PLAIN_DEPTH
from worker.wire import CODEC

SHA = "0123456789abcdef" * 4
WORKER_ONLY = FROM_WORKER - FROM_COORDINATOR


def as_fields(message: Any) -> tuple[Any, ...]:
    """``proto``'s message as the codec hands it over: ``(command byte, field, ...)``."""
    fields: tuple[Any, ...]
    if type(message) is Call:
        m = message
        fields = (m.id, m.op, m.kind, m.sha, m.fn, m.args, m.timeout, m.tenant, m.name, m.source, m.window,
                  m.resident)  # fmt: skip
    elif type(message) is Cancel:
        fields = (message.id,)
    elif type(message) is Credit:
        fields = (message.id, message.hid, message.n)
    elif type(message) in (HostReply, HostChunk):
        second = message.ok if type(message) is HostReply else message.seq
        fields = (message.id, message.hid, second, message.value)
    elif type(message) is Shutdown:
        fields = (message.reason,)
    else:
        assert type(message) is Heartbeat
        fields = (message.stats,)
    return (int(message.COMMAND), *fields)


def outcome(read: Callable[[bytes], tuple[Any, ...]], frame: bytes) -> tuple[str, Any]:
    try:
        return "read", read(frame)
    except (TooLarge, OverflowError):
        return "too large", None
    except (ProtocolError, ValueError):
        return "invalid", None


def check_read(frame: bytes) -> str:
    """The codec reads ``frame`` as ``proto`` does (or refuses it: a command only workers send)."""
    native = outcome(lambda f: CODEC.read([f]), frame)
    if len(frame) > 4 and frame[:4] == SIGNATURE and frame[4] in WORKER_ONLY:
        assert native[0] == "invalid", frame
        return "worker's command"
    reference = outcome(lambda f: as_fields(decode([f])), frame)
    assert native[0] == reference[0], (frame[:80], native, reference)
    if native[0] == "read":
        got, expected = native[1], reference[1]
        assert len(got) == len(expected)
        for a, b in zip(got, expected, strict=True):
            assert type(a) is type(b), (frame[:80], a, b)
        assert pack(list(got)) == pack(list(expected))  # every value, to the bit and the type
        if got[0] == Command.CALL:
            assert got[2] is expected[2] and got[3] is expected[3]  # the members themselves
    return native[0]


def deep(n: int, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(n):
        value = [value]
    return value


VALUES: list[Any] = [
    None, True, False, 0, 127, 128, 65536, 2**63 - 1, 2**64 - 1, -1, -33, -(2**63), 1.5, -0.0,
    float("inf"), "", "λ→✓", "x" * 70000, b"", b"\x00" * 300, [], {}, [1, [2, [3]]],
    {"b": 1, "a": {"z": None, "y": [2.5, b"q"]}}, list(range(20)), {f"k{i}": i for i in range(20)},
]  # fmt: skip

RECEIVED: list[Any] = [
    *(HostReply(5, 1, True, v) for v in VALUES),
    *(HostReply(5, 3, False, v) for v in VALUES[:8]),
    *(HostChunk(5, 1, 2, v) for v in VALUES),
    Heartbeat({}),
    Heartbeat({"calls": 1, "inflight": 0}),
    Cancel(3),
    Credit(3, 0, 1),
    Credit(3, 7, 1024),
    Shutdown("retire"),
    Call(9, Op.CALL, Kind.REGION, SHA, "f", [1, "x", {"a": [1]}], 5.0, "t", "n.rhai"),
    Call(9, Op.STREAM, Kind.PROVIDER, SHA, "f", [{"m": "x"}], None, "t", "p.rhai", "fn f(x) {}", 4),
    Call(2**63 - 1, Op.LOAD, Kind.REGION, SHA, "", [], 0.5, "é", "r.rhai", "fn f() {}", 1024),
    Call(9, Op.CALL, Kind.REGION, SHA, "f", [{"entries": []}], 5.0, "t", "n",
         resident={"key": "k" * 16, "version": 1, "base": None, "drop": [], "entries": [1, {"a": 2}]}),
    Call(9, Op.CALL, Kind.REGION, SHA, "f", [{"entries": []}, 2], 5.0, "t", "n",
         resident={"key": "é" * 128, "version": 4, "base": 3, "drop": [0, 2, 9], "entries": []}),
]  # fmt: skip


@pytest.mark.parametrize("message", RECEIVED, ids=lambda m: f"{type(m).__name__}")
def test_every_message_a_worker_receives_is_read_as_proto_reads_it(message: Any) -> None:
    assert check_read(encode(message)[0]) == "read"


def _raw(command: Command, body: Any, **options: Any) -> bytes:
    return SIGNATURE + bytes((command,)) + msgpack.packb(body, use_bin_type=True, **options)


CALL_BODY = {"id": 9, "op": "call", "kind": "region", "sha": SHA, "fn": "f", "args": [1], "timeout": 1.0,
             "tenant": "t", "name": "n", "source": None, "window": 16}  # fmt: skip
RESIDENT = {"key": "k" * 20, "version": 2, "base": 1, "drop": [0], "entries": []}


def _call(**changes: Any) -> bytes:
    return _raw(Command.CALL, {k: v for k, v in {**CALL_BODY, **changes}.items() if v is not ...})


@pytest.mark.parametrize(
    "frame",
    [
        _call(timeout=5),
        _call(timeout=True),
        _call(timeout=0.0),
        _call(timeout=-1.0),
        _call(timeout=float("nan")),
        _call(timeout=...),
        _call(timeout=2**64 - 1),
        _call(window=0),
        _call(window=1025),
        _call(window=True),
        _call(id=-1),
        _call(id=2**63),
        _call(id=1.0),
        _call(op="Call"),
        _call(kind="regions"),
        _call(sha=SHA.upper()),
        _call(sha=SHA[:63]),
        _call(sha=b"x" * 64),
        _call(fn=None),
        _call(tenant=...),
        _call(name=b"n"),
        _call(source=...),
        _call(source=5),
        _call(args=(1,)),
        _call(args={"a": 1}),
        _call(args=...),
        _call(extra=[1]),
        _call(resident=None),
        _call(resident=RESIDENT, args=[{}]),
        _call(resident=RESIDENT, args=[[]]),
        _call(resident=RESIDENT, args=[{}], op="stream"),
        _call(resident=RESIDENT, args=[{}], kind="provider"),
        _call(resident=RESIDENT),
        _call(resident=[], args=[{}]),
        _call(resident={**RESIDENT, "key": "k" * 15}, args=[{}]),
        _call(resident={**RESIDENT, "key": "é" * 129}, args=[{}]),
        _call(resident={**RESIDENT, "version": -1}, args=[{}]),
        _call(resident={**RESIDENT, "base": None}, args=[{}]),
        _call(resident={**RESIDENT, "base": None, "drop": []}, args=[{}]),
        _call(resident={**RESIDENT, "base": 2**63}, args=[{}]),
        _call(resident={**RESIDENT, "base": 1.0}, args=[{}]),
        _call(resident={**RESIDENT, "drop": [1, 1]}, args=[{}]),
        _call(resident={**RESIDENT, "drop": [-1, 0]}, args=[{}]),
        _call(resident={**RESIDENT, "drop": [0, True]}, args=[{}]),
        _call(resident={**RESIDENT, "drop": [0, 2**64 - 1]}, args=[{}]),
        _call(resident={**RESIDENT, "entries": {}}, args=[{}]),
        _raw(Command.CREDIT, {"id": 1, "hid": 0, "n": 0}),
        _raw(Command.CREDIT, {"id": 1, "hid": 0, "n": 1025}),
        _raw(Command.CREDIT, {"id": 1, "hid": -1, "n": 1}),
        _raw(Command.HOST_REPLY, {"id": 1, "hid": 0, "ok": True, "value": 1}),
        _raw(Command.HOST_REPLY, {"id": 1, "hid": 1, "ok": 1, "value": 1}),
        _raw(Command.HOST_REPLY, {"id": 1, "hid": 1, "ok": True}),
        _raw(Command.HOST_CHUNK, {"id": 1, "hid": 1, "seq": -1, "value": 1}),
        _raw(Command.HEARTBEAT, {"stats": []}),
        _raw(Command.SHUTDOWN, {"reason": None}),
        _raw(Command.CANCEL, {}),
        _raw(Command.CANCEL, [1]),
        _raw(Command.HEARTBEAT, {"stats": {}}, use_single_float=True),
        _raw(Command.HOST_REPLY, {"id": 1, "hid": 1, "ok": True, "value": 1.5}, use_single_float=True),
        SIGNATURE + b"\x02" + msgpack.packb({"stats": {b"k": 1}}),
        SIGNATURE + b"\x02" + msgpack.packb({"stats": {1: 1}}),
        SIGNATURE + b"\x02\x81\xa5stats\x80\xc0",
        SIGNATURE + b"\x02\x81\xa5stats\xc1",
        SIGNATURE + b"\x02\x81\xa5stats\xa1\xff",
        SIGNATURE + b"\x02\x81\xa5stats\xdd\xff\xff\xff\xff",
        SIGNATURE + b"\x02\x81\xa5stats\xd4\x02\x00",
        SIGNATURE + b"\x02\x81\xa5stats\xc7\x00\x05",
        SIGNATURE + b"\x02",
        SIGNATURE + b"\x02\x81",
        SIGNATURE[:3],
        b"RHP\x02\x02" + msgpack.packb({"stats": {}}),
        b"XYZ\x01\x02" + msgpack.packb({"stats": {}}),
        SIGNATURE + b"\x7f" + msgpack.packb({"stats": {}}),
        *(
            encode(m)[0]
            for m in (
                Ready(1, [1], 1, {}),
                Result(1, 2),
                Error(1, ErrorClass.INTERNAL, "x"),
                Chunk(1, 0, 1),
                Goodbye("x"),
                HostCall(1, 1, "http_get", ["u"]),
            )
        ),
    ],
)
def test_what_proto_refuses_the_codec_refuses(frame: bytes) -> None:
    check_read(frame)


def test_nesting_up_to_msgpack_s_own_limit_reads_as_proto_reads_it() -> None:
    header = SIGNATURE + bytes((Command.HOST_REPLY,)) + b"\x84\xa2id\x05\xa3hid\x01\xa2ok\xc3\xa5value"
    outcomes = {n: check_read(header + b"\x91" * (n - 1) + b"\x90") for n in range(1020, 1026)}
    assert "read" in outcomes.values() and "invalid" in outcomes.values()


@pytest.mark.parametrize("levels", [MAX_PLAIN_DEPTH - 2, MAX_PLAIN_DEPTH - 1, MAX_PLAIN_DEPTH, 5000])
def test_a_flattened_body_reads_as_proto_reads_it(levels: int) -> None:
    frame = encode(HostReply(5, 1, True, {"a": deep(levels, {"x": b"y"}), "b": [1.5, None]}))[0]
    assert check_read(frame) == "read"


def _flat(nodes: list[Any], code: int = 1) -> bytes:
    body = [[1, 4], "id", 5, "hid", 1, "ok", True, "value", *nodes]
    return (
        SIGNATURE + bytes((Command.HOST_REPLY,)) + msgpack.packb(msgpack.ExtType(code, msgpack.packb(body)))
    )


@pytest.mark.parametrize(
    "frame",
    [
        _flat([1]),
        _flat([[0, 2], 1, 2]),
        _flat([[0, 2], 1]),
        _flat([[0, 1], 1, 2]),
        _flat([[True, 1], "k", 1]),
        _flat([[1.0, 1], "k", 1]),
        _flat([[0, True]]),
        _flat([[0, -1]]),
        _flat([[0, 2**40]]),
        _flat([[0, MAX_CONTAINER_LEN + 1]]),
        _flat([[2, 1], 1]),
        _flat([[1, 1], 5, 1]),
        _flat([{}]),
        _flat([[0, 1, 2]]),
        _flat([[[0], 1]]),
        _flat([[1, 2], "k", 1, "k", 2]),
        _flat([1], code=2),
        _flat([1]) + b"\x00",
        SIGNATURE + bytes((Command.HOST_REPLY,)) + msgpack.packb(msgpack.ExtType(1, msgpack.packb({"a": 1}))),
        _flat([{"a": 1}]),
        SIGNATURE + bytes((Command.HOST_REPLY,)) + b"\xd4\xff\x00",
    ],
)
def test_a_flattened_body_proto_refuses_the_codec_refuses(frame: bytes) -> None:
    check_read(frame)


def test_mutated_frames_are_read_or_refused_as_proto_reads_them() -> None:
    """Thousands of frames a byte or a few away from valid ones (a fixed seed), flattened ones too."""
    rng = random.Random(2303)
    seeds = [encode(m)[0] for m in RECEIVED if type(m) is not HostReply or len(pack(m.value)) < 1000]
    seeds.append(encode(HostReply(5, 1, True, {"a": deep(MAX_PLAIN_DEPTH + 5), "b": [{"x": 1}, b"z"]}))[0])
    seen: dict[str, int] = {}
    for _ in range(6000):
        frame = bytearray(rng.choice(seeds))
        for _ in range(rng.choice((1, 1, 2, 3))):
            at = rng.randrange(4, len(frame))
            roll = rng.random()
            if roll < 0.7:
                frame[at] = rng.randrange(256)
            elif roll < 0.85:
                del frame[at]
            else:
                frame.insert(at, rng.randrange(256))
        result = check_read(bytes(frame))
        seen[result] = seen.get(result, 0) + 1
    assert seen.get("read", 0) > 200 and seen.get("invalid", 0) > 1000 and seen.get("too large", 0) > 10


def test_a_message_in_several_frames_is_refused() -> None:
    frame = encode(Cancel(1))[0]
    with pytest.raises(ValueError):
        CODEC.read([frame, frame])
    with pytest.raises(ValueError):
        CODEC.read([])


# -- writing -----------------------------------------------------------------------------------


class _Dict(dict[str, Any]):
    pass


class _Str(str):
    pass


class _Int(int):
    pass


class _Opaque:
    pass


class _Level(enum.IntEnum):
    LOW = 3


WRITTEN: list[Any] = [
    *VALUES, 2**64, -(2**63) - 1, 2**70, 2**2000, float("nan"), "x" * 31, "x" * 32, "x" * 256, "\ud800",
    bytearray(b"ab"), memoryview(b"mv"), (1, (2, 3)), _Dict(a=1), _Str("s"), _Int(5), Kind.REGION, _Level.LOW,
    {1: 2}, {"a": {b"k": 1}}, [_Opaque()], _Opaque(), 1 + 2j, [2**70, _Opaque()], [_Opaque(), 2**70],
    [2**70, _Opaque(), 2**3000], [2**3000, _Opaque()], list(range(MAX_CONTAINER_LEN + 1)),
    {"a": [0] * (MAX_CONTAINER_LEN + 1)}, [{"a": 1}, {2: 1}], [{2: 1}, [0] * (MAX_CONTAINER_LEN + 1)],
    deep(MAX_PLAIN_DEPTH - 3), deep(MAX_PLAIN_DEPTH - 2), deep(MAX_PLAIN_DEPTH - 1), deep(1500),
    deep(1500, {"k": [1, {"j": b"v"}]}), deep(1500, _Opaque()), deep(1500, 2**70), deep(1500, 2**3000),
    deep(1500, {1: 2}), "y" * (MAX_BODY_BYTES + 1), [b"z" * (MAX_BODY_BYTES // 2)] * 2,
]  # fmt: skip


def _proto(message: Any) -> bytes | ProtocolError:
    try:
        return encode(message)[0]
    except ProtocolError as exc:
        return exc


def _invalid_value(call_id: int, exc: ProtocolError) -> bytes:
    message = f"the return value cannot leave the sandbox: {exc}"
    return encode(Error(call_id, ErrorClass.INVALID_VALUE, message))[0]


@pytest.mark.parametrize("value", WRITTEN, ids=lambda v: type(v).__name__)
def test_a_result_error_or_chunk_is_written_as_proto_writes_it(value: Any) -> None:
    written = CODEC.result(7, value, 0.25, 0.125, 3, ["out"])
    sent = decode([written])
    peak_rss = sent.peak_rss if type(sent) is Result else 0
    reference = _proto(Result(7, value, 0.25, 0.125, peak_rss, 3, ["out"]))
    if isinstance(reference, ProtocolError):  # a body's size counts its peak RSS's digits: not compared
        expected = decode([_invalid_value(7, reference)])
        assert type(sent) is Error
        assert re.sub(r"\d+ bytes", "N bytes", sent.message) == re.sub(
            r"\d+ bytes", "N bytes", expected.message
        )
        assert sent == Error(7, expected.cls, sent.message)
    else:
        assert written == reference

    error = (ErrorClass.SCRIPT_ERROR, "thrown", "ScriptThrow", 1, 2, value, None)
    reference = _proto(Error(7, *error))
    if isinstance(reference, ProtocolError):
        reference = _invalid_value(7, reference)
    assert CODEC.error(7, *error) == reference

    reference = _proto(Chunk(7, 3, value))
    if isinstance(reference, ProtocolError):
        reference = encode(Chunk(7, 3, None, f"chunk has no wire form: {reference}"))[0]
    assert CODEC.chunk(7, 3, value) == reference


def _refused_alike(write: Callable[[], bytes], message: Any) -> None:
    reference = _proto(message)
    try:
        written: bytes | Exception = write()
    except (ValueError, OverflowError) as exc:
        written = exc
    if isinstance(reference, ProtocolError):
        assert isinstance(written, Exception), written[:80] if isinstance(written, bytes) else written
        assert str(written) == str(reference)
        assert isinstance(written, OverflowError) == isinstance(reference, TooLarge)
    else:
        assert written == reference


@pytest.mark.parametrize("value", WRITTEN, ids=lambda v: type(v).__name__)
def test_the_other_messages_are_written_or_refused_as_proto_does(value: Any) -> None:
    args = ["https://api.example", "{}", {"h": value}]
    _refused_alike(lambda: CODEC.host_call(7, 2, "http_post", args), HostCall(7, 2, "http_post", args))
    _refused_alike(lambda: CODEC.heartbeat({"x": value}), Heartbeat({"x": value}))
    sandbox = {"seccomp": {"active": True, "detail": value}}
    _refused_alike(lambda: CODEC.ready(12, [1], 64, sandbox, None), Ready(12, [1], 64, sandbox, None))
    _refused_alike(lambda: CODEC.goodbye(value), Goodbye(value))


def test_fixed_messages_are_written_as_proto_writes_them() -> None:
    assert CODEC.credit(7, 2, 1) == encode(Credit(7, 2, 1))[0]
    assert CODEC.credit(2**63 - 1, 0, 1024) == encode(Credit(2**63 - 1, 0, 1024))[0]
    timeout = (ErrorClass.SCRIPT_TIMEOUT, "late", "DeadlineExceeded", None, None, None, Limit.DEADLINE)
    assert CODEC.error(7, *timeout) == encode(Error(7, *timeout))[0]
    ready = (4242, [1], 64, {"landlock": {"active": False, "detail": "kernel 5.4"}}, {"net": "blocked"})
    assert CODEC.ready(*ready) == encode(Ready(*ready))[0]
    load = {"functions": [["render", 1], ["on_write", 2]]}
    written = CODEC.result(7, load, 0.0, 0.0, 0, [])
    assert written == encode(Result(7, load, peak_rss=decode([written]).peak_rss))[0]


def test_sizes_are_the_wire_s_sizes() -> None:
    items = [1, "x" * 300, {"content": "c", "tokens": 5}, deep(MAX_PLAIN_DEPTH + 10)]
    assert CODEC.sizes(items) == [len(pack(item)) for item in items]


def test_a_real_worker_drops_what_its_codec_refuses_and_serves_on() -> None:
    """A frame ``proto`` refuses, and a command only workers send, are dropped (and logged); the
    next CALL is served as ever."""
    with tempfile.TemporaryDirectory() as tmp:
        peer = BareWorker(tmp, keep_stderr=True)
        try:
            assert isinstance(peer.recv(), Ready)
            for frame in (
                _raw(Command.CREDIT, {"id": 1, "hid": 0, "n": 0}),
                encode(Result(1, 2))[0],
                SIGNATURE + b"\x02\x81\xa5stats\xc1",
            ):
                peer.sock.send_multipart([peer.identity, frame])
            source = "fn f(x) { x + 1 }"
            sha = hashlib.sha256(source.encode()).hexdigest()
            peer.send(Call(5, Op.CALL, Kind.REGION, sha, "f", [41], 5.0, "t", "f.rhai", source))
            reply = peer.recv()
            assert isinstance(reply, Result) and (reply.id, reply.value) == (5, 42)
            peer.proc.kill()
            peer.proc.wait()
            assert peer.proc.stderr is not None
            assert peer.proc.stderr.read().decode().count("dropped invalid message") == 3
        finally:
            peer.close()
