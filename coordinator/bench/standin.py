"""A local OpenAI-compatible stand-in server, for the README demo, the benchmark and the tests.

It answers ``POST /v1/chat/completions`` (JSON or SSE when ``"stream": true``) and
``GET /v1/models`` like a small OpenAI-shaped API, on 127.0.0.1 only. Replies are deterministic:
``PONG`` when asked to reply with exactly PONG, a tool call when tools are offered and the last user
message says ``use <tool>``, else ``echo: <last user text>``. Extra routes (test behaviours) are
added with :meth:`StandinServer.route`. Run ``python -m coordinator.bench.standin`` to serve one
from the command line.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = [
    "MODELS",
    "STATS_PATH",
    "Reply",
    "Request",
    "StandinServer",
    "completion_reply",
    "main",
]

MODELS = [
    {"id": "standin-small", "object": "model", "context_window": 8192},
    {"id": "standin-large", "object": "model", "context_window": 131072},
]
STATS_PATH = "/_standin/stats"
"""``GET`` answers ``{"connections": accepted so far, "requests": served so far}`` at once."""
_USE_TOOL = re.compile(r"\buse (\w+)")


@dataclass
class Request:
    """One request as the server saw it."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON, or None."""
        try:
            return json.loads(self.body or b"null")
        except ValueError:
            return None


@dataclass
class Reply:
    """What to answer: a status, headers and a body; a streamed body may contain float pauses.

    Status 0 means: close the connection without answering (a dropped connection).
    """

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    stream: Iterable[bytes | float] | None = None

    @classmethod
    def json(cls, value: Any, status: int = 200) -> Reply:
        """A JSON reply."""
        return cls(status, {"Content-Type": "application/json"}, json.dumps(value).encode())


Route = Callable[[Request], Reply]


def _tokens(text: str) -> int:
    return math.ceil(len(text.encode()) / 4)


def _last_user_text(messages: Any) -> str:
    for message in reversed(messages if isinstance(messages, list) else []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return " ".join(b.get("text", "") for b in content if isinstance(b, dict))
            return str(content or "")
    return ""


def completion_reply(body: Any) -> tuple[str, list[dict[str, Any]], dict[str, int]]:
    """The deterministic answer to a chat request: content, tool calls, usage."""
    body = body if isinstance(body, dict) else {}
    text = _last_user_text(body.get("messages"))
    tools = [t.get("function", {}).get("name") for t in body.get("tools") or [] if isinstance(t, dict)]
    match = _USE_TOOL.search(text)
    calls: list[dict[str, Any]] = []
    if match and match.group(1) in tools:
        args = json.dumps({"query": text})
        calls = [
            {"id": "call_1", "type": "function", "function": {"name": match.group(1), "arguments": args}}
        ]
        content = ""
    elif "Reply with exactly: PONG" in text:
        content = "PONG"
    else:
        content = f"echo: {text}"
    prompt = _tokens(json.dumps(body.get("messages", [])))
    completion = _tokens(content) + len(calls) * 8
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    return content, calls, usage


def _chat_json(body: dict[str, Any], content: str, calls: list[Any], usage: dict[str, int]) -> Reply:
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = calls
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
    full: dict[str, Any] = {**usage, "prompt_tokens_details": {"cached_tokens": 0}}
    return Reply.json(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": body.get("model"),
            "choices": [choice],
            "usage": full,
        }
    )


def _sse(value: Any) -> bytes:
    return b"data: " + json.dumps(value).encode() + b"\n\n"


