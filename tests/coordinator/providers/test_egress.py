"""Egress against a real loopback server: transport rules (docs/scripts/host-functions.md#transport), thrown
maps (docs/scripts/errors.md#provider-error-classes), refusals."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from typing import Any

import pytest

from coordinator.bench.standin import StandinServer
from coordinator.egress import Egress, EgressPolicy, HostError

from .server import redirect_url


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


async def fetch(policy: EgressPolicy, method: str, url: str, **kw: Any) -> str:
    async with Egress() as egress:
        return await egress.fetch(policy, method, url, **kw)


def fetch_error(policy: EgressPolicy, method: str, url: str, **kw: Any) -> dict[str, Any]:
    """The map the script would catch, plus the coordinator's own label under ``label``."""
    with pytest.raises(HostError) as info:
        run(fetch(policy, method, url, **kw))
    value = dict(info.value.value)
    assert "failure_kind" not in value  # scripts see exactly the reference's keys
    return {**value, "label": info.value.failure_kind}


def test_post_sends_body_verbatim_and_headers(server: StandinServer, policy: EgressPolicy) -> None:
    text = run(fetch(policy, "POST", server.url + "/echo", body='{"a":"é"}', headers={"H": "v"}))
    echoed = json.loads(text)
    assert echoed["method"] == "POST"
    assert echoed["body"] == '{"a":"é"}'
    assert echoed["headers"]["h"] == "v"
    assert "content-type" not in echoed["headers"]  # no content type is added


def test_get_returns_body_text(server: StandinServer, policy: EgressPolicy) -> None:
    data = json.loads(run(fetch(policy, "GET", server.base_url + "/models")))
    assert [m["id"] for m in data["data"]] == ["standin-small", "standin-large"]


def test_429_with_and_without_retry_after(server: StandinServer, policy: EgressPolicy) -> None:
    assert fetch_error(policy, "GET", server.url + "/status/429?retry_after=7") == {
        "kind": "rate_limited",
        "message": "rate limit exceeded",
        "retry_after": 7,
        "label": None,
    }
    assert fetch_error(policy, "GET", server.url + "/status/429") == {
        "kind": "rate_limited",
        "message": "rate limit exceeded",
        "label": None,
    }
    # Retry-After as an HTTP date is not parsed (integer seconds only)
    dated = fetch_error(policy, "GET", server.url + "/status/429?retry_after=Wed,%2021%20Oct%202015")
    assert "retry_after" not in dated


def test_non_2xx_is_api_error_with_code_reason_and_body(server: StandinServer, policy: EgressPolicy) -> None:
    err = fetch_error(policy, "POST", server.url + "/status/500?body=boom", body="x")
    assert err["kind"] == "api"
    assert err["message"] == "HTTP 500 Internal Server Error: boom"
    assert err["label"] == "server-error"
    err = fetch_error(policy, "GET", server.url + "/status/400?body=bad")
    assert err["message"] == "HTTP 400 Bad Request: bad"
    assert fetch_error(policy, "GET", server.url + "/nope")["label"] == "not-found"


def test_slow_answer_times_out_as_transport(server: StandinServer, policy: EgressPolicy) -> None:
    err = fetch_error(policy, "GET", server.url + "/slow/2", timeout=0.3)
    assert err["kind"] == "transport"
    assert err["label"] == "timeout"
    assert "timed out" in err["message"]


def test_malformed_json_is_returned_as_text(server: StandinServer, policy: EgressPolicy) -> None:
    url = server.url + "/typed?ct=application/json&body=%7Bnot%20json"
    assert run(fetch(policy, "GET", url)) == "{not json"


@pytest.mark.parametrize("ct", ["application/octet-stream", "image/png", "application/pdf"])
def test_non_text_content_type_is_unreadable(server: StandinServer, policy: EgressPolicy, ct: str) -> None:
    err = fetch_error(policy, "GET", f"{server.url}/typed?ct={ct}")
    assert err["kind"] == "api"
    assert err["message"].startswith(f"unreadable body: the response is {ct}, not text - ")


