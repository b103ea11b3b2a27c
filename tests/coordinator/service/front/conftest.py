"""One real ``rhaipool serve`` for the /v1 front tests (package scope: both SDKs' modules share it).

Its tenant ``acme`` runs the seed's ``groq.rhai`` against the stand-in OpenAI-shaped API and
``examples/providers/anthropic.rhai`` against an Anthropic-shaped API served by the same stand-in
(under ``/anthropic/v1``), plus two small scripts that fail on purpose. Provider retries are off
(``inference_retry_attempts = 1``) so an upstream 429 reaches the SDK, whose own retry is under test.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
from service_support import ADMIN, TOKENS, ServiceProcess, free_port, sha

from coordinator._cli.demo import EXAMPLES, GROQ_SCRIPT
from coordinator.bench.standin import Reply, Request, StandinServer

ANTHROPIC_SCRIPT = EXAMPLES / "providers" / "anthropic.rhai"
ANTHROPIC_MODELS = [
    {"type": "model", "id": "claude-test-1", "display_name": "Claude Test 1"},
    {"type": "model", "id": "claude-test-2", "display_name": "Claude Test 2"},
]
HALFWAY = """
fn initialize(config) { #{} }
fn inference(state, request) { #{ content: "unused" } }
fn stream(state, request, on_chunk) {
    on_chunk.call(#{ delta: "partial " });
    throw "the script broke mid-stream";
}
"""
TIGHT_TOKEN = "tight-secret-token"
"""A tenant allowed one request at a time (``max_connections = 1``)."""
THROWER = 'fn initialize(c) { #{} }\nfn inference(s, r) { throw "boom" }'
_USE_TOOL = re.compile(r"\buse (\w+)")


class Upstream:
    """The stand-in API plus an Anthropic Messages route and a 429 switch, counting what it answers."""

    def __init__(self, server: StandinServer) -> None:
        self.server = server
        self.lock = threading.Lock()
        self.refuse_next = 0
        """The next N chat completions answer 429 (``Retry-After: 1``)."""
        self.refused = 0
        server.route("POST", "/v1/chat/completions", self._chat)
        server.route("POST", "/anthropic/v1/messages", self._messages)
        server.route("GET", "/anthropic/v1/models", lambda r: Reply.json({"data": ANTHROPIC_MODELS}))

    def requests_to(self, path: str) -> list[Request]:
        with self.server._lock:
            return [r for r in self.server.requests if r.path == path]

    def _chat(self, request: Request) -> Reply:
        with self.lock:
            if self.refuse_next > 0:
                self.refuse_next -= 1
                self.refused += 1
                body = {"error": {"message": "slow down", "type": "rate_limit"}}
                return Reply(
                    429, {"Content-Type": "application/json", "Retry-After": "1"}, json.dumps(body).encode()
                )
        if b"SLOW" in request.body:  # holds its connection a while (the tenant's max_connections)
            time.sleep(1.5)
        return _default(self.server, request)

    def _messages(self, request: Request) -> Reply:
        body = request.json()
        if not isinstance(body, dict) or request.headers.get("x-api-key") != "anthropic-key":
            return Reply.json(
                {"type": "error", "error": {"type": "authentication_error", "message": "no"}}, 401
            )
        text, calls = _anthropic_answer(body)
        usage = {"input_tokens": 12, "output_tokens": 5, "cache_read_input_tokens": 3}
        stop = "tool_use" if calls else "end_turn"
        if body.get("stream"):
            return Reply(
                200, {"Content-Type": "text/event-stream"}, stream=_anthropic_events(text, calls, usage, stop)
            )
        content = ([{"type": "text", "text": text}] if text else []) + calls
        message = {"id": "msg_up", "type": "message", "role": "assistant", "model": body.get("model"),
                   "content": content, "stop_reason": stop, "usage": usage}  # fmt: skip
        return Reply.json(message)


def _default(server: StandinServer, request: Request) -> Reply:
    """The stand-in's built-in OpenAI answer (its routes list without ours)."""
    routes, server._routes = server._routes, [r for r in server._routes if r[1] != "/v1/chat/completions"]
    try:
        return server.dispatch(request)
    finally:
        server._routes = routes


def _last_user_text(messages: Any) -> str:
    for message in reversed(messages):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        texts = [b.get("text", "") for b in content if b.get("type") == "text"]
        results = [b.get("content", "") for b in content if b.get("type") == "tool_result"]
        return " ".join(texts) if texts else "tool said: " + " ".join(map(str, results))
    return ""


def _anthropic_answer(body: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    text = _last_user_text(body.get("messages") or [])
    tools = [t.get("name") for t in body.get("tools") or []]
    match = _USE_TOOL.search(text)
    if match and match.group(1) in tools:
        said = "Let me look. " if "explain" in text else ""  # text, then the call (block indices 0, 1)
        return said, [{"type": "tool_use", "id": "toolu_1", "name": match.group(1), "input": {"query": text}}]
    system = " ".join(b.get("text", "") for b in body.get("system") or [])
    prefix = f"[{system}] " if system else ""
    if "Reply with exactly: PONG" in text:
        return "PONG", []
    return f"{prefix}claude: {text}", []


def _sse(kind: str, value: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **value})}\n\n".encode()


def _anthropic_events(
    text: str, calls: list[dict[str, Any]], usage: dict[str, int], stop: str
) -> Iterable[bytes]:
    yield _sse(
        "message_start", {"message": {"id": "msg_up", "usage": {"input_tokens": 12, "output_tokens": 1}}}
    )
    index = 0
    if text:
        yield _sse("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
        for word in re.findall(r"\S+\s*", text):
            yield _sse("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": word}})
        yield _sse("content_block_stop", {"index": 0})
        index = 1
    for call in calls:
        block = {"type": "tool_use", "id": call["id"], "name": call["name"], "input": {}}
        yield _sse("content_block_start", {"index": index, "content_block": block})
        arguments = json.dumps(call["input"])
        for piece in (arguments[: len(arguments) // 2], arguments[len(arguments) // 2 :]):
            yield _sse(
                "content_block_delta",
                {"index": index, "delta": {"type": "input_json_delta", "partial_json": piece}},
            )
        yield _sse("content_block_stop", {"index": index})
        index += 1
    yield _sse("message_delta", {"delta": {"stop_reason": stop}, "usage": usage})
    yield _sse("message_stop", {})


def _config(port: int, standin: StandinServer, folder: Any) -> Any:
    lines = [
        "[serve]",
        f'listen = "127.0.0.1:{port}"',
        'database = "state/rhaipool.db"',
        f'admin_token_sha256 = "{sha(ADMIN)}"',
        "workers = 2",
        "grace_secs = 3",
        "max_body_bytes = 262144",
        "models_cache_secs = 3600",
        "[limits]",
        "inference_retry_attempts = 1",
        "[tenants.acme]",
        f'token_sha256 = "{sha(TOKENS["acme"])}"',
        'providers = ["groq", "anthropic"]',
        "[tenants.tight]",
        f'token_sha256 = "{sha(TIGHT_TOKEN)}"',
        'providers = ["groq"]',
        "max_connections = 1",
        "[tenants.globex]",
        f'token_sha256 = "{sha(TOKENS["globex"])}"',
        "[model_providers.groq]",
        'api_key = "test-key"',
        f'base_url = "{standin.base_url}"',
        'egress_allow = ["127.0.0.1"]',
        "[model_providers.anthropic]",
        'api_key = "anthropic-key"',
        f'base_url = "{standin.url}/anthropic/v1"',
        'egress_allow = ["127.0.0.1"]',
    ]
    path = folder / "serve.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="package")
def upstream() -> Iterator[Upstream]:
    with StandinServer() as server:
        yield Upstream(server)


@pytest.fixture(scope="package")
def front(tmp_path_factory: pytest.TempPathFactory, upstream: Upstream) -> Iterator[ServiceProcess]:
    """The service, with acme's scripts stored."""
    port = free_port()
    running = ServiceProcess.start(_config(port, upstream.server, tmp_path_factory.mktemp("front")), port)
    try:
        with running.client("acme") as c:
            c.put_script("provider", "groq", GROQ_SCRIPT.read_text())
            c.put_script("provider", "anthropic", ANTHROPIC_SCRIPT.read_text())
            c.put_script("provider", "halfway", HALFWAY)
            c.put_script("provider", "thrower", THROWER)
        with running.client(token=TIGHT_TOKEN) as c:
            c.put_script("provider", "groq", GROQ_SCRIPT.read_text())
        yield running
    finally:
        assert running.stop() == 0


@pytest.fixture(autouse=True)
def no_stray_children() -> Iterator[None]:
    """The service's own stop checks its workers (``ServiceProcess.stop``)."""
    yield
