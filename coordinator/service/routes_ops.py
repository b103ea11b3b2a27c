"""Operations: ``/healthz`` (alive), ``/readyz`` (taking calls), ``/metrics``, ``/api/status``, the admin API
(``/api/admin/reload``, ``/api/admin/tenants[/{id}]``) and ``/openapi.json``.
"""

from __future__ import annotations

import time
from importlib import resources
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from coordinator.service.config import TENANT_ID, ServiceConfigError, check_sha256
from coordinator.service.http import (
    HTTPError,
    field,
    json_body,
    reply,
    require_admin,
    require_any,
    service_of,
)
from coordinator.service.metrics import CONTENT_TYPE

__all__ = ["ROUTES", "status_document"]


async def healthz(request: Request) -> Response:
    """200 while the process serves HTTP at all."""
    return reply({"status": "ok"})


async def readyz(request: Request) -> Response:
    """200 when calls are accepted; 503 while draining or without a worker."""
    gate = request.app.state.gate
    if gate.draining:
        return reply({"ready": False, "reason": "draining"}, 503)
    stats = service_of(request).pool.statistics()
    if not stats.workers.get("active", 0) and not stats.workers.get("spare", 0):
        return reply({"ready": False, "reason": "no worker is ready"}, 503)
    return reply({"ready": True})


async def metrics(request: Request) -> Response:
    """Prometheus text."""
    return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE)


def status_document(request: Request, tenant: str | None) -> dict[str, Any]:
    """Workers, queues and tenants; a tenant's token sees only its own tenant row."""
    service = service_of(request)
    stats = service.pool.statistics()
    now = time.time()
    workers = [
        {
            "id": w.id,
            "pid": w.pid,
            "state": w.state,
            "memory_bytes": w.rss,
            "calls": w.calls,
            "inflight": w.inflight,
            "sandbox": sorted(k for k, v in w.sandbox.items() if isinstance(v, dict) and v.get("active")),
        }
        for w in service.pool.workers()
    ]
    tenants = sorted(service.tokens.tenants if tenant is None else {tenant})
    return {
        "uptime_secs": round(now - service.started_at, 3),
        "draining": request.app.state.gate.draining,
        "workers": workers,
        "queue": {
            "queued": stats.queued,
            "inflight": stats.inflight,
            "http_inflight": request.app.state.gate.inflight,
        },
        "calls": {"ok": stats.calls_ok, "failed": stats.calls_failed, "retries": stats.retries},
        "restarts": {"spawned": stats.spawned, "exits": stats.exits, "reasons": stats.exit_reasons},
        "tenants": [{"id": t, "regions": len(service.regions.of(t))} for t in tenants],
    }


async def status(request: Request) -> Response:
    """The document ``rhaipool status --json`` prints."""
    return reply(status_document(request, require_any(request)))


async def admin_reload(request: Request) -> Response:
    """Re-read the config file (what SIGHUP does)."""
    require_admin(request)
    try:
        service_of(request).reload()
    except ValueError as exc:
        raise HTTPError(400, f"config not reloaded: {exc}") from None
    return reply({"reloaded": True, "tenants": sorted(service_of(request).tokens.tenants)})


async def admin_tenants(request: Request) -> Response:
    """Every tenant that has a token (configured or added over this API)."""
    require_admin(request)
    return reply({"tenants": sorted(service_of(request).tokens.tenants)})


async def admin_put_tenant(request: Request) -> Response:
    """``{"token_sha256"}``: add a tenant or rotate its token (config-file tenants win on a clash)."""
    require_admin(request)

    tenant = request.path_params["tenant"]
    if not TENANT_ID.match(tenant):
        raise HTTPError(400, f"Invalid tenant id '{tenant}': letters, digits, '.', '_' and '-' only")
    try:
        sha = check_sha256(field(await json_body(request), "token_sha256", str), "token_sha256")
    except ServiceConfigError as exc:
        raise HTTPError(400, str(exc)) from None
    service = service_of(request)
    await service.storage.put_tenant(tenant, sha)
    service.reload_tokens()
    return reply({"tenant": tenant})


async def admin_delete_tenant(request: Request) -> Response:
    """Revoke a tenant added over this API."""
    require_admin(request)
    service = service_of(request)
    if not await service.storage.delete_tenant(request.path_params["tenant"]):
        raise HTTPError(404, f"No such tenant: {request.path_params['tenant']}")
    service.reload_tokens()
    return Response(status_code=204)


async def openapi(request: Request) -> Response:
    """The checked-in OpenAPI document."""
    text = resources.files("coordinator.service").joinpath("openapi.json").read_bytes()
    return Response(text, media_type="application/json")


ROUTES: Final = [
    Route("/healthz", healthz, methods=["GET"]),
    Route("/readyz", readyz, methods=["GET"]),
    Route("/metrics", metrics, methods=["GET"]),
    Route("/openapi.json", openapi, methods=["GET"]),
    Route("/api/status", status, methods=["GET"]),
    Route("/api/admin/reload", admin_reload, methods=["POST"]),
    Route("/api/admin/tenants", admin_tenants, methods=["GET"]),
    Route("/api/admin/tenants/{tenant}", admin_put_tenant, methods=["PUT"]),
    Route("/api/admin/tenants/{tenant}", admin_delete_tenant, methods=["DELETE"]),
]
