"""Test-only behaviours added to the stand-in server: failures, slowness, odd bodies, redirects, SSE."""

from __future__ import annotations

import time
from collections.abc import Iterator
from urllib.parse import quote

from coordinator.bench.standin import Reply, Request, StandinServer

__all__ = ["install_behaviours"]


def _status(request: Request) -> Reply:
    """``/status/<code>[?retry_after=N&body=...]``."""
    code = int(request.path.split("/")[2])
    headers = {"Content-Type": "application/json"}
    if "retry_after" in request.query:
        headers["Retry-After"] = request.query["retry_after"]
    body = request.query.get("body", '{"error":"status ' + str(code) + '"}')
    return Reply(code, headers, body.encode())


def _slow(request: Request) -> Reply:
    """``/slow/<seconds>``: answer after a pause."""
    time.sleep(float(request.path.split("/")[2]))
    return Reply.json({"text": "slow answer"})


def _typed(request: Request) -> Reply:
    """``/typed?ct=<content type>&body=...``: a 200 with the given content type."""
    return Reply(
        200, {"Content-Type": request.query.get("ct", "")}, request.query.get("body", "xyz").encode()
    )


def _big(request: Request) -> Reply:
    """``/big/<n>``: a 200 text body of n bytes."""
    return Reply(200, {"Content-Type": "text/plain"}, b"x" * int(request.path.split("/")[2]))


def _mojibake(request: Request) -> Reply:
    """A body that is mostly invalid UTF-8."""
    return Reply(200, {"Content-Type": "text/html; charset=utf-8"}, b"\xff\xfe\xfa" * 100 + b"ok")


def _redirect(request: Request) -> Reply:
    """``/redirect?to=URL&code=302``: a redirect to ``to`` (absolute or path)."""
    return Reply(int(request.query.get("code", "302")), {"Location": request.query["to"]}, b"moved")


def _echo(request: Request) -> Reply:
    """Echo method, path, headers and body as JSON."""
    return Reply.json(
        {
            "method": request.method,
            "path": request.path,
            "headers": request.headers,
            "body": request.body.decode("utf-8", "replace"),
        }
    )


def _sse_raw(request: Request) -> Reply:
    """``POST /sse-raw``: the request body is streamed back verbatim as the SSE byte stream."""
    return Reply(200, {"Content-Type": "text/event-stream"}, stream=iter([request.body]))


def _sse_split(request: Request) -> Reply:
    """A stream whose multi-byte character is split across two writes, plus an invalid write."""
    first, second = b'data: {"t":"caf\xc3', b'\xa9"}\n\n'
    return Reply(
        200,
        {"Content-Type": "text/event-stream"},
        stream=[first, 0.05, second, 0.05, b"\xff\xff\n\n", 0.05, b'data: {"t":"end"}\n\n'],
    )


def _sse_broken(request: Request) -> Reply:
    """One event, then the connection dies mid-stream (declared length never reached)."""
    return Reply(
        200,
        {"Content-Type": "text/event-stream", "Content-Length": "100000"},
        stream=[b'data: {"d":"a"}\n\n', 0.05],
    )


def _sse_slow(request: Request) -> Reply:
    """``/sse-slow?n=N&pause=S``: N events with a pause between them."""
    n, pause = int(request.query.get("n", "5")), float(request.query.get("pause", "0.05"))

    def events() -> Iterator[bytes | float]:
        for i in range(n):
            yield f'data: {{"i":{i}}}\n\n'.encode()
            yield pause
        yield b"data: [DONE]\n\n"

    return Reply(200, {"Content-Type": "text/event-stream"}, stream=events())


class _FlakyConnection:
    """``/drop-once/<key>``: the first request per key loses its connection, later ones answer."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def __call__(self, request: Request) -> Reply:
        key = request.path.split("/")[2]
        if key not in self.seen:
            self.seen.add(key)
            return Reply(0)
        return Reply.json({"text": "second try"})


def install_behaviours(server: StandinServer) -> StandinServer:
    """Add every test route to ``server``."""
    for method in ("GET", "POST"):
        server.route(method, "/status/", _status)
        server.route(method, "/slow/", _slow)
        server.route(method, "/typed", _typed)
        server.route(method, "/big/", _big)
        server.route(method, "/mojibake", _mojibake)
        server.route(method, "/redirect", _redirect)
        server.route(method, "/echo", _echo)
    flaky = _FlakyConnection()
    server.route("GET", "/drop-once/", flaky)
    server.route("POST", "/drop-once/", flaky)
    server.route("POST", "/sse-raw", _sse_raw)
    server.route("POST", "/sse-split", _sse_split)
    server.route("POST", "/sse-broken", _sse_broken)
    server.route("POST", "/sse-slow", _sse_slow)
    return server


def redirect_url(server: StandinServer, target: str, code: int = 302) -> str:
    """A URL on ``server`` that redirects to ``target``."""
    return f"{server.url}/redirect?code={code}&to={quote(target, safe='')}"
