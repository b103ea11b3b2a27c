"""Audit of the I/O prose of docs/scripts/host-functions.md#transport, docs/scripts/errors.md#retries beyond
the numbered cases: real server, real pool, real sockets."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Coroutine
from typing import Any

import pytest

from coordinator.bench.standin import Reply, Request, StandinServer
from coordinator.egress import Egress, EgressPolicy, HostError, SseFramer
from coordinator.providers.clock import ManualClock
from coordinator.providers.failures import ProviderError, RequestFailed

from .harness import Harness
from .server import redirect_url

REQ: dict[str, Any] = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}
INIT = "fn initialize(config) { config }\n"


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


async def fetch(policy: EgressPolicy, method: str, url: str, **kw: Any) -> str:
    async with Egress() as egress:
        return await egress.fetch(policy, method, url, **kw)


async def collect(policy: EgressPolicy, url: str, body: str, **kw: Any) -> list[str]:
    async with Egress() as egress:
        return [p async for p in egress.stream(policy, url, body=body, **kw)]


def hits(server: StandinServer, path: str) -> int:
    return sum(1 for r in server.requests if r.path == path)


def settled_hits(server: StandinServer, path: str, expected: int) -> int:
    """``hits`` once the server has seen ``expected`` (its threads may record a request a little after
    the client gave up on it, later still on a loaded machine), then a moment more for any extra one."""
    deadline = time.monotonic() + 5.0
    while hits(server, path) < expected and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.1)
    return hits(server, path)


class _SlowOnce:
    """``/audit-slow-once/<key>``: the first request per key stalls, later ones answer at once."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.lock = threading.Lock()

    def __call__(self, request: Request) -> Reply:
        key = request.path.split("/")[2]
        with self.lock:
            first = key not in self.seen
            self.seen.add(key)
        if first:
            time.sleep(1.0)
        return Reply.json({"text": "fast" if not first else "late"})


@pytest.fixture(scope="module", autouse=True)
def _routes(server: StandinServer) -> None:
    slow_once = _SlowOnce()
    server.route("GET", "/audit-slow-once/", slow_once)
    server.route("POST", "/audit-slow-once/", slow_once)
    server.route(
        "POST",
        "/audit-sse-stray",
        lambda _r: Reply(
            200,
            {"Content-Type": "text/event-stream"},
            stream=[b'data: {"a":1}\n\n\xc3', 0.05, b'data: {"b":2}\n\n', 0.05, b'data: {"c":3}\n\n'],
        ),
    )
    server.route("GET", "/audit-429-odd", lambda r: Reply(429, {"Retry-After": r.query["ra"]}, b"slow down"))


# -- docs/scripts/host-functions.md#transport unary transport retry: "timed out" is one of the retried
# failures


def test_timed_out_unary_request_is_retried(server: StandinServer, policy: EgressPolicy) -> None:
    """The first request stalls past the per-request timeout; the executor's retry gets the answer."""
    text = run(fetch(policy, "GET", server.url + "/audit-slow-once/t1", timeout=0.3))
    assert json.loads(text) == {"text": "fast"}
    assert hits(server, "/audit-slow-once/t1") == 2


def test_timed_out_unary_request_gets_two_extra_attempts(server: StandinServer, policy: EgressPolicy) -> None:
    before = hits(server, "/slow/0.8")
    with pytest.raises(HostError) as info:
        run(fetch(policy, "GET", server.url + "/slow/0.8", timeout=0.15))
    assert info.value.value["kind"] == "transport" and "timed out" in info.value.value["message"]
    assert info.value.failure_kind == "timeout"
    assert settled_hits(server, "/slow/0.8", before + 3) - before == 3


def test_timed_out_stream_is_not_retried(server: StandinServer, policy: EgressPolicy) -> None:
    with pytest.raises(HostError) as info:
        run(collect(policy, server.url + "/audit-slow-once/s1", "{}", timeout=0.3))
    assert info.value.failure_kind == "timeout"
    assert hits(server, "/audit-slow-once/s1") == 1


