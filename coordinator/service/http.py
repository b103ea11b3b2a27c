"""Small HTTP helpers every route uses: JSON errors, bounded JSON bodies, the caller's tenant.

Errors are ``{"error": "one line"}`` (the reference's scripts API shape) with a 4xx/5xx status; a route
raises :class:`HTTPError` and the app turns it into that response, so no handler builds one by hand.
"""

from __future__ import annotations

import json
from typing import Any, Final

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive

from coordinator.service.auth import ADMIN
from coordinator.service.errors import HTTPError
from coordinator.service.state import Service

__all__ = [
    "HTTPError",
    "JSONReply",
    "field",
    "json_body",
    "note_script",
    "reply",
    "require_admin",
    "require_any",
    "require_tenant",
    "service_of",
]


_ENCODE: Final = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
"""One encoder for every reply: ``json.dumps`` with arguments builds a new one per call."""
_JSON_TYPE: Final = (b"content-type", b"application/json")


class JSONReply(Response):
    """A JSON body with its two headers built directly (what ``Response`` works out per call)."""

    media_type = "application/json"

    def __init__(self, body: bytes, status: int = 200) -> None:
        self.status_code, self.body, self.background = status, body, None
        self.raw_headers = [(b"content-length", b"%d" % len(body)), _JSON_TYPE]


def reply(body: Any, status: int = 200) -> Response:
    """A JSON response (non-ASCII kept as is, compact)."""
    return JSONReply(_ENCODE(body).encode(), status)


def service_of(request: Request) -> Service:
    """The running service."""
    service: Service = request.app.state.service
    return service


def _identify(request: Request) -> str | object | None:
    service = service_of(request)
    service.maybe_reload()
    return service.tokens.identify(request.headers.get("authorization"))


def _unauthorized() -> HTTPError:
    return HTTPError(401, "unauthorized", {"WWW-Authenticate": "Bearer"})


def require_tenant(request: Request) -> str:
    """The tenant the bearer token belongs to; 401 (no detail) for anything else, the admin token too."""
    who = _identify(request)
    if not isinstance(who, str):
        raise _unauthorized()
    _note_tenant(request, who)
    return who


def note_script(request: Request, name: str, sha256: str | None) -> None:
    """Tell the gate which script the call runs (the structured call log names it and its hash)."""
    facts = request.scope.setdefault("state", {})
    facts["script"], facts["sha256"] = name, sha256


def _note_tenant(request: Request, tenant: str) -> None:
    """Tell the gate whose call this is (metrics by tenant); counted in flight from here on."""
    facts = request.scope.setdefault("state", {})
    if "tenant" not in facts:
        facts["tenant"] = tenant
        metrics = getattr(request.app.state, "metrics", None)
        if metrics is not None:
            metrics.child(metrics.inflight, tenant).inc()


def require_admin(request: Request) -> None:
    """401 unless the admin token was presented."""
    if _identify(request) is not ADMIN:
        raise _unauthorized()


def require_any(request: Request) -> str | None:
    """The tenant, or None for the admin token; 401 otherwise."""
    who = _identify(request)
    if who is ADMIN:
        return None
    if isinstance(who, str):
        _note_tenant(request, who)
        return who
    raise _unauthorized()


async def json_body(request: Request) -> dict[str, Any]:
    """The request's JSON object, read under the size limit; 413/400/415 with a one-line reason."""
    limit = service_of(request).config.max_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise HTTPError(413, f"request body larger than {limit} bytes")
    raw = await _read_body(request.receive, limit)
    if not raw:
        raise HTTPError(400, "request body is empty: expected a JSON object")
    try:
        body = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise HTTPError(400, "request body is not UTF-8") from None
    except ValueError as exc:
        raise HTTPError(400, f"request body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise HTTPError(400, f"request body must be a JSON object, got {type(body).__name__}")
    return body


async def _read_body(receive: Receive, limit: int) -> bytes:
    """The body's messages read as ``Request.stream`` reads them (a disconnect raises
    ``ClientDisconnect``) without its async generator: once per request, most bodies in one message."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        kind = message["type"]
        if kind == "http.disconnect":
            raise ClientDisconnect()
        if kind != "http.request":
            continue
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise HTTPError(413, f"request body larger than {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def field(body: dict[str, Any], key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
    """``body[key]`` checked against ``kind``; 400 naming the field when missing or of another type."""
    if key not in body or body[key] is None:
        if default is ...:
            raise HTTPError(400, f"missing field '{key}'")
        return default
    value = body[key]
    bad_bool = isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,))
    if not isinstance(value, kind) or bad_bool:
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise HTTPError(400, f"field '{key}' must be {names}")
    return value
