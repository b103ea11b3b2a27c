"""A request for a tenant another live coordinator owns, forwarded to that owner (several coordinators
over one PostgreSQL database).

The gate calls :meth:`Forwarder.forward` when the tenant's lease is another coordinator's: the request
(method, path, query, headers -- the tenant's credential and ``Idempotency-Key`` among them -- and body)
goes to the owner's ``[serve] advertise_url``, stored with its lease, over one pooled HTTP client, and
the owner's reply comes back as it is written: status, headers, and the body chunk by chunk (a stream's
events as they come, compressed bodies untouched). The owner checks the credential again and applies
the idempotency key; no trust between coordinators is added beyond the shared database.

The forward carries :data:`HOP`, naming this coordinator (and the proof that a coordinator wrote it:
``handover.py``): a coordinator that receives a forwarded request for a tenant it does not own refuses
it (``503`` and ``Retry-After``: the lease moved while the request travelled) and never forwards it
again, so a request crosses one hop at most. An owner handing the tenant over answers ``503`` with
``rhaipool-moving``: that answer is not relayed (:meth:`Forwarder.forward` returns True and the gate
tries again, here once the lease is free). An
owner that cannot be reached, or that stops answering before its reply began, is a ``503`` with
``Retry-After`` (never a reply of this coordinator's own); an owner that dies while its reply streams
ends the connection to the client, as its own death would have.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Final
from urllib.parse import urlsplit

import aiohttp
from starlette.types import Message, Receive, Scope, Send
from yarl import URL

from coordinator.service.config import ServeConfig
from coordinator.service.handover import MOVING_HEADER, PROOF_HEADER
from coordinator.service.storage import Lease

__all__ = ["HOP", "SERVED_BY", "Forwarder", "advertised", "elsewhere", "read_body", "refusal"]

HOP: Final = b"rhaipool-forwarded-by"
"""The header a forwarded request carries (the forwarding coordinator's id): it is never forwarded again."""
SERVED_BY: Final = b"rhaipool-served-by"
"""The header a forwarded reply carries back: the id of the coordinator that answered it."""
CONNECT_SECS: Final = 5.0
"""How long the owner may take to accept the forward's connection."""
_HOP_BY_HOP: Final = frozenset(
    {
        b"connection",
        b"expect",  # the body is read already: no 100-continue on the way to the owner
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"host",
        b"content-length",
    }
)
_OURS: Final = frozenset({HOP, PROOF_HEADER, MOVING_HEADER})
"""The coordinators' own headers: a client's copies are not passed on."""
_REPLY_DROPS: Final = (_HOP_BY_HOP - {b"content-length"}) | {b"date", b"server"}
"""Not relayed from the owner's reply: its length holds (the body passes as it is); the server here
writes its own ``date`` and ``server``."""
log = logging.getLogger("rhaipool.service")


def advertised(config: ServeConfig) -> str:
    """Where the other coordinators reach this one: ``[serve] advertise_url``, or ``listen``'s address,
    or -- listening on every interface -- the address of the interface this machine reaches the
    database through (a pod's own address in Kubernetes), else its host name."""
    if config.advertise_url is not None:
        return config.advertise_url
    scheme = "https" if config.tls_cert is not None else "http"
    host = socket.gethostname()
    where = urlsplit(config.database_url or "")
    if where.hostname:
        with contextlib.suppress(OSError, ValueError):
            found = socket.getaddrinfo(where.hostname, where.port or 5432, type=socket.SOCK_DGRAM)
            family, _, _, _, address = found[0]
            with socket.socket(family, socket.SOCK_DGRAM) as probe:
                probe.connect(address)  # no packet is sent: the kernel only picks the route
                host = str(probe.getsockname()[0])
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{config.port}"


def refusal(message: str) -> tuple[int, bytes, tuple[tuple[bytes, bytes], ...]]:
    """The 503 of a request that could not be served here nor forwarded: status, body, headers."""
    return 503, json.dumps({"error": message}).encode(), ((b"retry-after", b"1"),)


class Forwarder:
    """One pooled HTTP client to the other coordinators (opened and closed with the service)."""

    def __init__(self, me: str, proof: str, read_secs: float, per_owner: int, idle_secs: float) -> None:
        self.me = me
        self._proof = proof
        self._read_secs = read_secs
        self._per_owner = per_owner
        self._idle_secs = idle_secs
        self._session: aiohttp.ClientSession | None = None
        self.forwarded = 0
        """Requests forwarded so far (whatever their outcome)."""

    async def start(self) -> None:
        """Open the connection pool (in the running event loop)."""
        self._session = aiohttp.ClientSession(
            # At most as many connections to one owner as it takes from one address (more would wait
            # here); an idle one is closed well before the owner's idle timeout could close it under a
            # request (no request is ever retried).
            connector=aiohttp.TCPConnector(
                limit=0, limit_per_host=self._per_owner, keepalive_timeout=self._idle_secs / 2
            ),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_SECS, sock_read=self._read_secs),
            auto_decompress=False,  # the owner's bytes go to the client as they are
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
            cookie_jar=aiohttp.DummyCookieJar(),
        )

    async def aclose(self) -> None:
        """Close the pooled connections."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def forward(
        self,
        lease: Lease,
        scope: Scope,
        body: bytes,
        receive: Receive,
        send: Send,
        still_owner: Callable[[], Awaitable[bool]],
        every: float,
    ) -> bool:
        """Answer the request (its ``body`` read already) with the owner's reply, or a 503 saying why
        there is none; True, with nothing sent, when the owner answered that it is handing the tenant
        over (the caller tries again).

        ``still_owner`` is asked every ``every`` seconds while the reply is awaited or streams: when
        the lease moved (the owner stopped answering -- paused, cut off -- and its lease ran out), the
        wait ends with a 503, or the stream is cut, ``every`` seconds later unless the reply ended in
        that time (an owner that handed the tenant over answers what it admitted before releasing the
        lease, so a forward racing the hand-over gets its whole answer), instead of hanging on a
        coordinator that no longer serves the tenant."""
        if self._session is None or not lease.url:
            await _answer(send, *refusal(elsewhere(lease, ", whose address is not known")))
            return False
        path = scope.get("raw_path") or scope["path"].encode()
        if not path.startswith(b"/"):
            await _answer(
                send, 400, json.dumps({"error": "the request's target must be a path"}).encode(), ()
            )
            return False
        target = lease.url + path.decode("latin-1")
        if scope.get("query_string"):
            target += "?" + scope["query_string"].decode("latin-1")
        url = URL(target, encoded=True)  # as the client wrote it: nothing re-quoted on the way
        headers = [
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in scope["headers"]
            if k not in _HOP_BY_HOP and k not in _OURS
        ]
        headers += [(HOP.decode(), self.me), (PROOF_HEADER.decode(), self._proof)]
        self.forwarded += 1
        started = [False]
        moving = [False]
        pump = asyncio.ensure_future(
            self._relay(lease, scope["method"], url, headers, body, send, started, moving)
        )
        left = asyncio.ensure_future(_disconnect(receive))
        moved = asyncio.ensure_future(_moved(still_owner, every))
        gone = False
        try:
            await asyncio.wait((pump, left, moved), return_when=asyncio.FIRST_COMPLETED)
            if moved.done() and not pump.done():
                # An owner that handed the tenant over answered everything it admitted before its
                # release: its reply is on the way. One that was paused or cut off sends nothing.
                await asyncio.wait((pump, left), timeout=every)
                gone = not pump.done() and not left.done()
        finally:
            for task in (pump, left, moved):
                if not task.done():
                    task.cancel()
            for task in (pump, left, moved):
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if gone:
            log.warning(
                "tenant %s: its owner %s stopped answering a forwarded request", lease.tenant, lease.owner
            )
            if not started[0]:
                why = f", at {lease.url}, which stopped answering and lost its lease"
                await _answer(send, *refusal(elsewhere(lease, why, _UNKNOWN)))
            # else: the reply unfinished, the server ends the client's connection
        return moving[0]

    async def _relay(
        self,
        lease: Lease,
        method: str,
        url: URL,
        headers: list[tuple[str, str]],
        body: bytes,
        send: Send,
        started: list[bool],
        moving: list[bool],
    ) -> None:
        assert self._session is not None
        try:
            async with self._session.request(
                method, url, headers=headers, data=body or None, allow_redirects=False
            ) as reply:
                if reply.status == 503 and MOVING_HEADER.decode() in reply.headers:
                    await reply.read()  # the connection goes back to the pool
                    moving[0] = True
                    return
                head = [(k, v) for k, v in reply.raw_headers if k.lower() not in _REPLY_DROPS]
                head.append((SERVED_BY, lease.owner.encode()))
                started[0] = True
                await send({"type": "http.response.start", "status": reply.status, "headers": head})
                async for chunk in reply.content.iter_any():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
        except (aiohttp.ClientError, TimeoutError) as exc:
            if started[0]:
                log.warning(
                    "tenant %s: the owner %s (%s) stopped in the middle of a forwarded reply: %s",
                    lease.tenant,
                    lease.owner,
                    lease.url,
                    _describe(exc),
                )
                return  # the reply unfinished: the server ends the client's connection
            if isinstance(exc, aiohttp.ClientConnectorError):  # nothing reached the owner
                why = f", at {lease.url}, which cannot be reached: {_describe(exc)}"
                await _answer(send, *refusal(elsewhere(lease, why)))
            else:
                why = f", at {lease.url}, which stopped answering: {_describe(exc)}"
                await _answer(send, *refusal(elsewhere(lease, why, _UNKNOWN)))


_UNKNOWN: Final = (
    "the request may have been applied there; retry it (with the same Idempotency-Key a write applies once)"
)


def elsewhere(lease: Lease, why: str, outcome: str = "nothing changed; retry") -> str:
    """Why a request for another coordinator's tenant got no reply, and what became of it."""
    return f"tenant {lease.tenant} is served by another coordinator ({lease.owner}{why}): {outcome}"


async def _moved(still_owner: Callable[[], Awaitable[bool]], every: float) -> None:
    """Returns once the tenant's lease is no longer the one the request was forwarded under."""
    while True:
        await asyncio.sleep(every)
        if not await still_owner():
            return


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    return str(exc) or type(exc).__name__


async def read_body(receive: Receive) -> tuple[bytes, bool]:
    """The whole request body (the server already bounds it), and whether the client went away."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"", True
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks), False


async def _disconnect(receive: Receive) -> None:
    """Returns when the client goes away (nothing else arrives after the body)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _answer(send: Send, status: int, body: bytes, headers: tuple[tuple[bytes, bytes], ...]) -> None:
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]
    start: Message = {"type": "http.response.start", "status": status, "headers": head}
    await send(start)
    await send({"type": "http.response.body", "body": body})