@pytest.mark.parametrize(
    "ct",
    [
        "text/plain",
        "application/json; charset=utf-8",
        "application/xml",
        "application/x-yaml",
        "application/javascript",
        "application/x-www-form-urlencoded",
        "application/problem+json",
    ],
)
def test_text_like_content_types_pass(server: StandinServer, policy: EgressPolicy, ct: str) -> None:
    assert run(fetch(policy, "GET", f"{server.url}/typed?ct={ct}&body=ok")) == "ok"


def test_mojibake_body_is_refused(server: StandinServer, policy: EgressPolicy) -> None:
    err = fetch_error(policy, "GET", server.url + "/mojibake")
    assert err["kind"] == "api"
    assert err["message"].startswith("unreadable body:")
    assert err["message"].endswith("did not read the page.")


def test_oversized_body_is_refused(server: StandinServer) -> None:
    small = EgressPolicy.build("p", egress_allow=("127.0.0.1",), max_response_bytes=1000)
    assert run(fetch(small, "GET", server.url + "/big/1000")) == "x" * 1000
    err = fetch_error(small, "GET", server.url + "/big/1001")
    assert err["kind"] == "api"
    assert err["message"].startswith("response too large")


def test_same_origin_redirect_is_followed(server: StandinServer, policy: EgressPolicy) -> None:
    text = run(fetch(policy, "GET", redirect_url(server, "/echo")))
    assert json.loads(text)["path"] == "/echo"
    # 307 keeps method and body
    text = run(fetch(policy, "POST", redirect_url(server, "/echo", 307), body="payload"))
    assert json.loads(text)["body"] == "payload"


def test_cross_origin_redirect_is_not_followed(server: StandinServer) -> None:
    # another origin: same host, another port (and another host name)
    policy = EgressPolicy.build("p", egress_allow=("127.0.0.1", "localhost"))
    for target in ("http://127.0.0.1:1/echo", f"http://localhost:{server.url.rsplit(':', 1)[1]}/echo"):
        err = fetch_error(policy, "GET", redirect_url(server, target))
        assert err["kind"] == "api"
        assert err["message"].startswith("HTTP 302 Found: redirect to another origin refused")


def test_redirect_loop_stops_after_five_hops(server: StandinServer, policy: EgressPolicy) -> None:
    loop = "/redirect?to=" + "/redirect%3Fto%3D" * 3
    url = redirect_url(
        server, redirect_url(server, redirect_url(server, redirect_url(server, server.url + loop)))
    )
    err = fetch_error(policy, "GET", url)
    assert err["kind"] == "transport"


def test_connection_refused_is_transport(policy: EgressPolicy) -> None:
    err = fetch_error(policy, "GET", "http://127.0.0.1:1/x")
    assert err["kind"] == "transport"
    assert err["label"] == "connection-refused"


def test_loopback_refused_without_egress_allow(server: StandinServer) -> None:
    strict = EgressPolicy.build("p", urls=(server.base_url,))
    err = fetch_error(strict, "GET", server.base_url + "/models")
    assert err["kind"] == "egress_denied"
    assert "127.0.0.1" in err["message"]
    assert not any(r.path == "/v1/models?strict" for r in server.requests)


def test_name_resolving_to_loopback_is_refused(server: StandinServer) -> None:
    port = server.url.rsplit(":", 1)[1]
    by_ip = EgressPolicy.build("p", allowed_hosts=("localhost",), egress_allow=("10.0.0.0/8",))
    err = fetch_error(by_ip, "GET", f"http://localhost:{port}/v1/models")
    assert err["kind"] == "egress_denied"
    assert "resolves to" in err["message"]
    by_name = EgressPolicy.build("p", egress_allow=("localhost",))
    assert "standin-small" in run(fetch(by_name, "GET", f"http://localhost:{port}/v1/models"))


def test_cidr_allows_loopback(server: StandinServer) -> None:
    cidr = EgressPolicy.build("p", urls=(server.base_url,), egress_allow=("127.0.0.0/8",))
    assert "standin-small" in run(fetch(cidr, "GET", server.base_url + "/models"))


