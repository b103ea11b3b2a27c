"""The native lane (``worker/wire.py``, ``rhai.Lane``) against ``proto``, the coordinator's codec.

For every CALL the lane runs, its frames must be byte for byte what ``proto`` writes for the same
call run on the same engine: the same value encoding (int widths, map order, strings, blobs,
floats), the same ERROR for a failure, the same refusal for a value without wire form.  For every
CALL it must not run, it runs nothing (``None``) and leaves the frame to the worker's codec
(``tests/worker/test_wire.py``).  Wall and CPU time and peak RSS are measurements: the reference
frame is written with the lane's figures.
"""

from __future__ import annotations

import hashlib
import random
import tempfile
from typing import Any

import msgpack
import pytest
import rhai
from bare_worker import BareWorker

from proto import (
    SIGNATURE,
    Call,
    Command,
    Error,
    ErrorClass,
    Kind,
    Op,
    ProtocolError,
    Ready,
    Result,
    decode,
    encode,
)
from proto.schema import MAX_ID
from proto.values import pack
from worker.cache import DEFAULT_MAX_SCRIPTS
from worker.engine import Engines, Outcome, ScriptFailure
from worker.host_bridge import HOST_FUNCTIONS, WAITS
from worker.loop import ended_frame
from worker.resident import ResidentStore
from worker.wire import new_lane

SOURCE = r"""
fn echo(x) { x }
fn pair(a, b) { [b, a] }
fn letter() { 'λ' }
fn blob_of(n) { let b = blob(n, 7); b }
fn keys() { #{zeta: 1, alpha: 2, "Beta": 3, "": 4, "é": 5} }
fn printed(x) { print(`saw ${x}`); debug(x); x * 2 }
fn chatty() { for i in 0..2000 { print("a line of output that fills the budget quickly") } 1 }
fn thrown() { throw #{code: 7} }
fn failing() { let a = [1]; a[5] }
fn spin() { loop {} }
fn pointer() { Fn("echo") }
fn deep(n) { let v = 1; for i in 0..n { v = [v]; } v }
fn stamp() { timestamp() }
fn wide(n) { let a = []; a.pad(n, 0); a }
fn ctx_len(ctx) { ctx.entries.len() }
fn ctx_sum(ctx) { let t = 0; for e in ctx.entries { t += e.tokens; } t }
"""
SHA = hashlib.sha256(SOURCE.encode()).hexdigest()
CALL_HEADER = SIGNATURE + bytes((Command.CALL,))


@pytest.fixture(scope="module")
def engines() -> Engines:
    return Engines(HOST_FUNCTIONS, WAITS)


@pytest.fixture(scope="module")
def script(engines: Engines) -> Any:
    return engines.compile(Kind.REGION, SOURCE, "lane.rhai")


@pytest.fixture
def lane(script: Any) -> rhai.Lane:
    lane = new_lane()
    lane.put(SHA, script.script)
    return lane


def frame_of(
    fn: str, args: list[Any], *, call_id: int = 9, timeout: float | None = 5.0, **extra: Any
) -> bytes:
    return encode(Call(call_id, Op.CALL, Kind.REGION, SHA, fn, args, timeout, "t", "lane.rhai", **extra))[0]


def raw_frame(body: dict[str, Any], **options: Any) -> bytes:
    return CALL_HEADER + msgpack.packb(body, use_bin_type=True, **options)


def base_body(fn: str = "echo", args: list[Any] | None = None) -> dict[str, Any]:
    return msgpack.unpackb(frame_of(fn, [1] if args is None else args)[5:])


def proto_error(call_id: int, failure: ScriptFailure) -> list[bytes]:
    f = failure
    return encode(Error(call_id, f.cls, f.message, f.kind, f.line, f.column, f.value, f.limit))


def proto_result(call_id: int, outcome: Outcome, figures: Result | None) -> list[bytes]:
    """``proto``'s RESULT (with the lane's figures, else zeros), or its ERROR ``InvalidValue``."""
    wall, cpu, peak_rss = (0.0, 0.0, 0) if figures is None else (figures.wall, figures.cpu, figures.peak_rss)
    try:
        return encode(Result(call_id, outcome.value, wall, cpu, peak_rss, outcome.ops, outcome.output))
    except ProtocolError as exc:
        message = f"the return value cannot leave the sandbox: {exc}"
        return encode(Error(call_id, ErrorClass.INVALID_VALUE, message))


