"""The service's front door (pure ASGI middleware): in-flight accounting, draining, metrics per call,
each tenant's concurrent requests (``max_connections``), and the end of a revoked tenant's requests.

While draining (after SIGTERM) a new call is refused at once with a retryable ``503`` and
``Retry-After``; calls already in flight may finish until the grace period ends, then the stragglers
are cancelled and answered ``503`` the same way (unless their reply had already begun). Health,
readiness and metrics stay reachable throughout, so an orchestrator sees the drain. A tenant's token
is looked up here too (a dict lookup: the routes' own lookup hits the same cache), so a tenant over
its ``max_connections`` is answered 429 before anything is read, and when its token is revoked or
rotated its requests in flight are cut with 401 (unless their reply had begun).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coordinator.service.errors import StorageFailed
from coordinator.service.forward import HOP, Forwarder, elsewhere, read_body, refusal
from coordinator.service.handover import RETRY_SECS
from coordinator.service.metrics import Metrics
from coordinator.service.observer import current_request
from coordinator.service.state import Service
from coordinator.service.storage import Lease

__all__ = ["EXEMPT", "Gate"]

EXEMPT: Final = frozenset({"/healthz", "/readyz", "/metrics", "/openapi.json"})
calls_log = logging.getLogger("rhaipool.service.calls")
log = logging.getLogger("rhaipool.service")
_TOO_BIG: Final = json.dumps({"error": "request headers too large"}).encode()
_REFUSAL: Final = json.dumps({"error": "the service is shutting down; retry on another instance"}).encode()
_REVOKED: Final = json.dumps({"error": "unauthorized: the tenant's token was revoked"}).encode()
_AUTHORIZATION: Final = b"authorization"


class Gate:
    """Counts and, when told to drain, refuses and finally cuts the calls passing through it."""

    def __init__(self, app: ASGIApp, metrics: Metrics, service: Service) -> None:
        self.app = app
        self.metrics = metrics
        self.service = service
        self.draining = False
        self._tenants: dict[asyncio.Task[Any], tuple[str, dict[str, Any]]] = {}  # task -> tenant, its facts
        self._per_tenant: dict[str, int] = {}
        self.answered = 0
        self._numbers = itertools.count(1)
        self._active: dict[asyncio.Task[Any], list[bool]] = {}
        self._cut: dict[asyncio.Task[Any], bytes] = {}
        self._idle = asyncio.Event()
        self._idle.set()
        self._holders: dict[str, tuple[float, Lease | None]] = {}  # tenant -> when asked, who held it
        self._forwards: dict[str, int] = {}  # tenant -> its requests being forwarded now
        self._quiet: dict[str, asyncio.Event] = {}  # tenant -> set when its last request here ends
        self._handing: set[asyncio.Task[None]] = set()

    @property
    def inflight(self) -> int:
        """Calls between request and reply right now."""
        return len(self._active)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in EXEMPT:
            await self.app(scope, receive, send)
            return
        if self.draining:
            await _refuse(send)
            return
        if sum(len(k) + len(v) for k, v in scope["headers"]) > self.service.config.max_header_bytes:
            await _answer(send, 431, _TOO_BIG, ())
            return
        tenant = self._tenant(scope)
        if tenant is None:
            await self._track(scope, receive, send)
            return
        if not self.service.leased:
            await self._admit(tenant, send, lambda: self._track(scope, receive, send, tenant))
            return
        # Several coordinators: serve a tenant only under its lease, else pass the request to its owner.
        hop = next((value for key, value in scope["headers"] if key == HOP), None)
        handovers = self.service.handovers
        if hop is not None and handovers.just_released(tenant) is not None:
            await _answer(send, *handovers.answer(tenant))  # sent before the hand-over: tried again
            return
        while True:
            try:
                lease = await self.service.own(tenant)
            except StorageFailed as exc:
                refusal = json.dumps({"error": exc.error}).encode()
                await _answer(send, exc.status, refusal, ((b"retry-after", b"5"),))
                return
            if lease is not None:  # another live coordinator's: the request goes there (forward.py)
                await self._forward(lease, scope, receive, send, hop is not None)
                return
            if not handovers.moving(tenant):
                break
            if hop is not None:  # being handed over: the forwarding coordinator tries again itself
                await _answer(send, *handovers.answer(tenant))
                return
            await handovers.wait(tenant)  # then it is served where it went (or here, if it stayed)
        by = None if hop is None else handovers.forwarder(scope["headers"], hop)
        if handovers.note(tenant, by):
            assert by is not None
            self._hand_over(tenant, by)
            await _answer(send, *handovers.answer(tenant))
            return
        await self._admit(tenant, send, lambda: self._track(scope, receive, send, tenant))

    async def _admit(self, tenant: str, send: Send, serve: Callable[[], Awaitable[None]]) -> None:
        """Serve a tenant's request here within its ``max_connections`` (``serve`` runs it, counted)."""
        limit = self.service.limits(tenant).max_connections
        held = self._per_tenant.get(tenant, 0)
        if held >= limit:
            body = json.dumps(
                {"error": f"the tenant already has {limit} requests in flight (quota max_connections)"}
            )
            await _answer(send, 429, body.encode(), ((b"retry-after", b"1"),))
            return
        self._per_tenant[tenant] = held + 1
        try:
            await serve()
        finally:
            left = self._per_tenant[tenant] - 1
            if left:
                self._per_tenant[tenant] = left
            else:
                del self._per_tenant[tenant]
                quiet = self._quiet.pop(tenant, None)
                if quiet is not None:
                    quiet.set()

    def _hand_over(self, tenant: str, to: str) -> None:
        """Start handing ``tenant`` over to coordinator ``to`` (``handover.py``): from now on no new
        request for it is admitted; once its calls here ended, the lease is released."""
        self.service.handovers.begin(tenant)
        task = asyncio.create_task(self._handing_over(tenant, to), name=f"rhaipool-handover-{tenant}")
        self._handing.add(task)
        task.add_done_callback(self._handing.discard)

    async def _handing_over(self, tenant: str, to: str) -> None:
        grace = min(self.service.config.grace_secs, self.service.storage.lease_secs)
        try:
            if self._per_tenant.get(tenant, 0):
                quiet = self._quiet.setdefault(tenant, asyncio.Event())
                try:
                    await asyncio.wait_for(quiet.wait(), grace)
                except TimeoutError:
                    log.warning(
                        "tenant %s: not handed over to %s: its calls here did not end within %s s",
                        tenant,
                        to,
                        grace,
                    )
                    self.service.handovers.hold(tenant)
                    return
            await self.service.hand_over(tenant, to)
        except StorageFailed as exc:  # the lease runs out instead; the new owner takes it then
            log.warning("tenant %s: its lease could not be released for %s: %s", tenant, to, exc.error)
        finally:
            self.service.handovers.end(tenant)

    async def _forward(
        self, lease: Lease, scope: Scope, receive: Receive, send: Send, forwarded_already: bool
    ) -> None:
        """Answer with the owner's reply, counted and drained like a call served here; a request that
        was forwarded already, or one whose owner's address is this coordinator's, is refused. An
        owner handing the tenant over answers "moving": then the request is tried again every
        ``RETRY_SECS``, and served here once this coordinator took the lease."""
        forwarder = self.service.forwarder
        if forwarder is None or lease.url == self.service.storage.url:
            why = ", whose address is this coordinator's"
        elif forwarded_already:
            why = "; this request was forwarded here already: its lease moved while it travelled"
        else:
            scope["endpoint"] = forwarded

            async def relay(scope: Scope, receive: Receive, send: Send) -> None:
                await self._relay(forwarder, lease, scope, receive, send)

            self._forwards[lease.tenant] = self._forwards.get(lease.tenant, 0) + 1
            try:
                await self._track(scope, receive, send, lease.tenant, relay)
            finally:
                left = self._forwards.pop(lease.tenant) - 1
                if left:
                    self._forwards[lease.tenant] = left
                else:
                    self._holders.pop(lease.tenant, None)
            return
        await _answer(send, *refusal(elsewhere(lease, why)))

    async def _relay(
        self, forwarder: Forwarder, lease: Lease, scope: Scope, receive: Receive, send: Send
    ) -> None:
        body, gone = await read_body(receive)
        if gone:
            return
        tenant, every = lease.tenant, self.service.storage.lease_secs / 3
        deadline = time.monotonic() + self.service.config.grace_secs + 2 * self.service.storage.lease_secs
        owner = lease

        async def still_owner() -> bool:
            return await self._still_owner(owner, every / 2)

        while await forwarder.forward(owner, scope, body, receive, send, still_owner, every):
            if time.monotonic() > deadline:
                why = ", which is handing it over and did not finish in time"
                await _answer(send, *refusal(elsewhere(owner, why)))
                return
            await asyncio.sleep(RETRY_SECS)
            try:
                holder = await self.service.own(tenant)
            except StorageFailed:
                continue  # the same owner again
            if holder is None:  # handed over to this coordinator: served here
                await self._admit(
                    tenant, send, functools.partial(self.app, scope, _replay(body, receive), send)
                )
                return
            owner = holder  # still handing it over, or it kept it (abandoned), or another took it
            self._holders[tenant] = (time.monotonic(), holder)

    async def _still_owner(self, lease: Lease, fresh: float) -> bool:
        """Whether ``lease`` is still the tenant's (asked once per ``fresh`` seconds, whatever the number
        of forwards waiting); an expired lease is taken here, so its epoch moves."""
        asked, holder = self._holders.get(lease.tenant, (0.0, None))
        if time.monotonic() - asked >= fresh:
            try:
                holder = await self.service.own(lease.tenant)
            except StorageFailed:
                return True  # the database cannot tell: the owner may still answer
            self._holders[lease.tenant] = (time.monotonic(), holder)
        return holder is not None and (holder.owner, holder.epoch) == (lease.owner, lease.epoch)

    def _tenant(self, scope: Scope) -> str | None:
        """The tenant the request's bearer token names, if any (the routes check it again)."""
        for key, value in scope["headers"]:
            if key == _AUTHORIZATION:
                who = self.service.tokens.identify(value.decode("latin-1"))
                return who if isinstance(who, str) else None
        return None

    def cut_tenants(self, tenants: frozenset[str]) -> None:
        """End the requests in flight of tenants whose token stopped working: 401 if not yet answered, a
        stream already begun ends with its API's authentication error (the request's ``cut`` fact says
        why: ``http.HeldStream``)."""
        for task, (tenant, facts) in list(self._tenants.items()):
            if tenant in tenants and task not in self._cut:
                self._cut[task] = _REVOKED
                facts["cut"] = "revoked"
                task.cancel()

    async def _track(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        tenant: str | None = None,
        app: ASGIApp | None = None,
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        started = [False]
        status = [500]
        facts: dict[str, Any] = scope.setdefault("state", {})
        facts["request"] = next(self._numbers)
        current_request.set(facts)  # this task's context: the pool's observers read it (observer.py)

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                started[0] = True
                status[0] = message["status"]
            await send(message)

        self._active[task] = started
        if tenant is not None:
            self._tenants[task] = (tenant, facts)
        self._idle.clear()
        begun = time.perf_counter()
        try:
            await (self.app if app is None else app)(scope, receive, sending)
        except asyncio.CancelledError:
            reason = self._cut.get(task)
            if reason is None:
                raise
            task.uncancel()
            if not started[0]:
                if reason is _REVOKED:
                    status[0] = 401
                    await _answer(send, 401, _REVOKED, ((b"www-authenticate", b"Bearer"),))
                else:
                    status[0] = 503
                    await _refuse(send)
        finally:
            self._active.pop(task, None)
            self._tenants.pop(task, None)
            self._cut.pop(task, None)
            if not self._active:
                self._idle.set()
            tenant = str(facts.get("tenant", ""))
            if tenant:
                self.metrics.child(self.metrics.inflight, tenant).dec()
            endpoint = scope.get("endpoint")
            kind = getattr(endpoint, "__name__", "unknown") if endpoint is not None else "not_found"
            elapsed = time.perf_counter() - begun
            self.metrics.observe(kind, tenant, status[0], elapsed)
            self.answered += 1
            if calls_log.isEnabledFor(logging.INFO):
                _log_call(self.answered, kind, tenant, status[0], elapsed, facts)

    async def drain(self, grace: float) -> int:
        """Refuse new calls, wait up to ``grace`` for the rest, then cut them; how many were cut."""
        self.draining = True
        try:
            await asyncio.wait_for(self._idle.wait(), grace)
            return 0
        except TimeoutError:
            stragglers = list(self._active)  # a stream already begun is ended where it is
            for task in stragglers:
                self._cut[task] = _REFUSAL
                task.cancel()
            await asyncio.sleep(0)
            return len(stragglers)


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` for a request whose body was read already: the body, then what the client sends."""
    given = [False]

    async def replay() -> Message:
        if given[0]:
            return await receive()
        given[0] = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def forwarded() -> None:
    """The name a forwarded call is counted under (its route runs on the tenant's owner)."""


def _log_call(
    number: int, kind: str, tenant: str, status: int, elapsed: float, facts: dict[str, Any]
) -> None:
    """One structured line per call: its number, tenant, operation, script and hash, status, duration."""
    calls_log.info(
        "call",
        extra={
            "call": number,
            "request": facts.get("request"),
            "tenant": tenant or None,
            "op": kind,
            "script": facts.get("script"),
            "sha256": facts.get("sha256"),
            "status": status,
            "duration_ms": round(elapsed * 1000, 3),
        },
    )


async def _refuse(send: Send) -> None:
    await _answer(send, 503, _REFUSAL, ((b"retry-after", b"1"), (b"connection", b"close")))


async def _answer(send: Send, status: int, body: bytes, headers: tuple[tuple[bytes, bytes], ...]) -> None:
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})
