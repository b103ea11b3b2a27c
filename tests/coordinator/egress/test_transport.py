"""The transport rules egress keeps on aiohttp (docs/scripts/host-functions.md#transport), at a real loopback
server.

What a script sees must not depend on the HTTP library underneath: bodies decoded the same way,
failures worded the same way, the address policy applied to IP literals (which aiohttp never hands
to a resolver) as to names, nothing taken from the environment.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib
from collections.abc import Iterator
from typing import Any

import pytest

from coordinator.bench.standin import Reply, Request, StandinServer
from coordinator.egress import Egress, EgressPolicy, HostError

LOCAL = EgressPolicy.build("local", egress_allow=("127.0.0.1",), max_response_bytes=1 << 20)


def fetch(policy: EgressPolicy, url: str, method: str = "GET", **kw: Any) -> str:
    async def main() -> str:
        async with Egress() as egress:
            return await egress.fetch(policy, method, url, **kw)

    return asyncio.run(main())


def fetch_error(policy: EgressPolicy, url: str, method: str = "GET", **kw: Any) -> HostError:
    with pytest.raises(HostError) as info:
        fetch(policy, url, method, **kw)
    return info.value


def _echo(request: Request) -> Reply:
    return Reply.json({"method": request.method, "headers": request.headers, "body": request.body.decode()})


@pytest.fixture
def server() -> Iterator[StandinServer]:
    with StandinServer() as srv:
        srv.route("GET", "/echo", _echo)
        srv.route("POST", "/echo", _echo)
        srv.route("POST", "/see-other", lambda r: Reply(303, {"Location": "/echo"}, b""))
        yield srv


def test_gzip_and_deflate_bodies_are_decoded(server: StandinServer) -> None:
    text = {"Content-Type": "text/plain"}
    server.route(
        "GET", "/gz", lambda r: Reply(200, {**text, "Content-Encoding": "gzip"}, gzip.compress(b"g"))
    )
    raw_deflate = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    body = raw_deflate.compress(b"raw") + raw_deflate.flush()
    server.route("GET", "/raw-deflate", lambda r: Reply(200, {**text, "Content-Encoding": "deflate"}, body))
    assert fetch(LOCAL, server.url + "/gz") == "g"
    assert fetch(LOCAL, server.url + "/raw-deflate") == "raw"
    assert json.loads(fetch(LOCAL, server.url + "/echo"))["headers"]["accept-encoding"] == "gzip, deflate"


def test_a_coding_egress_does_not_decode_reaches_the_text_check_as_it_arrived(server: StandinServer) -> None:
    """``br`` is not advertised nor decoded: the bytes are judged as they are (here: mostly not text)."""
    junk = bytes(range(128, 256)) * 2
    server.route(
        "GET", "/br", lambda r: Reply(200, {"Content-Type": "text/plain", "Content-Encoding": "br"}, junk)
    )
    err = fetch_error(LOCAL, server.url + "/br")
    assert err.value["kind"] == "api" and err.value["message"].startswith("unreadable body:")


def test_a_body_that_does_not_decompress_is_a_transport_error(server: StandinServer) -> None:
    server.route("GET", "/bad-gz", lambda r: Reply(200, {"Content-Encoding": "gzip"}, b"not gzip"))
    err = fetch_error(LOCAL, server.url + "/bad-gz")
    assert err.value == {
        "kind": "transport",
        "message": "Error -3 while decompressing data: incorrect header check",
    }


def test_a_cut_off_body_is_a_dropped_connection_in_the_usual_words(raw_server: Any) -> None:
    port = raw_server(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\nshort")
    err = fetch_error(LOCAL, f"http://127.0.0.1:{port}/")
    assert err.failure_kind == "connection-dropped"
    assert err.value == {
        "kind": "transport",
        "message": "peer closed connection without sending complete message body "
        "(received 5 bytes, expected 100)",
    }


def test_a_garbled_answer_and_a_silent_close_keep_their_wording(raw_server: Any) -> None:
    port = raw_server(b"NOT HTTP AT ALL\r\n\r\n")
    garbled = fetch_error(LOCAL, f"http://127.0.0.1:{port}/")
    assert garbled.value["message"] == "illegal status line: bytearray(b'NOT HTTP AT ALL')"
    silent = fetch_error(LOCAL, f"http://127.0.0.1:{raw_server(b'')}/")
    assert silent.value["message"] == "Server disconnected without sending a response."
    assert garbled.failure_kind == silent.failure_kind == "connection-dropped"


def test_connection_refused_keeps_its_wording() -> None:
    err = fetch_error(LOCAL, "http://127.0.0.1:1/x")
    assert err.failure_kind == "connection-refused"
    assert (
        err.value["message"]
        == "All connection attempts failed: [Errno 111] Connect call failed ('127.0.0.1', 1)"
    )


@pytest.mark.parametrize("literal", ["127.0.0.1", "[::1]", "[::ffff:127.0.0.1]", "[64:ff9b::7f00:1]"])
def test_ip_literals_are_judged_by_the_policy_before_anything_is_sent(
    server: StandinServer, literal: str
) -> None:
    """aiohttp does not resolve an IP literal, so no resolver would see it: egress checks it itself."""
    anywhere = EgressPolicy.build("anywhere", allowed_hosts=("*",))
    port = server.url.rsplit(":", 1)[1]

    async def main() -> tuple[HostError, int]:
        async with Egress() as egress:
            with pytest.raises(HostError) as info:
                await egress.fetch(anywhere, "GET", f"http://{literal}:{port}/echo")
            return info.value, egress.responses[("anywhere", "denied")]

    err, denied = asyncio.run(main())
    assert err.value["kind"] == "egress_denied" and "resolves to" in err.value["message"]
    assert denied == 1
    assert server.requests == []


def test_a_refusal_names_the_provider_that_asked(server: StandinServer) -> None:
    """Providers with the same address rules share a connection pool, not each other's names."""
    first = EgressPolicy.build("first", allowed_hosts=("localhost",))
    second = EgressPolicy.build("second", allowed_hosts=("localhost",))
    url = f"http://localhost:{server.url.rsplit(':', 1)[1]}/echo"

    async def main() -> list[str]:
        messages = []
        async with Egress() as egress:
            for policy in (first, second):
                with pytest.raises(HostError) as info:
                    await egress.fetch(policy, "GET", url)
                messages.append(info.value.value["message"])
        return messages

    assert [
        ("[model_providers.first]" in m, "[model_providers.second]" in m) for m in asyncio.run(main())
    ] == [
        (True, False),
        (False, True),
    ]


def test_see_other_drops_the_body_and_its_headers(server: StandinServer) -> None:
    echoed = json.loads(
        fetch(
            LOCAL, server.url + "/see-other", "POST", body="payload", headers={"Content-Type": "text/plain"}
        )
    )
    assert echoed["method"] == "GET" and echoed["body"] == ""
    assert "content-type" not in echoed["headers"] and "content-length" not in echoed["headers"]


def test_proxy_settings_in_the_environment_are_ignored(
    server: StandinServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:1")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert json.loads(fetch(LOCAL, server.url + "/echo"))["method"] == "GET"


def test_a_header_that_is_not_http_is_refused_unsent(server: StandinServer) -> None:
    for name, value in (("X-Ü", "v"), ("X-Split", "a\r\nInjected: 1")):
        err = fetch_error(LOCAL, server.url + "/echo", headers={name: value})
        assert err.value["kind"] == "transport" and err.value["message"].startswith("invalid header")
    assert server.requests == []


def test_http2_is_refused_rather_than_silently_downgraded() -> None:
    with pytest.raises(ValueError, match=r"HTTP/1\.1 only"):
        Egress(http2=True)