def python_path(
    engines: Engines, script: Any, frame: bytes, figures: Result | None, store: ResidentStore | None = None
) -> list[bytes]:
    """What ``proto`` writes for ``frame`` run on the same engine without the lane (a resident
    CALL's list from ``store``); with the lane's figures if given."""
    call = decode([frame])
    assert type(call) is Call
    try:
        args = call.args if store is None else store.args_for(call.tenant, call.resident, call.args)
        outcome = engines.run(script, call.fn, args, call.timeout, None)
    except ScriptFailure as failure:
        return proto_error(call.id, failure)
    return proto_result(call.id, outcome, figures)


INTS = [
    0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1,
    -1, -32, -33, -128, -129, -32768, -32769, -(2**31), -(2**31) - 1, -(2**63),
]  # fmt: skip
FLOATS = [0.0, -0.0, 1.5, -2.25, 1e300, 5e-324, float("inf"), float("-inf")]
STRINGS = ["", "a" * 31, "b" * 32, "c" * 255, "d" * 256, "e" * 65535, "f" * 65536, "λ→✓ 😀", "\x00nul"]
NESTED = [
    None, True, False, [], {}, [1, [2, [3, [4]]]], {"b": 1, "a": [1, {"z": None, "y": 2.5}]},
    list(range(15)), list(range(16)), list(range(65536)), {f"k{i:03}": i for i in range(16)},
    {f"k{i:03}": i for i in range(15)}, [b"", b"\x00\xff" * 200, b"z" * 70000],
]  # fmt: skip


@pytest.mark.parametrize("value", INTS + FLOATS + STRINGS + NESTED, ids=lambda v: repr(v)[:40])
def test_an_echoed_value_leaves_as_the_python_path_writes_it(
    lane: rhai.Lane, engines: Engines, script: Any, value: Any
) -> None:
    frame = frame_of("echo", [value])
    ended = lane.run(frame)
    assert type(ended) is bytes
    sent = [ended]
    figures = decode(sent)
    assert isinstance(figures, Result)
    assert sent == python_path(engines, script, frame, figures)


@pytest.mark.parametrize(
    ("fn", "args"),
    [
        ("pair", [1, "x"]),
        ("letter", []),
        ("blob_of", [300]),
        ("keys", []),
        ("printed", [21]),
        ("chatty", []),  # output truncated: the marker line is added as the Python path adds it
        ("deep", [998]),  # the deepest value written plainly
        ("wide", [9999]),
    ],
)
def test_a_result_leaves_as_the_python_path_writes_it(
    lane: rhai.Lane, engines: Engines, script: Any, fn: str, args: list[Any]
) -> None:
    frame = frame_of(fn, args, timeout=30.0)
    ended = lane.run(frame)
    assert type(ended) is bytes
    figures = decode([ended])
    assert isinstance(figures, Result)
    assert [ended] == python_path(engines, script, frame, figures)


def test_args_the_python_path_reads_specially_reach_the_script_alike(lane: rhai.Lane) -> None:
    """A float32, a uint64 beyond i64 (the nearest float), a binary (a blob), a repeated map key
    (the last wins) and a map's key order: the script sees what ``convert`` gives it."""
    body = base_body("echo", [0])
    body["args"] = [[1.5, 2**64 - 1, b"\x01\x02", {"b": 1, "a": 2}]]
    ended = lane.run(raw_frame(body, use_single_float=True))
    assert type(ended) is bytes
    assert decode([ended]).value == [1.5, float(2**64 - 1), b"\x01\x02", {"a": 2, "b": 1}]
    # the same key twice in one map (a dict cannot say it): the last one wins, as in a Python dict
    pairs = b"".join(msgpack.packb(k) + msgpack.packb(v) for k, v in body.items() if k != "args")
    args = msgpack.packb("args") + b"\x91\x82" + msgpack.packb("k") + b"\x01" + msgpack.packb("k") + b"\x02"
    repeated = CALL_HEADER + bytes((0x80 | len(body),)) + pairs + args
    ended = lane.run(repeated)
    assert type(ended) is bytes and decode([ended]).value == {"k": 2}


