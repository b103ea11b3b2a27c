"""``Idempotency-Key`` on every write (pure ASGI middleware): a retried request applies once.

A ``POST``, ``PUT`` or ``DELETE`` that carries ``Idempotency-Key: K`` (1 to 255 printable ASCII
characters) is answered once; its answer (status, headers, body) is stored under ``(caller, K)`` with a
fingerprint of the request (method, path, query and body sha256). A later request with the same key:

* the same request: the stored answer again, with ``Idempotent-Replayed: true``, and nothing runs;
* another request: ``422`` (a key names one request);
* while the first is still running: ``409`` (retry once it has answered);
* after the first was cut short (the service stopped or was killed before it answered): ``409``
  saying so: it may or may not have applied, so the client looks, then retries with a new key.

The key is recorded (claimed) before the request runs and its answer after, so a request applies at
most once per key even across a crash. Answers with a 5xx status release the key (nothing was
applied: the retry runs), and so do a ``429`` (a quota or a rate limit refused the request before it
applied; replaying it would refuse every retry of a request that may now succeed) and streams and
bodies over the size limit, whose answers are not kept. Keys are kept for :data:`TTL_SECS`. The
caller is the token's tenant (or the admin), so tenants' keys never meet.

What a caller keeps is bounded by its ``max_idempotency_bytes`` (``[serve.tenant_defaults]``,
``[tenants.<id>]``; the admin has the defaults): past it the oldest answers lose their bodies first, and
a replay of such a key answers ``409`` saying its request applied (at most once still holds), then
the oldest keys are forgotten (a retry of one that old would run again).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from typing import Any, Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coordinator.service.auth import ADMIN
from coordinator.service.errors import StorageFailed
from coordinator.service.state import Service
from coordinator.service.storage import DROPPED

__all__ = ["TTL_SECS", "Idempotency"]

log = logging.getLogger("rhaipool.service")

TTL_SECS: Final = 24 * 3600.0
_HEADER: Final = b"idempotency-key"
_WRITES: Final = frozenset({"POST", "PUT", "DELETE", "PATCH"})
_ADMIN_CALLER: Final = "\x00admin"  # no tenant id holds a NUL
_KEPT_HEADERS: Final = frozenset({b"content-type", b"retry-after", b"location"})
_CUT_SHORT: Final = (
    "the request first sent with this Idempotency-Key was cut short (the service stopped before it "
    "answered): it may or may not have applied; check, then retry with a new key"
)
_DROPPED: Final = (
    "the request sent with this Idempotency-Key applied (status %d); its answer is no longer kept "
    "(max_idempotency_bytes): check its result, and send a new request with a new key"
)


def _json(status: int, error: str) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    body = json.dumps({"error": error}).encode()
    return status, [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))], body


class Idempotency:
    """Answers a repeated ``Idempotency-Key`` from the database instead of running the request again."""

    def __init__(self, app: ASGIApp, service: Service) -> None:
        self.app = app
        self.service = service
        self._running: set[tuple[str, str]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _WRITES:
            await self.app(scope, receive, send)
            return
        key = auth = None
        for name, value in scope["headers"]:
            if name == _HEADER:
                key = value
            elif name == b"authorization":
                auth = value
        if key is None:
            await self.app(scope, receive, send)
            return
        await self._keyed(scope, receive, send, key, auth)

    async def _keyed(
        self, scope: Scope, receive: Receive, send: Send, raw: bytes, auth: bytes | None
    ) -> None:
        if not 0 < len(raw) <= 255 or not all(0x20 < b < 0x7F for b in raw):
            await _send(send, *_json(400, "Idempotency-Key must be 1 to 255 printable ASCII characters"))
            return
        who = self.service.tokens.identify(None if auth is None else auth.decode("latin-1"))
        if who is None:  # let the route answer 401 as it always does
            await self.app(scope, receive, send)
            return
        caller = _ADMIN_CALLER if who is ADMIN else str(who)
        key = raw.decode("ascii")
        body, more = await _read(receive, self.service.config.max_body_bytes)
        fingerprint = json.dumps(
            [scope["method"], scope["path"], scope.get("query_string", b"").decode("latin-1"),
             hashlib.sha256(body).hexdigest()]
        )  # fmt: skip
        try:
            await self._answer(scope, receive, send, (caller, key), fingerprint, body, more)
        except StorageFailed as exc:  # the key could not be read or claimed: nothing ran
            await _send(send, *_json(exc.status, str(exc.error)))

    async def _answer(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        slot: tuple[str, str],
        fingerprint: str,
        body: bytes,
        more: bool,
    ) -> None:
        storage = self.service.storage
        stored = await storage.idempotent_answer(*slot)
        if stored is None:
            claimed = await storage.claim_idempotency_key(*slot, fingerprint, time.time() - TTL_SECS)
            if claimed:
                self._running.add(slot)
                try:
                    await self._first(scope, send, slot, body, more, receive)
                finally:
                    self._running.discard(slot)
                return
            stored = await storage.idempotent_answer(*slot)  # claimed by a concurrent request
            assert stored is not None
        request, status, headers, answer = stored
        if request != fingerprint:
            await _send(send, *_json(422, "this Idempotency-Key was used for another request"))
        elif status == 0 and slot in self._running:
            await _send(send, *_json(409, "a request with this Idempotency-Key is still running"))
        elif status == 0:
            await _send(send, *_json(409, _CUT_SHORT))
        elif headers == DROPPED:
            await _send(send, *_json(409, _DROPPED % status))
        else:
            head = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in json.loads(headers)]
            await _send(send, status, [*head, (b"idempotent-replayed", b"true")], answer)

    async def _first(
        self, scope: Scope, send: Send, slot: tuple[str, str], body: bytes, more: bool, receive: Receive
    ) -> None:
        replayed = [False]

        async def replay() -> Message:
            if not replayed[0]:
                replayed[0] = True
                return {"type": "http.request", "body": body, "more_body": more}
            return await receive()

        start: dict[str, Any] = {}
        chunks: list[bytes] = []
        streaming = [False]

        async def capture(message: Message) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                streaming[0] = streaming[0] or message.get("more_body", False)
            await send(message)

        await self.app(scope, replay, capture)
        status = int(start.get("status", 500))
        storage = self.service.storage
        try:
            if status >= 500 or status == 429 or streaming[0] or more:
                await storage.release_idempotency_key(*slot)
                return
            headers = [
                (k.decode("latin-1"), v.decode("latin-1"))
                for k, v in start.get("headers", ())
                if k in _KEPT_HEADERS
            ]
            config = self.service.config
            limits = config.tenant_defaults if slot[0] == _ADMIN_CALLER else config.limits(slot[0])
            limit = limits.max_idempotency_bytes
            await storage.save_idempotent_answer(*slot, status, json.dumps(headers), b"".join(chunks), limit)
        except StorageFailed as exc:  # answered already: a retry gets the "cut short" 409
            log.warning("Idempotency-Key answer not stored: %s", exc.error)


async def _read(receive: Receive, limit: int) -> tuple[bytes, bool]:
    """Up to ``limit`` + 1 bytes of the body, and whether more is still to come (then it is not stored:
    the route answers 413 for it)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), False
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), False
        if size > limit:
            return b"".join(chunks), True


async def _send(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    if not any(k == b"content-length" for k, _ in headers):
        headers = [*headers, (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