# -- docs/scripts/host-functions.md#transport redirects ------------------------------------------------------


@pytest.mark.parametrize("code", [301, 302, 303])
def test_post_redirected_to_get_drops_the_body_headers(
    server: StandinServer, policy: EgressPolicy, code: int
) -> None:
    """A 301/302/303 after a POST is followed as a GET without a body (and without its length)."""
    text = run(
        fetch(
            policy,
            "POST",
            redirect_url(server, "/echo", code),
            body="payload",
            headers={"Content-Type": "application/json"},
            timeout=3,
        )
    )
    echoed = json.loads(text)
    assert echoed["method"] == "GET" and echoed["body"] == ""
    assert "content-length" not in echoed["headers"] and "content-type" not in echoed["headers"]


def test_stream_post_redirected_with_303_is_followed(server: StandinServer, policy: EgressPolicy) -> None:
    """``stream_request`` follows a same-origin redirect too (here to an SSE GET-able endpoint)."""
    got = run(collect(policy, redirect_url(server, "/echo", 303), "{}", timeout=3))
    assert got == []  # /echo answers JSON, not SSE: no data events, but no crash either


# -- docs/scripts/host-functions.md headers: every value is sent, whatever characters it holds ---------------


def test_non_ascii_header_value_is_sent_as_utf8(server: StandinServer, policy: EgressPolicy) -> None:
    text = run(fetch(policy, "GET", server.url + "/echo", headers={"X-Name": "café ☃"}, timeout=3))
    seen = json.loads(text)["headers"]["x-name"]
    assert seen.encode("latin-1").decode("utf-8") == "café ☃"


def test_non_ascii_header_value_through_a_script(harness: Harness) -> None:
    harness.table("p", base_url=harness.server.url)
    harness.write(
        "p",
        INIT + "fn inference(state, request) {"
        ' let r = parse_json(http_get(`${state.base_url}/echo`, #{"X-Name": "naïve"}));'
        ' #{content: r.headers["x-name"]} }\n',
    )
    r = harness.run(lambda rt: rt.inference("p", REQ))
    assert r.content.encode("latin-1").decode("utf-8") == "naïve"


# -- docs/scripts/host-functions.md#transport, docs/scripts/errors.md#provider-error-classes errors are always
# the documented maps


def test_invalid_port_is_a_transport_error(policy: EgressPolicy) -> None:
    with pytest.raises(HostError) as info:
        run(fetch(policy, "GET", "http://127.0.0.1:99999/x", timeout=3))
    assert info.value.value["kind"] == "transport"


@pytest.mark.parametrize(("header", "expected"), [("²", None), ("1.5", None), ("-3", None), ("12", 12)])
def test_retry_after_only_as_ascii_integer_seconds(
    server: StandinServer, policy: EgressPolicy, header: str, expected: int | None
) -> None:
    with pytest.raises(HostError) as info:
        run(fetch(policy, "GET", f"{server.url}/audit-429-odd?ra={header}", timeout=3))
    value = info.value.value
    assert value["kind"] == "rate_limited" and value["message"] == "rate limit exceeded"
    assert value.get("retry_after") == expected


# -- docs/scripts/host-functions.md#transport SSE framing ----------------------------------------------------


def test_sse_stray_byte_does_not_swallow_later_events() -> None:
    """A chunk valid on its own is always delivered, even after a chunk that ended mid-character."""
    framer = SseFramer()
    framer.feed(b'data: {"a":1}\n\n\xc3')
    assert framer.feed(b'data: {"b":2}\n\n') == ['{"b":2}']
    assert framer.feed(b'data: {"c":3}\n\n') == ['{"c":3}']


def test_sse_stray_byte_over_a_real_socket(server: StandinServer, policy: EgressPolicy) -> None:
    got = run(collect(policy, server.url + "/audit-sse-stray", "{}", timeout=5))
    assert got[-2:] == ['{"b":2}', '{"c":3}']