@pytest.mark.parametrize(
    ("fn", "args", "timeout"),
    [
        ("thrown", [], 5.0),
        ("failing", [], 5.0),
        ("spin", [], 0.05),
        ("echo", [], 5.0),  # no such arity
        ("missing", [1], 5.0),
        ("echo", [1], float("inf")),  # the plain reader takes it; the call refuses it
    ],
)
def test_a_failure_ends_in_the_python_paths_error(
    lane: rhai.Lane, engines: Engines, script: Any, fn: str, args: list[Any], timeout: float
) -> None:
    frame = frame_of(fn, args, timeout=timeout)
    ended = lane.run(frame)
    assert type(ended) is tuple and len(ended) == 2 and ended[0] == 9
    sent = [ended_frame(ended)]
    if fn == "spin":  # the elapsed time is part of a deadline's message: compare the rest
        expected = decode(python_path(engines, script, frame, None))
        got = decode(sent)
        assert (got.id, got.cls, got.kind, got.limit) == (
            expected.id,
            expected.cls,
            expected.kind,
            expected.limit,
        )
    else:
        assert sent == python_path(engines, script, frame, None)


@pytest.mark.parametrize(("fn", "args"), [("pointer", []), ("deep", [999]), ("stamp", [])])
def test_a_value_the_wire_refuses_or_flattens_ends_as_proto_writes_it(
    lane: rhai.Lane, engines: Engines, script: Any, fn: str, args: list[Any]
) -> None:
    """Written from its Python form by the worker's codec: flattened, or the ERROR ``InvalidValue``
    (a function pointer), or the failure of its conversion (a timestamp has no Python form)."""
    frame = frame_of(fn, args, timeout=30.0)
    ended = lane.run(frame)
    assert ended is not None
    sent = [ended_frame(ended)]
    got = decode(sent)
    reference = python_path(engines, script, frame, got if isinstance(got, Result) else None)
    expected = decode(reference)
    assert type(got) is type(expected)
    if isinstance(got, Result):  # flattened
        assert pack(got.value) == pack(expected.value)  # ``==`` on a value this deep recurses too far
    assert sent == reference


def _with(**changes: Any) -> bytes:
    body = base_body()
    body.update(changes)
    return raw_frame({k: v for k, v in body.items() if v is not _DROP})


_DROP = object()


@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(
            frame_of(
                "echo",
                [{"entries": []}],
                resident={"key": "k" * 16, "version": 1, "base": None, "drop": [], "entries": []},
            ),
            id="resident",
        ),
        pytest.param(
            encode(Call(9, Op.CALL, Kind.PROVIDER, SHA, "echo", [1], 5.0, "t", "x"))[0], id="provider"
        ),
        pytest.param(encode(Call(9, Op.LOAD, Kind.REGION, SHA, "", [], 5.0, "t", "x"))[0], id="load"),
        pytest.param(
            encode(Call(9, Op.CALL, Kind.REGION, "0" * 64, "echo", [1], 5.0, "t", "x"))[0], id="unknown"
        ),
        pytest.param(_with(args=[msgpack.ExtType(1, b"x")]), id="ext-arg"),
        pytest.param(_with(args=[{1: 2}]), id="int-key"),
        pytest.param(_with(args=[{b"k": 2}]), id="bytes-key"),
        pytest.param(_with(timeout=5), id="int-timeout"),
        pytest.param(_with(timeout=-1.0), id="negative-timeout"),
        pytest.param(_with(timeout=float("nan")), id="nan-timeout"),
        pytest.param(_with(window=0), id="window-0"),
        pytest.param(_with(window=1025), id="window-1025"),
        pytest.param(_with(id=-1), id="negative-id"),
        pytest.param(_with(id="9"), id="str-id"),
        pytest.param(_with(op="Call"), id="op-case"),
        pytest.param(_with(tenant=None), id="nil-tenant"),
        pytest.param(_with(name=_DROP), id="no-name"),
        pytest.param(_with(source=_DROP), id="no-source"),
        pytest.param(_with(source=b"fn echo(x) { x }"), id="binary-source"),
        pytest.param(_with(extra=1), id="unknown-field"),
        pytest.param(_with(args={"a": 1}), id="args-map"),
        pytest.param(frame_of("echo", [1]) + b"\xc0", id="trailing-bytes"),
        pytest.param(frame_of("echo", ["x" * 40])[:-3], id="truncated"),
        pytest.param(frame_of("echo", [1])[:5] + b"\x91\x01", id="body-not-a-map"),
        pytest.param(b"RHP\x02\x10" + frame_of("echo", [1])[5:], id="other-version"),
        pytest.param(SIGNATURE + bytes((Command.RESULT,)) + frame_of("echo", [1])[5:], id="not-a-call"),
        pytest.param(CALL_HEADER[:4], id="short"),
        pytest.param(frame_of("echo", [1]).replace(msgpack.packb("t"), b"\xa1\xff", 1), id="invalid-utf8"),
    ],
)
def test_a_call_the_lane_cannot_take_exactly_is_left_untouched(lane: rhai.Lane, frame: bytes) -> None:
    assert type(lane.run(_with())) is bytes  # the control: the same call, plainly valid, runs
    lane.take_used()
    assert lane.run(frame) is None
    assert lane.take_used() == []


