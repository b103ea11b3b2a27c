"""The provider oracle's rhaipool side: a recording HTTP server and the normalised result of one case.

Used by ``test_reference_providers_replay.py`` (against the reference's recorded answers) and by the oracle
run that records them (``docs/differences.md``, "How to rerun").  A case is one entry of
``providers/cases.json``: a script, its config, a request, the operations to run and the server's routes.
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

CASES = Path(__file__).parent / "providers"
SEED = Path(__file__).resolve().parents[2] / "examples" / "providers"
#: Headers each HTTP client adds on its own (and the port-bearing Host): not the script's doing.
CLIENT_HEADERS = frozenset({"accept-encoding", "user-agent", "connection", "host"})

FIXED: dict[str, tuple[int, str, bytes, dict[str, str]]] = {
    "/seen": (200, "text/plain", b"ok", {}),
    "/text": (200, "text/plain; charset=utf-8", "plain text \u2713".encode(), {}),
    "/status/429": (429, "text/plain", b"slow down", {}),
    "/status/429r": (429, "text/plain", b"slow down", {"Retry-After": "7"}),
    "/status/500": (500, "application/json", b'{"error":"boom"}', {}),
    "/status/404": (404, "text/plain", b"nothing here", {}),
    "/status/401": (401, "application/json", b'{"error":"bad key"}', {}),
    "/status/302": (302, "text/plain", b"", {"Location": "http://example.invalid/elsewhere"}),
    "/png": (200, "image/png", b"\x89PNG\r\n\x1a\n" + bytes(range(40)), {}),
    "/fffd": (200, "text/plain; charset=utf-8", b"ab" + b"\xff\xfe" * 40 + b"cd" * 20, {}),
    "/latin1": (200, "text/plain; charset=iso-8859-1", "caf\u00e9 cr\u00e8me".encode("latin-1"), {}),
    "/sse": (
        200,
        "text/event-stream",
        b'data: {"a":1}\n\ndata: two\n\n: c\n\ndata: [DONE]\n\ndata: after\n\n',
        {},
    ),
}


class Recorder:
    """Routes of the current case and every request received, in order."""

    def __init__(self) -> None:
        self.log: list[dict[str, Any]] = []
        self.routes: dict[str, dict[str, Any]] = {}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    recorder: Recorder

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the log is the recorder's."""

    def _serve(self) -> None:
        size = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(size) if size else b""
        self.recorder.log.append(
            {
                "method": self.command,
                "path": self.path,
                "headers": sorted([k.lower(), v] for k, v in self.headers.items()),
                "body": body.decode("utf-8", "backslashreplace"),
            }
        )
        route = self.path.split("?")[0]
        extra: dict[str, str] = {}
        if route == "/echo":
            status, ctype, out = 200, "text/plain", body
        elif route in self.recorder.routes:
            r = self.recorder.routes[route]
            status, ctype, out = r["status"], r["content_type"], r["body"].encode("utf-8", "surrogateescape")
            extra = r.get("headers", {})
        elif route in FIXED:
            status, ctype, out, extra = FIXED[route]
        else:
            status, ctype, out = 404, "text/plain", b"no route"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(out)))
        for key, value in extra.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = _serve


def start_server(recorder: Recorder) -> ThreadingHTTPServer:
    """A recording server on 127.0.0.1 (random port), serving in a daemon thread."""
    handler = type("Handler", (_Handler,), {"recorder": recorder})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def closed_url() -> str:
    """A loopback URL nothing listens on (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def substitute(value: Any, base: str, closed: str) -> Any:
    """Put the server's URLs into a case."""
    if isinstance(value, str):
        return value.replace("${BASE}", base).replace("${CLOSED}", closed)
    if isinstance(value, list):
        return [substitute(v, base, closed) for v in value]
    if isinstance(value, dict):
        return {k: substitute(v, base, closed) for k, v in value.items()}
    return value


def script_path(case: dict[str, Any], scratch: Path, leviath_checkout: Path | None = None) -> Path | None:
    """Where a case's script is; ``None`` for the reference's own example when no checkout is given."""
    name = case["script"]
    if name.startswith("@seed/"):
        return SEED / name.removeprefix("@seed/")
    if name.startswith("@leviath/"):
        return None if leviath_checkout is None else leviath_checkout / name.removeprefix("@leviath/")
    if name == "@inline":
        path = scratch / f"{case['name']}.rhai"
        path.write_text(case["source"], encoding="utf-8")
        return path
    return CASES / name