def _chat_stream(content: str, calls: list[Any], usage: dict[str, int], pause: float) -> Reply:
    def events() -> Iterable[bytes | float]:
        words = re.findall(r"\S+\s*", content) or [""]
        for word in words:
            yield _sse({"choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]})
            if pause:
                yield pause
        if calls:
            yield _sse({"choices": [{"index": 0, "delta": {"tool_calls": calls}, "finish_reason": None}]})
        finish = "tool_calls" if calls else "stop"
        yield _sse({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}], "usage": usage})
        yield b"data: [DONE]\n\n"

    return Reply(200, {"Content-Type": "text/event-stream"}, stream=events())


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes: avoid the 40 ms delayed-ACK stall
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the default stderr access log."""

    def _handle(self) -> None:
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        request = Request(
            self.command,
            parts.path,
            {k: v[-1] for k, v in parse_qs(parts.query).items()},
            {k.lower(): v for k, v in self.headers.items()},
            self.rfile.read(length) if length else b"",
        )
        self.server.owner.record(request)
        try:
            reply = self.server.owner.dispatch(request)
        except Exception as exc:  # a broken test route must answer, not hang the client
            reply = Reply.json({"error": f"stand-in route failed: {exc}"}, 500)
        self._send(reply)

    def _send(self, reply: Reply) -> None:
        if reply.status == 0:
            self.close_connection = True
            return
        self.send_response(reply.status)
        for key, value in reply.headers.items():
            self.send_header(key, value)
        if reply.stream is None:
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)
            return
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        try:
            for item in reply.stream:
                if isinstance(item, float):
                    time.sleep(item)
                    continue
                self.wfile.write(item)
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass

    do_GET = do_POST = do_PUT = do_DELETE = _handle


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # The listen backlog: a burst of 1 024 connects must not overflow it (SYN retries: 1 s, 3 s, ...).
    request_queue_size = 4096
    owner: StandinServer

    def process_request(self, request: Any, client_address: Any) -> None:
        """Count every accepted connection: clients that reuse connections keep this near the caller count."""
        self.owner.connections_accepted += 1
        super().process_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up early is normal here (timeouts, cancelled streams)."""


class StandinServer:
    """The stand-in API on 127.0.0.1; a context manager that serves from a background thread."""

    def __init__(self, *, port: int = 0, delay: float = 0.0, stream_pause: float = 0.0) -> None:
        self.delay = delay
        self.stream_pause = stream_pause
        self.requests: list[Request] = []
        self.connections_accepted = 0
        self.requests_served = 0
        self._routes: list[tuple[str, str, Route]] = []
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", port), _Handler)
        self._server.owner = self
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL (``.../v1``)."""
        return self.url + "/v1"

    def route(self, method: str, prefix: str, handler: Route) -> None:
        """Add a behaviour for requests whose path starts with ``prefix`` (newest wins)."""
        self._routes.insert(0, (method.upper(), prefix, handler))

    def record(self, request: Request) -> None:
        """Keep the last 1000 requests for assertions."""
        with self._lock:
            self.requests_served += 1
            self.requests.append(request)
            del self.requests[:-1000]

    def dispatch(self, request: Request) -> Reply:
        """Find the route; the built-in OpenAI endpoints come last."""
        for method, prefix, handler in self._routes:
            if request.method == method and request.path.startswith(prefix):
                return handler(request)
        if request.path == STATS_PATH:  # never delayed: benchmarks read it between runs
            stats = {"connections": self.connections_accepted, "requests": self.requests_served}
            return Reply.json(stats)
        if self.delay:
            time.sleep(self.delay)
        if request.method == "GET" and request.path.rstrip("/") == "/v1/models":
            return Reply.json({"object": "list", "data": MODELS})
        if request.method == "POST" and request.path == "/v1/chat/completions":
            body = request.json()
            if not isinstance(body, dict):
                return Reply.json({"error": {"message": "body is not a JSON object"}}, 400)
            content, calls, usage = completion_reply(body)
            if body.get("stream"):
                return _chat_stream(content, calls, usage, self.stream_pause)
            return _chat_json(body, content, calls, usage)
        return Reply.json({"error": {"message": f"no route for {request.method} {request.path}"}}, 404)

    def start(self) -> StandinServer:
        """Serve from a daemon thread."""
        self._thread = threading.Thread(target=self._server.serve_forever, name="standin", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> StandinServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    """``python -m coordinator.bench.standin [--port N] [--delay S]``: serve until interrupted."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args(argv)
    server = StandinServer(port=args.port, delay=args.delay)
    print(server.base_url, flush=True)
    try:
        server._server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server._server.server_close()


if __name__ == "__main__":
    main()