def test_nesting_past_the_readers_depth_is_left_to_the_python_path(lane: rhai.Lane) -> None:
    value: Any = 1
    for _ in range(127):
        value = [value]
    assert type(lane.run(frame_of("echo", [value]))) is bytes
    assert lane.run(frame_of("echo", [[value]])) is None


def test_a_source_sent_along_is_ignored_as_the_python_path_ignores_it(lane: rhai.Lane) -> None:
    ended = lane.run(frame_of("echo", [5], source="fn echo(x) { 0 }"))
    assert type(ended) is bytes and decode([ended]).value == 5


def test_scripts_come_and_go(script: Any) -> None:
    lane = new_lane()
    frame = frame_of("echo", [1])
    assert lane.run(frame) is None and len(lane) == 0
    lane.put(SHA, script.script)
    assert type(lane.run(frame)) is bytes and len(lane) == 1
    lane.discard(SHA)
    assert lane.run(frame) is None and len(lane) == 0


def test_take_used_lists_scripts_least_recently_used_first(engines: Engines) -> None:
    lane = new_lane()
    shas = []
    for n in range(3):
        source = f"fn f() {{ {n} }}"
        sha = hashlib.sha256(source.encode()).hexdigest()
        lane.put(sha, engines.compile(Kind.REGION, source, "x").script)
        shas.append(sha)
    assert lane.take_used() == []
    for sha in (shas[2], shas[0], shas[2], shas[1]):
        body = base_body("f", [])
        body["sha"] = sha
        assert type(lane.run(raw_frame(body))) is bytes
    assert lane.take_used() == [shas[0], shas[2], shas[1]]
    assert lane.take_used() == []


def test_the_id_bound_is_protos(lane: rhai.Lane) -> None:
    assert type(lane.run(_with(id=MAX_ID))) is bytes
    assert lane.run(_with(id=MAX_ID + 1)) is None


def test_a_worker_keeps_the_scripts_its_lane_runs_in_its_cache_order() -> None:
    """A real worker: a script called only through the lane stays recently used in the worker's
    LRU cache, so filling the cache evicts the scripts nobody called instead."""
    with tempfile.TemporaryDirectory() as tmp:
        peer = BareWorker(tmp)
        try:
            assert isinstance(peer.recv(), Ready)
            sources = [f"fn f() {{ {n} }}" for n in range(DEFAULT_MAX_SCRIPTS + 1)]
            shas = [hashlib.sha256(source.encode()).hexdigest() for source in sources]

            def call(n: int, op: Op, source: str | None) -> Any:
                peer.send(Call(next(peer.ids), op, Kind.REGION, shas[n], "f", [], 5.0, "t", "f.rhai", source))
                return peer.recv()

            for n in range(DEFAULT_MAX_SCRIPTS):  # the cache is now full; script 0 is the oldest
                assert isinstance(call(n, Op.LOAD, sources[n]), Result)
            for _ in range(3):
                assert call(0, Op.CALL, None).value == 0  # served by the lane alone
            assert isinstance(call(DEFAULT_MAX_SCRIPTS, Op.LOAD, sources[-1]), Result)  # evicts one
            assert call(0, Op.CALL, None).value == 0
            missing = call(1, Op.CALL, None)
            assert isinstance(missing, Error) and missing.cls == ErrorClass.SCRIPT_MISSING
        finally:
            peer.close()


