"""Small HTTP helpers every route uses: JSON errors, bodies validated by their schema, the caller's tenant.

Errors are ``{"error": "one line"}`` (the reference's scripts API shape) with a 4xx/5xx status; a route
raises :class:`RouteError` and the app turns it into that response, so no handler builds one by hand.
A body is read under ``max_body_bytes`` and parsed by its schema's validator (coordinator/service/
schemas.py) in one pass; what fails is described in one line naming the field, with a "did you mean"
for a mistyped key. A stream is a :class:`HeldStream`, which ends with its API's error event when the
service cuts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from functools import cache
from typing import Any, Final, Literal

from pydantic import TypeAdapter, ValidationError
from pydantic_core import ErrorDetails
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from coordinator.service.auth import ADMIN
from coordinator.service.errors import RouteError
from coordinator.service.names import shown
from coordinator.service.state import Service

__all__ = [
    "ENCODE",
    "Cut",
    "HeldStream",
    "JSONReply",
    "RouteError",
    "note_script",
    "parse_body",
    "problem",
    "reply",
    "require_admin",
    "require_any",
    "require_tenant",
    "service_of",
]


ENCODE: Final = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
"""One encoder for every reply and event: ``json.dumps`` with arguments builds a new one per call."""
_JSON_TYPE: Final = (b"content-type", b"application/json")


class JSONReply(Response):
    """A JSON body with its headers built directly (what ``Response`` works out per call)."""

    media_type = "application/json"

    def __init__(self, body: bytes, status: int = 200, headers: Mapping[str, str] | None = None) -> None:
        self.status_code, self.body, self.background = status, body, None
        self.raw_headers = [(b"content-length", b"%d" % len(body)), _JSON_TYPE]
        if headers:
            self.raw_headers += [
                (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()
            ]


def reply(body: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    """A JSON response (non-ASCII kept as is, compact), with ``headers`` beside its own two."""
    return JSONReply(ENCODE(body).encode(), status, headers)


Cut = Literal["revoked", "shutting_down"]
"""Why the service cut a stream: its tenant's token stopped working, or a drain's grace ran out."""


class HeldStream(StreamingResponse):
    """Server-Sent Events that hold ``held`` (the tenant's stream slot, and the runtime's stream) from
    before their first byte to their end, however they end: a reader that goes away cancels the script.

    A stream the service cuts ends with ``cut(why)``, its API's error event, not a silent close: the
    gate (coordinator/service/gate.py) cancels the request's task and, for a revoked tenant, says so in
    the request's ``state`` (``cut``); any other cut is a drain's."""

    def __init__(
        self,
        events: AsyncIterator[bytes] | AsyncIterator[str],
        held: AbstractAsyncContextManager[Any],
        cut: Callable[[Cut], bytes | str],
    ) -> None:
        super().__init__(
            events,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
        self._held, self._cut = held, cut

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with self._held:
                await super().__call__(scope, receive, send)
        except asyncio.CancelledError:
            why: Cut = "revoked" if scope.get("state", {}).get("cut") == "revoked" else "shutting_down"
            event = self._cut(why)
            body = event.encode() if isinstance(event, str) else event
            with contextlib.suppress(Exception):  # the connection may be gone as well
                await send({"type": "http.response.body", "body": body, "more_body": False})
            raise


def service_of(request: Request) -> Service:
    """The running service."""
    service: Service = request.app.state.service
    return service


def _identify(request: Request) -> str | object | None:
    service = service_of(request)
    service.maybe_reload()
    return service.tokens.identify(request.headers.get("authorization"))


def _unauthorized() -> RouteError:
    return RouteError(401, "unauthorized", {"WWW-Authenticate": "Bearer"})


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


async def parse_body(request: Request, schema: Any) -> Any:
    """The request's body validated by ``schema`` (a type of schemas.py): read under the size limit,
    parsed and checked in one pass by pydantic-core (which also caps the nesting depth); 413 or a
    one-line 400 naming the field otherwise."""
    limit = service_of(request).config.max_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise RouteError(413, f"request body larger than {limit} bytes")
    raw = await _read_body(request.receive, limit)
    try:
        return _validator(schema)(raw)
    except ValidationError as exc:
        raise RouteError(400, problem(schema, raw, exc)) from None


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
            raise RouteError(413, f"request body larger than {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


@cache
def _validator(schema: Any) -> Callable[[bytes], Any]:
    """The schema's JSON validator, built once per schema."""
    return TypeAdapter(schema).validate_json


