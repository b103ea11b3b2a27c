"""The binding's brokered host calls (``rhai.HostLine``) against ``proto``, the coordinator's codec.

A provider call on a script thread writes its HOST_CALL frame natively and gets its HOST_REPLY
from the loop thread's lane (``worker.wire``) straight into its slot.  Every frame it sends must
be byte for byte what ``proto.encode(HostCall(...))`` writes (the arguments as a Python host
function received them), every value it gets back what ``proto``'s reading gives, and every way a
wait ends (reply, refusal, deadline, cancel) the one a Python host function's wait ended in.  A
value the lane does not write or read from Rhai values takes the worker's codec
(``worker.wire.CODEC``, native too), from its Python form.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
import rhai
import zmq
import zmq.backend.cython._zmq as zmq_extension

from proto import SIGNATURE, Command, HostCall, HostReply, Kind, ProtocolError, encode
from proto.host import BROKERED_FUNCTIONS
from proto.values import MAX_PLAIN_DEPTH
from worker.engine import Engines, ScriptFailure, translate
from worker.host_bridge import HOST_FUNCTIONS, WAITS, CallChannel, ChannelBinding, Outbox
from worker.wire import CODEC, new_lane

SOURCE = r"""
fn post(url, body, headers) { http_post(url, body, headers) }
fn post2(url, body) { http_post(url, body) }
fn get(url) { http_get(url) }
fn env(name) { env_var(name) }
fn guarded(url) { let r = (); try { r = http_get(url); } catch (e) { r = `caught ${e.kind}`; } r }
fn deep_headers(n) { let v = 1; for i in 0..n { v = [v]; } http_post("u", "b", #{v: v}) }
fn pointer() { http_post("u", "b", #{f: Fn("get")}) }
fn twice(url) { http_get(url) + http_get(url + "/2") }
"""
CALL_ID = 41

INTS = [0, 127, 128, 65536, 2**32, 2**63 - 1, -1, -33, -129, -(2**31) - 1, -(2**63)]
FLOATS = [0.0, -0.0, 1.5, 1e300, 5e-324, float("inf")]
STRINGS = ["", "a" * 31, "b" * 32, "c" * 256, "f" * 65536, "λ→✓ 😀", "\x00nul"]
NESTED = [
    None, True, False, [], {}, [1, [2, [3, [4]]]], {"b": 1, "a": [1, {"z": None, "y": 2.5}]},
    list(range(16)), {f"k{i:03}": i for i in range(16)}, [b"", b"\x00\xff" * 200, b"z" * 6000],
]  # fmt: skip
VALUES = INTS + FLOATS + STRINGS + NESTED


@pytest.fixture(scope="module")
def engines() -> Engines:
    return Engines(HOST_FUNCTIONS, WAITS)


@pytest.fixture(scope="module")
def script(engines: Engines) -> Any:
    return engines.compile(Kind.PROVIDER, SOURCE, "line.rhai")


@pytest.fixture(scope="module")
def reference() -> Any:
    """The same script on an engine whose brokered functions are Python functions that record the
    arguments they receive: what ``proto.encode`` is given to encode."""
    engine = rhai.Engine(json_functions=True, check_argument_sizes=False)
    for name in ("http_get", "http_post", "env_var"):

        def record(*args: Any, name: str = name) -> None:
            RECORDED.append((name, list(args)))

        for types in BROKERED_FUNCTIONS[Kind.PROVIDER][name].signatures:
            engine.register_fn(name, record, types=list(types))
    return engine.compile(SOURCE, name="line.rhai")


RECORDED: list[tuple[str, list[Any]]] = []


class Peer:
    """One provider call's channel on a script thread, on a real socket (``rhai.Wire`` over a
    DEALER, this test holding the ROUTER); its replies routed as the worker's loop thread routes
    them: the wire with the lane, else the worker's codec and ``feed``."""

    def __init__(self, script: Any) -> None:
        self.context = zmq.Context()
        self.router = self.context.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        endpoint = f"inproc://line-{id(self)}"
        self.router.bind(endpoint)
        self.dealer = self.context.socket(zmq.DEALER)
        self.dealer.setsockopt(zmq.LINGER, 0)
        self.dealer.setsockopt(zmq.ROUTING_ID, b"w")
        self.dealer.connect(endpoint)
        self.wire = rhai.Wire(self.dealer.underlying, fd=self.dealer.FD, library=zmq_extension.__file__)
        self.channel = CallChannel(CALL_ID, Outbox(self.wire), 16)
        self.lane = new_lane()
        self.lane.open_line(self.channel.line)
        self.script = script
        self.sent: list[bytes] = []
        self.ended: Any = None
        self.failure: ScriptFailure | None = None
        self._thread: threading.Thread | None = None

    def start(self, fn: str, args: list[Any], timeout: float | None = 10.0) -> None:
        def run() -> None:
            try:
                with ChannelBinding(self.channel):
                    self.ended = self.script.script.call(fn, *args, timeout=timeout)
            except Exception as exc:
                self.failure = translate(exc)

        self._thread = threading.Thread(target=run)
        self._thread.start()

    def frame(self, n: int = 1, wait: float = 5.0) -> bytes:
        """The ``n``-th frame the call sent."""
        while len(self.sent) < n:
            assert self.router.poll(int(wait * 1000)), "no HOST_CALL came"
            identity, frame = self.router.recv_multipart()
            assert identity == b"w"
            self.sent.append(frame)
        return self.sent[n - 1]

    def reply(self, hid: int, ok: bool, value: Any) -> bool:
        """Send a HOST_REPLY; ``True`` if the wire and lane handed it on, ``False`` if it reached
        the wait through the worker's codec and ``feed``."""
        self.router.send_multipart([b"w", *encode(HostReply(CALL_ID, hid, ok, value))])
        return self.receive()

    def receive(self) -> bool:
        messages = self.wire.wait(self.lane, 0.3)
        if not messages:
            return True
        assert len(messages) == 1
        self.channel.feed(CODEC.read(messages[0]))
        return False

    def join(self) -> Any:
        assert self._thread is not None
        self._thread.join(10)
        assert not self._thread.is_alive()
        return self.ended

    def close(self) -> None:
        self.channel.cancel()
        if self._thread is not None:
            self._thread.join(10)
        self.wire.close()
        self.dealer.close()
        self.router.close()
        self.context.term()


@pytest.fixture
def peer(script: Any) -> Iterator[Peer]:
    p = Peer(script)
    yield p
    p.close()


def python_frame(reference: Any, fn: str, args: list[Any], hid: int = 1) -> bytes | str:
    """What ``proto`` writes for this call's host call ``hid``: its frame, or the text thrown."""
    RECORDED.clear()
    reference.call(fn, *args)
    name, sent = RECORDED[hid - 1]
    try:
        return encode(HostCall(CALL_ID, hid, name, sent))[0]
    except ProtocolError as exc:
        return f"value cannot leave the sandbox: {exc}"


@pytest.mark.parametrize("value", VALUES, ids=lambda v: repr(v)[:40])
def test_a_host_call_leaves_as_the_python_codec_writes_it_and_its_reply_comes_back(
    peer: Peer, reference: Any, value: Any
) -> None:
    args = ["https://api.example/v1", '{"a": 1}', {"Authorization": "Bearer k", "x": value}]
    peer.start("post", args)
    assert peer.frame() == python_frame(reference, "post", args)
    assert peer.reply(1, True, {"status": 200, "body": value})  # the wire and lane handed it on
    assert peer.join() == {"status": 200, "body": value}
    assert peer.failure is None


@pytest.mark.parametrize(
    ("fn", "args"),
    [("post2", ["u", "b"]), ("get", ["https://x"]), ("env", ["GROQ_API_KEY"]), ("env", ["é" * 300])],
)
def test_every_brokered_signature_is_written_as_the_python_codec_writes_it(
    peer: Peer, reference: Any, fn: str, args: list[Any]
) -> None:
    peer.start(fn, args)
    assert peer.frame() == python_frame(reference, fn, args)
    peer.reply(1, True, "v")
    assert peer.join() == "v"


def test_a_value_the_wire_flattens_is_written_as_proto_writes_it(peer: Peer, reference: Any) -> None:
    peer.start("deep_headers", [MAX_PLAIN_DEPTH + 50])
    sent = peer.frame()
    assert sent == python_frame(reference, "deep_headers", [MAX_PLAIN_DEPTH + 50])
    assert type(msgpack.unpackb(sent[5:], max_ext_len=1 << 24)) is msgpack.ExtType  # flattened
    peer.reply(1, True, 7)
    assert peer.join() == 7


def test_a_value_without_wire_form_is_thrown_with_proto_s_words(peer: Peer, reference: Any) -> None:
    peer.start("pointer", [])
    assert peer.join() is None
    assert peer.failure is not None and not peer.router.poll(100)  # nothing sent
    expected = python_frame(reference, "pointer", [])
    assert isinstance(expected, str) and peer.failure.message == expected


@pytest.mark.parametrize(
    "value",
    [
        [[[[1]]]],
        {"status": 200, "body": "x" * 100},
    ],
)
def test_a_reply_the_lane_does_not_read_plainly_reaches_the_wait_through_the_codec(
    peer: Peer, value: Any
) -> None:
    """A body with a key the Python reader ignores, or a reply deeper than the lane reads: the
    worker's codec reads it and ``feed`` hands it to the native wait."""
    peer.start("get", ["u"])
    peer.frame()
    body = {"id": CALL_ID, "hid": 1, "ok": True, "value": value, "extra": 1}
    peer.router.send_multipart([b"w", SIGNATURE + bytes((Command.HOST_REPLY,)) + msgpack.packb(body)])
    assert not peer.receive()
    assert peer.join() == value


def test_a_deep_reply_goes_through_the_codec(peer: Peer) -> None:
    deep: Any = 1
    for _ in range(200):  # past what the lane reads natively, within what the wire reads plainly
        deep = [deep]
    peer.start("get", ["u"])
    peer.frame()
    assert not peer.reply(1, True, deep)
    assert peer.join() == deep


def test_a_refusal_is_thrown_into_the_script(peer: Peer) -> None:
    peer.start("guarded", ["u"])
    peer.frame()
    assert peer.reply(1, False, {"kind": "api", "message": "HTTP 500"})
    assert peer.join() == "caught api"


def test_host_call_ids_count_across_calls_and_replies_for_nobody_are_left_alone(peer: Peer) -> None:
    peer.start("twice", ["u"])
    peer.frame(1)
    assert not peer.reply(2, True, "early")  # no wait is for host call 2 yet: the codec's
    assert peer.reply(1, True, "a")
    assert msgpack.unpackb(peer.frame(2)[5:])["hid"] == 2
    assert peer.reply(2, True, "b")
    assert peer.join() == "ab"
    assert peer.channel.line.host_calls == 2 and peer.channel.line.pending == 0
    peer.lane.close_line(CALL_ID)
    assert not peer.reply(3, True, "late")


def test_the_deadline_ends_the_wait_as_the_python_path_did(peer: Peer) -> None:
    """As a Python host function's wait ended: the deadline, checked again once the host function
    returns, ends the script (``ScriptTimeout``)."""
    started = time.monotonic()
    peer.start("get", ["u"], timeout=0.3)
    peer.frame()
    assert peer.join() is None
    assert 0.25 < time.monotonic() - started < 5
    assert peer.failure is not None
    failure = peer.failure
    assert (failure.cls, failure.kind, failure.message, failure.limit, failure.line, failure.column) == (
        "ScriptTimeout",
        "DeadlineExceeded",
        "script exceeded its deadline",
        "deadline",
        None,
        None,
    )


def test_cancel_ends_the_wait_as_the_python_path_did(peer: Peer) -> None:
    peer.start("get", ["u"])
    peer.frame()
    peer.channel.cancel()
    assert peer.join() is None
    assert peer.failure is not None
    assert (peer.failure.cls, peer.failure.kind, peer.failure.message) == (
        "Cancelled",
        "Cancelled",
        "call cancelled",
    )


def test_a_brokered_function_outside_a_channel_throws() -> None:
    engines = Engines(HOST_FUNCTIONS, WAITS)
    source = 'fn f() { let r = (); try { http_get("u"); } catch (e) { r = e; } r }'
    compiled = engines.compile(Kind.PROVIDER, source, "x")
    assert compiled.script.call("f") == "provider host channel closed"
