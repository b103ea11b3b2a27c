"""The gate of a service with the standard fronts: on ``/v1/`` paths, the Anthropic SDK's
``x-api-key`` carries the tenant's token as ``Authorization: Bearer`` does, and every error answered
before or around the fronts' own routes (the gate's refusals, a bad token, a body over the size
limit, pool backpressure) is written in the API's own error shape, its status and headers kept.

An error is for the Anthropic API on ``/v1/messages…`` or with an ``anthropic-version`` header, else
for the OpenAI API. Other paths pass through untouched (one prefix test per request).
"""

from __future__ import annotations

import json
from typing import Any, Final

from starlette.types import Message, Receive, Scope, Send

from coordinator.service.front import anthropic, openai
from coordinator.service.front.common import Refusal, kind_of_status
from coordinator.service.gate import Gate

__all__ = ["FrontGate"]

_AUTHORIZATION: Final = b"authorization"
_API_KEY: Final = b"x-api-key"
_VERSION: Final = b"anthropic-version"


class FrontGate(Gate):
    """:class:`Gate`, with the ``/v1/`` credential header and error shapes of the two APIs."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await super().__call__(scope, receive, send)
            return
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        names = [name for name, _ in headers]
        anthropic_api = scope["path"].startswith("/v1/messages") or _VERSION in names
        if _API_KEY in names and _AUTHORIZATION not in names:
            key = headers[names.index(_API_KEY)][1]
            scope = {**scope, "headers": [*headers, (_AUTHORIZATION, b"Bearer " + key)]}
        shaper = _Shaper(send, anthropic.error_body if anthropic_api else openai.error_body)
        await super().__call__(scope, receive, shaper.send)


class _Shaper:
    """Passes a reply through, except an error whose body is the service's plain ``{"error": "..."}``:
    that one is rewritten in the API's shape (an error the fronts wrote themselves is left as it is)."""

    __slots__ = ("_body", "_chunks", "_held", "_send")

    def __init__(self, send: Send, body: Any) -> None:
        self._send, self._body = send, body
        self._held: Message | None = None
        self._chunks: list[bytes] = []

    async def send(self, message: Message) -> None:
        if self._held is None:
            if message["type"] == "http.response.start" and message["status"] >= 400:
                self._held = message
                return
            await self._send(message)
            return
        self._chunks.append(message.get("body", b""))
        if message.get("more_body", False):
            return
        start, body = self._held, b"".join(self._chunks)
        status = start["status"]
        new = self._reshaped(status, body)
        if new is not None:
            kept = [
                (k, v) for k, v in start.get("headers", []) if k not in (b"content-length", b"content-type")
            ]
            headers = [*kept, (b"content-type", b"application/json"), (b"content-length", b"%d" % len(new))]
            start, body = {**start, "headers": headers}, new
        await self._send(start)
        await self._send({"type": "http.response.body", "body": body})

    def _reshaped(self, status: int, body: bytes) -> bytes | None:
        try:
            value = json.loads(body)
        except ValueError:
            value = None
        if isinstance(value, dict) and not isinstance(value.get("error"), str):
            return None  # the API's own shape already (or not the service's plain error)
        message = value["error"] if isinstance(value, dict) else body.decode("utf-8", "replace")
        error = Refusal(status, kind_of_status(status), message or f"HTTP {status}")
        return json.dumps(self._body(error), ensure_ascii=False).encode()