@cache
def _json_schema(schema: Any) -> dict[str, Any]:
    return TypeAdapter(schema).json_schema()


def problem(schema: Any, raw: bytes, exc: ValidationError) -> str:
    """What is wrong with the body, in one line: the deepest problem first (a union reports one per
    member; the deepest is the member the caller meant), an unknown key before a missing one (a
    mistyped key is both), then how many more there are."""
    errors = exc.errors(include_url=False, include_input=False)
    first = max(errors, key=lambda e: (len(e["loc"]), e["type"] == "extra_forbidden"))
    text = _describe(schema, raw, first)
    return text if len(errors) == 1 else f"{text} (and {len(errors) - 1} more)"


def _describe(schema: Any, raw: bytes, error: ErrorDetails) -> str:
    kind, loc = error["type"], error["loc"]
    if kind == "json_invalid":
        return _not_json(raw, str((error.get("ctx") or {}).get("error", error["msg"])))
    if not loc and kind in ("model_type", "dict_type", "model_attributes_type"):
        return "request body must be a JSON object"
    where, parents = _locate(_json_schema(schema), loc[:-1] if kind == "extra_forbidden" else loc)
    if kind == "extra_forbidden":
        key = str(loc[-1])
        path = f"{where}.{shown(key)}" if where else shown(key)
        known = sorted({name for p in parents for name in p.get("properties", {})})
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
        hint = f": did you mean '{close[0]}'?" if close else f" (expected one of {', '.join(known)})"
        return f"unknown field '{path}'{hint}"
    if kind == "missing":
        return f"missing field '{where}'"
    subject = f"field '{where}'" if where else "request body"  # a check of the whole body has no field
    if kind == "value_error":
        return f"{subject}: {(error.get('ctx') or {}).get('error', error['msg'])}"
    return f"{subject}: {error['msg']}"


def _not_json(raw: bytes, reason: str) -> str:
    if not raw.strip():
        return "request body is empty: expected a JSON object"
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return "request body is not UTF-8"
    if "surrogate" in reason or "hex escape" in reason:
        return f"request body is not JSON: {reason} (a \\u escape of a lone UTF-16 surrogate is not text)"
    if "recursion limit" in reason:
        return f"request body is not JSON: nested too deep ({reason})"
    return f"request body is not JSON: {reason}"


def _locate(root: dict[str, Any], loc: Sequence[int | str]) -> tuple[str, list[dict[str, Any]]]:
    """The field path as the caller wrote it (``messages[0].content``) and the schemas found there.

    Walks the JSON schema along pydantic's location; a part no schema there names (a union member's
    tag, such as ``str`` or ``tool_use``) is left out of the path.
    """
    definitions = root.get("$defs", {})
    here = _expand(root, definitions)
    path = ""
    for part in loc:
        if isinstance(part, int):
            inner = [s["items"] for s in here if isinstance(s.get("items"), dict)]
            if inner:
                here, path = [x for s in inner for x in _expand(s, definitions)], f"{path}[{part}]"
            continue
        inner = [s["properties"][part] for s in here if part in s.get("properties", {})]
        inner += [s["additionalProperties"] for s in here if isinstance(s.get("additionalProperties"), dict)]
        if inner:
            here = [x for s in inner for x in _expand(s, definitions)]
            path = f"{path}.{shown(part)}" if path else shown(part)
    return path, here


def _expand(schema: dict[str, Any], definitions: dict[str, Any]) -> list[dict[str, Any]]:
    """The schema with ``$ref`` resolved and ``anyOf``/``oneOf`` flattened into their members."""
    out: list[dict[str, Any]] = []
    stack = [schema]
    while stack:
        item = stack.pop()
        ref = item.get("$ref")
        if isinstance(ref, str):
            stack.append(definitions.get(ref.rsplit("/", 1)[-1], {}))
        elif "anyOf" in item or "oneOf" in item:
            stack.extend(item.get("anyOf", []) + item.get("oneOf", []))
        else:
            out.append(item)
    return out