# -- resident lists -------------------------------------------------------------

KEY = "k" * 24


def entry(i: int) -> dict[str, Any]:
    return {"content": f"entry {i} " + "x" * (i % 40), "tokens": i}


def resident_frame(
    base: int | None, version: int, drop: list[int], entries: list[Any], *, tenant: str = "t", key: str = KEY
) -> bytes:
    resident = {"key": key, "version": version, "base": base, "drop": drop, "entries": entries}
    call = Call(9, Op.CALL, Kind.REGION, SHA, "ctx_sum", [{"region": {"name": "r"}, "entries": []}], 5.0,
                tenant, "lane.rhai", resident=resident)  # fmt: skip
    return encode(call)[0]


STEPS = [  # (base, version, drop, entries, tenant): whole, appends, the oldest dropped, middle ones, misses
    (None, 1, [], [entry(i) for i in range(30)], "t"),
    (1, 2, [], [entry(30), entry(31)], "t"),
    (2, 3, [0, 1, 2], [], "t"),
    (3, 4, [1, 5, 28], [entry(40)], "t"),
    (4, 4, [], [], "t"),
    (4, 5, [], [entry(41)], "other"),  # another tenant: nothing there under this key
    (9, 10, [], [], "t"),  # a version never sent: missing, and the list is forgotten
    (5, 6, [], [], "t"),
    (None, 7, [], [entry(50)], "t"),
    (7, 8, [0], [], "t"),  # emptied
]


def test_resident_renders_leave_as_the_python_path_writes_them(engines: Engines, script: Any) -> None:
    """Step by step, the lane on one store and the Python path on another send the same frames and
    keep the same lists (the lane sizes an item by its bytes in the frame, the Python path by
    packing it again: the same for every value the coordinator sends)."""
    lane_store, python_store = ResidentStore(), ResidentStore()
    lane = new_lane(lane_store.lists)
    lane.put(SHA, script.script)
    for base, version, drop, entries, tenant in STEPS:
        frame = resident_frame(base, version, drop, entries, tenant=tenant)
        ended = lane.run(frame)
        assert ended is not None
        sent = [ended_frame(ended)]
        reply = decode(sent)
        figures = reply if isinstance(reply, Result) else None
        assert sent == python_path(engines, script, frame, figures, python_store), (base, version)
        assert (len(lane_store), lane_store.bytes) == (len(python_store), python_store.bytes)


def test_the_lane_and_the_python_path_share_one_store(engines: Engines, script: Any) -> None:
    store = ResidentStore()
    lane = new_lane(store.lists)
    lane.put(SHA, script.script)
    whole = resident_frame(None, 1, [], [entry(1), entry(2)])
    assert isinstance(decode(python_path(engines, script, whole, None, store)), Result)
    ended = lane.run(resident_frame(1, 2, [0], [entry(3)]))  # the lane continues the Python path's list
    assert type(ended) is bytes and decode([ended]).value == 2 + 3
    reply = decode(python_path(engines, script, resident_frame(2, 3, [], [entry(4)]), None, store))
    assert isinstance(reply, Result) and reply.value == 2 + 3 + 4  # and the other way round


def test_a_tenant_never_reaches_another_tenants_list(script: Any) -> None:
    store = ResidentStore()
    lane = new_lane(store.lists)
    lane.put(SHA, script.script)
    assert type(lane.run(resident_frame(None, 1, [], [entry(7)], tenant="acme"))) is bytes
    assert lane.run(resident_frame(1, 2, [], [], tenant="globex")) == (9, "missing", 1)
    ended = lane.run(resident_frame(1, 2, [], [], tenant="acme"))
    assert type(ended) is bytes and decode([ended]).value == 7


