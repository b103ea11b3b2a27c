"""No body, path or token a client sends gets a 5xx or drops its keep-alive connection: every route of
openapi.API against a real ``rhaipool serve``, with property-based bodies (any JSON, a valid body with
one key or value changed, raw bytes, and the hostile shapes that once answered 500) on one connection.

A 503 is allowed only with ``Retry-After`` (the pool's backpressure is a retryable answer, not a fault).
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError
from service_support import ADMIN, TOKENS, ServiceProcess

from coordinator._cli.demo import GROQ_SCRIPT
from coordinator.service.openapi import API, Endpoint

HOOK = "fn render(ctx) { `n=${ctx.entries.len()}` }\nfn on_write(ctx) { true }"
DEEP = b"[" * 100_000 + b"]" * 100_000
FIXTURES = {"region": "fz", "kind": "region_hook", "name": "fz", "tenant": "acme"}
"""Path parameters of the objects the fixture creates (never deleted by the fuzzer)."""

VALID: dict[str, dict[str, Any]] = {
    "ScriptPut": {"content": HOOK},
    "ScriptValidate": {"kind": "region_hook", "content": HOOK},
    "RegionCreate": {"name": "fz2", "script": "fz", "budget": 100, "persistent": True},
    "WriteEntry": {
        "content": "x", "tokens": 1, "kind": "assistant_turn", "key": "k", "timestamp": 1,
        "tool_calls": [{"id": "a", "name": "b", "arguments": {"q": [1, 2.5, None]}}],
    },
    "Replace": {"content": "y", "tokens": 2},
    "Render": {"stage_name": "s", "stage_iterations": 1, "model": "m", "window": {"total_tokens": 1}},
    "Evict": {"needed_tokens": 1},
    "Assemble": {"max_tokens": 100, "regions": ["fz"], "stage_name": "s"},
    "InferenceRequest": {
        "model": "standin-small", "messages": [{"role": "user", "content": "hi"}],
        "system": ["s"], "tools": [{"name": "t", "parameters": {"type": "object"}}], "max_tokens": 5,
    },
    "CountTokens": {"text": "hello", "model": "m"},
    "ProviderTable": {"base_url": "https://example.com", "rate_limit": {"requests_per_minute": 1,
                      "tokens_per_minute": 1}, "knob": 1},
    "TenantToken": {"token_sha256": "ab" * 32},
    "ChatCompletionBody": {
        "model": "groq/standin-small",
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}],
        "max_tokens": 5, "temperature": 0.5, "stop": ["x"],
        "tools": [{"type": "function", "function": {"name": "t", "parameters": {"type": "object"}}}],
    },
    "MessagesBody": {
        "model": "groq/standin-small", "max_tokens": 5, "system": "s",
        "messages": [{"role": "user", "content": "hi"}], "stop_sequences": ["x"],
        "tools": [{"name": "t", "input_schema": {"type": "object"}}],
    },
}  # fmt: skip

HOSTILE: list[bytes] = [
    DEEP,
    b'{"content": ' + DEEP + b"}",
    b'{"model": "m", "messages": ' + DEEP + b"}",
    b'{"content": "x", "timestamp": Infinity}',
    b'{"content": "x", "tool_calls": [1]}',
    b'{"name": "big", "script": "fz", "budget": 1000000000000000000000000000000, "persistent": true}',
    b'{"content": "x", "tokens": -1}',
    b'{"content": "\\ud800"}',
    b'{"content": "\\udfff\\ud800"}',
    b'{"text": NaN}',
    b'{"needed_tokens": 1e400}',
    b'{"stage": "plan"}',
    b"\xff\xfe\x00",
    b"",
    b"null",
]
"""The shapes that answered 500 (issue 22) and their neighbours."""


def _schema_name(endpoint: Endpoint) -> str | None:
    body = endpoint.body
    if body is None:
        return None
    origin = getattr(body, "__origin__", body)  # Annotated[X, ...] names X
    return str(origin.__name__)


def _json_value() -> st.SearchStrategy[Any]:
    scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
        max_leaves=12,
    )


@st.composite
def _body(draw: st.DrawFn, endpoint: Endpoint) -> bytes | int | None:
    """The body, or the index of a HOSTILE one (a falsifying example's repr stays short)."""
    name = _schema_name(endpoint)
    choice = draw(st.integers(0, 9))
    if name is None and choice < 6:
        return None
    if choice < 3:
        return draw(st.integers(0, len(HOSTILE) - 1))
    if choice < 5:
        return draw(st.binary(max_size=64))
    if choice < 7 or name is None:
        return json.dumps(draw(_json_value())).encode()
    body = json.loads(json.dumps(VALID[name]))
    key = draw(st.sampled_from([*body, "zz", "contents", "tokens", "kind"]))
    action = draw(st.sampled_from(["replace", "drop", "add", "keep"]))
    if action == "drop":
        body.pop(key, None)
    elif action != "keep":
        body[key if action == "replace" else key + draw(st.text(max_size=3))] = draw(_json_value())
    text = json.dumps(body)
    if draw(st.booleans()):  # a lone surrogate somewhere in a string
        text = text.replace('"', '"\\ud83d', 1) if '"' in text else text
    return text.encode()


@st.composite
def _request(draw: st.DrawFn) -> tuple[str, str, bytes | int | None, str | None]:
    endpoint = draw(st.sampled_from(API))
    path = endpoint.path
    for param in ("region", "kind", "name", "tenant"):
        if "{" + param + "}" in path:
            value = draw(
                st.sampled_from([FIXTURES[param], "nope", "x" * 70, "..", "a b", "é", "%00"])
                | st.text(max_size=12)
            )
            if endpoint.method == "DELETE" and value == FIXTURES[param]:
                value = "gone"
            path = path.replace("{" + param + "}", urllib.parse.quote(value, safe="%"))
    if draw(st.integers(0, 9)) == 0:
        path += "?" + urllib.parse.urlencode({draw(st.text(max_size=5)): draw(st.text(max_size=5))})
    admin = path.startswith(("/api/admin", "/metrics", "/api/status"))
    token = draw(
        st.sampled_from([ADMIN if admin else TOKENS["acme"]] * 6 + [TOKENS["globex"], ADMIN, "wrong", None])
    )
    method = endpoint.method if draw(st.integers(0, 19)) else draw(st.sampled_from(["PATCH", "GET", "PUT"]))
    return method, path, draw(_body(endpoint)), token


@dataclass
class KeptConnection:
    """One HTTP/1.1 connection; a request that loses it fails the test."""

    port: int
    conn: http.client.HTTPConnection | None = None
    sock: socket.socket | None = None

    def open(self) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        self.conn.connect()
        self.sock = self.conn.sock

    def send(self, method: str, path: str, body: bytes | None, token: str | None) -> tuple[int, bytes, Any]:
        assert self.conn is not None
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        self.conn.request(method, path, body=body, headers=headers)
        response = self.conn.getresponse()
        data = response.read()
        assert not response.will_close, (method, path, response.status, data[:200])
        assert self.conn.sock is self.sock, "the service closed the keep-alive connection"
        return response.status, data, response.headers


def _valid(endpoint: Endpoint, raw: bytes) -> bool:
    try:
        TypeAdapter(endpoint.body).validate_json(raw)
    except ValidationError:
        return False
    return True


def _check(status: int, data: bytes, headers: Any, what: object) -> None:
    assert status < 500 or (status == 503 and headers.get("Retry-After")), (what, status, data[:300])
    if headers.get("content-type", "").startswith("application/json") and status >= 400:
        error = json.loads(data)["error"]
        message = error["message"] if isinstance(error, dict) else error
        assert isinstance(message, str) and "\n" not in message, (what, data[:300])


@pytest.fixture(scope="module")
def kept(service: ServiceProcess) -> Iterator[KeptConnection]:
    with service.client("acme") as c:
        c.put_script("region_hook", "fz", HOOK)
        c.put_script("provider", "groq", GROQ_SCRIPT.read_text())
        c.create_region("fz", script="fz", budget=1000, persistent=True)
    connection = KeptConnection(service.port)
    connection.open()
    yield connection
    assert connection.conn is not None
    connection.conn.close()
    log = service.log()
    assert "unexpected error" not in log and "Traceback" not in log, log[-3000:]


@pytest.mark.parametrize("raw", HOSTILE, ids=lambda raw: repr(raw[:24]))
def test_the_bodies_that_once_answered_500(kept: KeptConnection, raw: bytes) -> None:
    for endpoint in API:
        if endpoint.body is None:
            continue
        path = endpoint.path
        for param, value in FIXTURES.items():
            path = path.replace("{" + param + "}", value)
        token = ADMIN if path.startswith("/api/admin") else TOKENS["acme"]
        status, data, headers = kept.send(endpoint.method, path, raw, token)
        _check(status, data, headers, (endpoint.method, path, raw[:40]))
        if not _valid(endpoint, raw):  # a provider table takes any key: {"content": ...} is one
            assert 400 <= status < 500, (endpoint.method, path, raw[:40], status, data[:200])


def test_a_refused_write_leaves_the_region_readable(kept: KeptConnection) -> None:
    """A lone surrogate once stayed in memory and made every GET of the region a 500."""
    for raw in (b'{"content": "\\ud800"}', b'{"content": "ok\\udc00", "kind": "text"}'):
        status, _, _ = kept.send("POST", "/api/regions/fz/write", raw, TOKENS["acme"])
        assert status == 400
    status, data, _ = kept.send("GET", "/api/regions/fz", None, TOKENS["acme"])
    assert status == 200 and json.loads(data)["name"] == "fz"


@settings(
    max_examples=700,  # about 25 s on a loaded 2-core machine
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(request=_request())
def test_no_request_gets_a_5xx_or_loses_its_connection(
    kept: KeptConnection, request: tuple[str, str, bytes | int | None, str | None]
) -> None:
    method, path, body, token = request
    status, data, headers = kept.send(method, path, HOSTILE[body] if isinstance(body, int) else body, token)
    event(f"{request[0]} {status}")
    _check(status, data, headers, request[:2])
