"""The ASGI application of ``rhaipool serve``: routes, error mapping, the gate, the lifespan.

    uvicorn ──▶ Gate (drain, in-flight, tenants' requests, metrics) ──▶ Idempotency ──▶ Starlette ──▶ routes_*
                                                                                              ──▶ Service

Every failure a client can cause is a 4xx with a one-line ``{"error": ...}``; pool backpressure is a
retryable 503 with ``Retry-After``; nothing a request body contains can produce a 500.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from coordinator.errors import (
    CpuQuotaExceeded,
    Overloaded,
    PoolClosed,
    Quarantined,
    QuotaExceeded,
    ScriptQuotaExceeded,
)
from coordinator.service import front, routes_ops, routes_providers, routes_regions, routes_scripts
from coordinator.service.http import RouteError
from coordinator.service.idempotency import Idempotency
from coordinator.service.metrics import Metrics
from coordinator.service.observer import CallObserver
from coordinator.service.state import Service

__all__ = ["create_app"]

log = logging.getLogger("rhaipool.service")


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RouteError)
    return exc.response()


async def _starlette_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = {404: "no such endpoint", 405: "method not allowed"}.get(exc.status_code, str(exc.detail))
    return JSONResponse({"error": message}, exc.status_code, headers=exc.headers)


async def _busy(request: Request, exc: Exception) -> Response:
    return JSONResponse({"error": f"{type(exc).__name__}: {exc}"}, 503, headers={"Retry-After": "1"})


async def _quarantined(request: Request, exc: Exception) -> Response:
    return JSONResponse({"error": f"Quarantined: {exc}"}, 429, headers={"Retry-After": "30"})


async def _over_quota(request: Request, exc: Exception) -> Response:
    """A tenant's own quota refused the call: 429, retryable when the quota frees by itself."""
    assert isinstance(exc, QuotaExceeded)
    if isinstance(exc, ScriptQuotaExceeded):  # a load, refused before any call (calls: CallObserver)
        tenant = str(request.scope.get("state", {}).get("tenant", ""))
        request.app.state.metrics.refusals.labels(tenant, exc.quota or "scripts").inc()
    wait = math.ceil(exc.retry_after) if isinstance(exc, CpuQuotaExceeded) else 1
    return JSONResponse(
        {"error": f"{type(exc).__name__}: {exc}"}, 429, headers={"Retry-After": str(max(wait, 1))}
    )


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unexpected error answering %s %s", request.method, request.url.path)
    return JSONResponse({"error": "internal error"}, 500)


_HANDLERS: dict[Any, Any] = {
    RouteError: _http_error,
    HTTPException: _starlette_error,
    Overloaded: _busy,
    PoolClosed: _busy,
    Quarantined: _quarantined,
    QuotaExceeded: _over_quota,
    Exception: _unexpected,
}


_INFERENCES: Final = ("/api/providers/{name}/inference", "/v1/chat/completions", "/v1/messages")
"""The routes of one inference, native and the fronts': tried first, in this order."""
ROUTES: Final = sorted(
    [
        *routes_providers.ROUTES, *front.ROUTES, *routes_regions.ROUTES, *routes_scripts.ROUTES,
        *routes_ops.ROUTES,
    ],
    key=lambda route: _INFERENCES.index(route.path) if route.path in _INFERENCES else len(_INFERENCES),
)  # fmt: skip
"""Every route, in the order the router tries them: the inferences, then each module's in turn (the sort
is stable), the per-call data plane first."""


def create_app(service: Service) -> Any:
    """The ASGI app (a :class:`Gate` around the router); the service starts and stops with its lifespan."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await service.start()
        service.pool.observe(CallObserver(metrics))
        try:
            yield
        finally:
            await service.stop()

    router = Starlette(
        # The router tries routes in order (a regex each, ~0.5 us apiece): the per-call data plane
        # first (ROUTES). No two routes match the same method and path, so the order changes nothing else.
        routes=ROUTES,
        exception_handlers=dict(_HANDLERS),
        lifespan=lifespan,
    )
    metrics = Metrics(service)
    gate = front.FrontGate(Idempotency(router, service), metrics, service)  # /v1: x-api-key, API error shapes
    service.on_revoked = gate.cut_tenants
    router.state.service = service
    router.state.metrics = metrics
    router.state.gate = gate
    router.state.models_cache = front.ModelsCache()
    return gate