def test_sse_split_character_still_joined() -> None:
    framer = SseFramer()
    assert framer.feed(b'data: {"t":"caf\xc3') == []
    assert framer.feed(b'\xa9"}\n\n') == ['{"t":"café"}']
    assert framer.feed(b"\xff\xfe\n\n") == []  # invalid on its own: skipped
    assert framer.feed(b'data: {"t":"end"}\n\n') == ['{"t":"end"}']


# -- docs/scripts/errors.md#retries the job bound is the stage's request_timeout_secs or 900 s ---------------


def test_job_bound_is_900s_not_the_global_request_timeout(harness: Harness) -> None:
    """Global ``request_timeout_secs`` times each HTTP request; it does not bound the whole job."""
    harness.data["request_timeout_secs"] = 0.2
    harness.data["limits"] = {"inference_retry_attempts": 2, "inference_retry_base_ms": 1}
    harness.table("p", base_url=harness.server.url)
    harness.write(
        "p", INIT + "fn inference(state, request) { http_get(`${state.base_url}/slow/0.6`); #{} }\n"
    )
    before = hits(harness.server, "/slow/0.6")
    clock = ManualClock()
    with pytest.raises(ProviderError) as info:
        harness.run(lambda rt: rt.inference("p", REQ), clock=clock)
    err = info.value
    assert type(err) is RequestFailed and err.transient  # the transport timeout, not a job timeout
    assert "timed out" in err.message and "job timeout" not in err.message
    assert clock.sleeps == [0.001]  # both inference attempts ran
    # 2 attempts x (1 + 2 transport retries)
    assert settled_hits(harness.server, "/slow/0.6", before + 6) - before == 6


def test_attempt_may_make_several_requests_each_within_the_timeout(harness: Harness) -> None:
    """Each HTTP request gets ``request_timeout_secs``; an attempt making several is not cut short."""
    harness.data["request_timeout_secs"] = 0.5
    harness.data["limits"] = {"inference_retry_attempts": 1}
    harness.table("p", base_url=harness.server.url)
    harness.write(
        "p",
        INIT + "fn inference(state, request) {"
        ' for i in 0..4 { http_get(`${state.base_url}/slow/0.4`); } #{content: "done"} }\n',
    )
    r = harness.run(lambda rt: rt.inference("p", REQ))
    assert r.content == "done"


def test_stage_timeout_still_bounds_the_whole_job(harness: Harness) -> None:
    harness.data["limits"] = {"inference_retry_attempts": 3, "inference_retry_base_ms": 1}
    harness.table("p", base_url=harness.server.url)
    harness.write("p", INIT + "fn inference(state, request) { http_get(`${state.base_url}/slow/2`); #{} }\n")
    started = time.monotonic()
    with pytest.raises(ProviderError) as info:
        harness.run(lambda rt: rt.inference("p", {**REQ, "request_timeout_secs": 1}))
    assert "inference exceeded the 1s job timeout" in info.value.message and not info.value.transient
    assert time.monotonic() - started < 4


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (413, "Payload Too Large"),
        (414, "URI Too Long"),
        (422, "Unprocessable Entity"),
        (503, "Service Unavailable"),
    ],
)
def test_api_error_uses_the_canonical_reason_phrase(
    server: StandinServer, policy: EgressPolicy, code: int, reason: str
) -> None:
    """``HTTP <code> <reason>: <body>`` with the reference's reason spelling, whatever Python calls it."""
    with pytest.raises(HostError) as info:
        run(fetch(policy, "POST", f"{server.url}/status/{code}?body=nope", body="x", timeout=3))
    assert info.value.value == {"kind": "api", "message": f"HTTP {code} {reason}: nope"}


def test_redirect_status_without_location_is_a_plain_api_error(
    server: StandinServer, policy: EgressPolicy
) -> None:
    """A 3xx with no Location is not a refused redirect: just ``HTTP 302 Found: <body>``."""
    with pytest.raises(HostError) as info:
        run(fetch(policy, "GET", f"{server.url}/status/302?body=moved", timeout=3))
    assert info.value.value == {"kind": "api", "message": "HTTP 302 Found: moved"}