def script_http(log: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The requests as the script made them: client-added headers dropped."""
    return [dict(entry, headers=[h for h in entry["headers"] if h[0] not in CLIENT_HEADERS]) for entry in log]


def _usage(u: Any) -> dict[str, int]:
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.total_tokens,
        "cached_tokens": u.cached_tokens,
        "cache_write_tokens": u.cache_write_tokens,
    }


_REASONS = {"credits-exhausted": "CreditsExhausted", "auth-failed": "AuthFailed", "forbidden": "Forbidden"}


def _error(exc: Any) -> dict[str, Any]:
    from coordinator.providers.errors import RateLimitExceeded

    payload: Any = exc.retry_after if isinstance(exc, RateLimitExceeded) else exc.message
    if isinstance(payload, float) and payload.is_integer():
        payload = int(payload)
    if getattr(exc, "reason", None) in _REASONS:
        payload = f"{_REASONS[exc.reason]}: {payload}"
    return {"kind": exc.class_name, "payload": payload}


def _response(r: Any) -> dict[str, Any]:
    calls = []
    for c in r.tool_calls:
        call = {"id": c.id, "name": c.name, "arguments": c.arguments}
        if c.thought_signature is not None:
            call["thought_signature"] = c.thought_signature
        calls.append(call)
    return {
        "content": r.content,
        "tool_calls": calls,
        "tokens_used": _usage(r.tokens_used),
        "finish_reason": r.finish_reason,
    }


def _chunk(c: Any) -> dict[str, Any]:
    return {
        "delta": c.delta,
        "tool_calls": [
            {"index": d.index, "id": d.id, "name": d.name, "arguments_delta": d.arguments_delta}
            for d in c.tool_calls
        ],
        "tokens": _usage(c.tokens) if c.tokens is not None else None,
        "finish_reason": c.finish_reason,
    }


async def run_case(runtime: Any, name: str, case: dict[str, Any]) -> dict[str, Any]:
    """Every operation of ``case`` through ``runtime``, in the oracle's normalised shape."""
    from coordinator.providers.errors import ProviderError, ProviderLoadError

    out: dict[str, Any] = {}
    try:
        provider = await runtime.get(name)
    except ProviderLoadError as exc:
        return {"load": {"kind": "Load", "payload": str(exc)}}
    for index, op in enumerate(case["ops"]):
        key = f"{index}:{op}"
        try:
            if op == "inference":
                out[key] = {"ok": _response(await runtime.inference(name, case["request"]))}
            elif op == "stream":
                items: list[dict[str, Any]] = []
                try:
                    async for item in runtime.stream(name, case["request"]):
                        items.append(
                            {"error": _error(item)}
                            if isinstance(item, BaseException)
                            else {"chunk": _chunk(item)}
                        )
                except ProviderError as exc:
                    if not items:
                        raise
                    items.append({"error": _error(exc)})
                out[key] = {"items": items}
            elif op == "count_tokens":
                text, model = case.get("count_text", ""), case.get("count_model", "m1")
                out[key] = {"ok": await runtime.count_tokens(provider, text, model)}
            else:
                rows = await runtime.list_models(provider)
                out[key] = {
                    "ok": [
                        {
                            "id": m.id,
                            "display_name": m.display_name,
                            "max_context_tokens": m.max_context_tokens,
                            "max_output_tokens": m.max_output_tokens,
                        }
                        for m in rows
                    ]
                }
        except ProviderError as exc:
            out[key] = {"error": _error(exc)}
    return out


def provider_config(name: str, case: dict[str, Any], script: Path, scratch: Path) -> dict[str, Any]:
    """The rhaipool config for one case: its table, loopback allowed, one attempt (the oracle runs one)."""
    table = dict(case["config"], script=str(script), egress_allow=["127.0.0.1"])
    return {
        "providers_dir": str(scratch),
        "limits": {"inference_retry_attempts": 1},
        "model_providers": {name: table},
    }


def load_cases() -> list[dict[str, Any]]:
    """``providers/cases.json``."""
    cases: list[dict[str, Any]] = json.loads((CASES / "cases.json").read_text(encoding="utf-8"))
    return cases