def _resident_with(**changes: Any) -> bytes:
    body = msgpack.unpackb(resident_frame(None, 1, [], [entry(1)])[5:])
    body["resident"] = {k: v for k, v in {**body["resident"], **changes}.items() if v is not _DROP}
    return raw_frame(body)


@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(_resident_with(key="k" * 15), id="key-too-short"),
        pytest.param(_resident_with(key="k" * 129), id="key-too-long"),
        pytest.param(_resident_with(key=b"k" * 20), id="binary-key"),
        pytest.param(_resident_with(version=-1), id="negative-version"),
        pytest.param(_resident_with(version=MAX_ID + 1), id="version-past-max-id"),
        pytest.param(_resident_with(base=1.0), id="float-base"),
        pytest.param(_resident_with(drop=[0]), id="drop-without-base"),
        pytest.param(_resident_with(base=1, drop=[2, 1]), id="drop-descending"),
        pytest.param(_resident_with(base=1, drop=[1, 1]), id="drop-repeated"),
        pytest.param(_resident_with(base=1, drop=[-1]), id="drop-negative"),
        pytest.param(_resident_with(base=1, drop=["0"]), id="drop-str"),
        pytest.param(_resident_with(entries={"a": 1}), id="entries-map"),
        pytest.param(_resident_with(entries=[msgpack.ExtType(1, b"")]), id="entries-ext"),
        pytest.param(_resident_with(extra=1), id="unknown-field"),
        pytest.param(_resident_with(drop=_DROP), id="no-drop"),
        pytest.param(_resident_with(base=_DROP), id="no-base"),
        pytest.param(
            _with(args=[[]], resident={"key": KEY, "version": 1, "base": None, "drop": [], "entries": []}),
            id="first-arg-not-a-map",
        ),
    ],
)
def test_a_resident_map_the_lane_cannot_take_exactly_is_left_untouched(script: Any, frame: bytes) -> None:
    store = ResidentStore()
    lane = new_lane(store.lists)
    lane.put(SHA, script.script)
    assert type(lane.run(_resident_with())) is bytes  # the control: the plainly valid map runs
    assert lane.run(frame) is None
    assert len(store) == 1  # and the store is untouched


def test_mutated_frames_are_run_exactly_as_the_python_path_runs_them_or_left_to_it(
    engines: Engines, script: Any
) -> None:
    """Thousands of frames one byte or a few bytes away from valid ones (a fixed seed): whatever
    the lane runs ends exactly as the Python path ends it (which must accept the frame too), and
    nothing else runs."""
    rng = random.Random(1303)
    seeds = [
        frame_of("echo", [{"a": [1, 2.5, "x", None, True, b"\x00"], "b": {"c": -70000}}]),
        frame_of("pair", [300, "y" * 40]),
        resident_frame(None, 1, [], [entry(1), entry(2)]),
        resident_frame(1, 2, [0], [entry(3)]),
    ]
    ran = 0
    for _ in range(4000):
        frame = bytearray(rng.choice(seeds))
        for _ in range(rng.choice((1, 1, 2, 3))):
            at = rng.randrange(5, len(frame))
            if rng.random() < 0.8:
                frame[at] = rng.randrange(256)
            else:
                del frame[at]
        lane_store, python_store = ResidentStore(), ResidentStore()
        for store in (lane_store, python_store):  # both hold version 1 of KEY, for the deltas
            store.args_for(
                "t", {"key": KEY, "version": 1, "base": None, "drop": [], "entries": [entry(0)]}, [{}]
            )
        lane = new_lane(lane_store.lists)
        lane.put(SHA, script.script)
        ended = lane.run(bytes(frame))
        if ended is None:
            continue
        ran += 1
        sent = [ended_frame(ended)]
        call = decode([bytes(frame)])
        assert type(call) is Call, "the lane ran a frame the Python path refuses"
        reply = decode(sent)
        figures = reply if isinstance(reply, Result) else None
        store = python_store if call.resident is not None else None
        assert sent == python_path(engines, script, bytes(frame), figures, store), bytes(frame)
    assert ran > 100  # the mutations leave many frames valid (a changed string byte, a number)