def test_host_not_allowed_is_refused_before_sending(server: StandinServer) -> None:
    before = len(server.requests)
    other = EgressPolicy.build("p", urls=("https://api.example.com/v1",), egress_allow=("127.0.0.0/8",))
    err = fetch_error(other, "GET", server.url + "/echo")
    assert err["kind"] == "egress_denied"
    assert "not allowed" in err["message"]
    assert len(server.requests) == before


def test_non_http_scheme_refused(policy: EgressPolicy) -> None:
    assert fetch_error(policy, "GET", "file:///etc/passwd")["kind"] == "egress_denied"


async def collect(policy: EgressPolicy, url: str, body: str, **kw: Any) -> list[str]:
    async with Egress() as egress:
        return [p async for p in egress.stream(policy, url, body=body, **kw)]


def test_stream_framing_pc9(server: StandinServer, policy: EgressPolicy) -> None:
    raw = 'data: {"a":1}\n\nevent: ping\n\ndata: {"b":2}\n\ndata: [DONE]\n\ndata: {"never":1}\n\n'
    assert run(collect(policy, server.url + "/sse-raw", raw)) == ['{"a":1}', '{"b":2}']
    assert run(collect(policy, server.url + "/sse-raw", 'data: {"x":1}\n\ndata: {"tail":1}')) == [
        '{"x":1}',
        '{"tail":1}',
    ]


def test_stream_keeps_split_characters_and_skips_invalid(server: StandinServer, policy: EgressPolicy) -> None:
    assert run(collect(policy, server.url + "/sse-split", "")) == ['{"t":"café"}', '{"t":"end"}']


def test_stream_http_error_before_any_payload(server: StandinServer, policy: EgressPolicy) -> None:
    with pytest.raises(HostError) as info:
        run(collect(policy, server.url + "/status/429?retry_after=3", "{}"))
    assert info.value.value == {"kind": "rate_limited", "message": "rate limit exceeded", "retry_after": 3}


def test_stream_mid_stream_failure(server: StandinServer, policy: EgressPolicy) -> None:
    got: list[str] = []

    async def consume() -> None:
        async with Egress() as egress:
            async for payload in egress.stream(policy, server.url + "/sse-broken", body="{}"):
                got.append(payload)

    with pytest.raises(HostError) as info:
        run(consume())
    assert got == ['{"d":"a"}']
    assert info.value.value["kind"] == "transport"


def test_stream_payloads_arrive_as_produced(server: StandinServer, policy: EgressPolicy) -> None:
    async def timed() -> list[float]:
        loop = asyncio.get_running_loop()
        start, times = loop.time(), []
        async with Egress() as egress:
            async for _ in egress.stream(policy, server.url + "/sse-slow?n=4&pause=0.2", body="{}"):
                times.append(loop.time() - start)
        return times

    times = run(timed())
    assert len(times) == 4
    assert times[0] < times[-1] - 0.4  # the first payload did not wait for the last


def test_stream_total_timeout(server: StandinServer, policy: EgressPolicy) -> None:
    with pytest.raises(HostError) as info:
        run(collect(policy, server.url + "/sse-slow?n=20&pause=0.1", "{}", timeout=0.5))
    assert info.value.failure_kind == "timeout"


def test_unary_request_retried_after_dropped_connection(server: StandinServer, policy: EgressPolicy) -> None:
    before = len(server.requests)
    assert (
        json.loads(run(fetch(policy, "POST", server.url + "/drop-once/a", body="x")))["text"] == "second try"
    )
    assert len(server.requests) - before == 2


def test_stream_not_retried_after_dropped_connection(server: StandinServer, policy: EgressPolicy) -> None:
    with pytest.raises(HostError) as info:
        run(collect(policy, server.url + "/drop-once/b", "{}"))
    assert info.value.value["kind"] == "transport"
    assert info.value.failure_kind == "connection-dropped"
