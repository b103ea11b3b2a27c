"""Operations: ``/healthz`` (alive), ``/readyz`` (taking calls), ``/metrics``, ``/api/status``, the admin API
(``/api/admin/reload``, ``/api/admin/tenants[/{id}]``) and ``/openapi.json``.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from importlib import resources
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from coordinator.service.auth import ADMIN, METRICS
from coordinator.service.config import TENANT_ID
from coordinator.service.http import (
    RouteError,
    parse_body,
    reply,
    require_admin,
    require_any,
    service_of,
)
from coordinator.service.metrics import CONTENT_TYPE
from coordinator.service.names import shown
from coordinator.service.schemas import TenantToken

__all__ = ["ROUTES", "status_document"]


async def healthz(request: Request) -> Response:
    """200 while the process serves HTTP at all."""
    return reply({"status": "ok"})


async def readyz(request: Request) -> Response:
    """200 when calls are accepted; 503 while draining, without a worker, or (several coordinators)
    while the shared database cannot be reached."""
    gate = request.app.state.gate
    if gate.draining:
        return reply({"ready": False, "reason": "draining"}, 503)
    stats = service_of(request).pool.statistics()
    if not stats.workers.get("active", 0) and not stats.workers.get("spare", 0):
        return reply({"ready": False, "reason": "no worker is ready"}, 503)
    if not service_of(request).database_reachable:  # several coordinators: it could not renew leases
        return reply({"ready": False, "reason": "the database cannot be reached"}, 503)
    return reply({"ready": True})


async def metrics(request: Request) -> Response:
    """Prometheus text, for the admin token or the metrics token only (it names every tenant)."""
    service = service_of(request)
    service.maybe_reload()
    if service.tokens.identify(request.headers.get("authorization")) not in (ADMIN, METRICS):
        raise RouteError(401, "unauthorized", {"WWW-Authenticate": "Bearer"})
    return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE)


def _tenant_document(service: Any, tenant: str) -> dict[str, Any]:
    """One tenant's own view: what it holds against each of its service quotas, its egress and
    dedicated-worker limits, and the pool's quotas with their use (``pool``)."""
    limits = service.limits(tenant)
    scripts = service.scripts(tenant)
    tables, table_bytes = service.provider_table_use(tenant)
    return {
        "id": tenant,
        "regions": service.regions.count(tenant),
        "quotas": {
            "max_regions": {"used": service.regions.count(tenant), "limit": limits.max_regions},
            "max_entry_bytes": {"used": service.regions.entry_bytes(tenant), "limit": limits.max_entry_bytes},
            "max_scripts": {"used": len(scripts), "limit": limits.max_scripts},
            "max_script_bytes": {"used": service.script_bytes(tenant), "limit": limits.max_script_bytes},
            "max_provider_tables": {"used": tables, "limit": limits.max_provider_tables},
            "max_provider_table_bytes": {"used": table_bytes, "limit": limits.max_provider_table_bytes},
            "max_region_budget": {"limit": limits.max_region_budget},
            "max_streams": {"limit": limits.max_streams},
            "max_connections": {"limit": limits.max_connections},
            "provider_call_secs": {"limit": limits.provider_call_secs},
            "egress_max_inflight": {"limit": limits.egress_max_inflight},
            "egress_max_bytes": {"limit": limits.egress_max_bytes},
            "dedicated_workers": {"limit": limits.dedicated_workers},
        },
        "pool": asdict(service.pool.tenant_usage(tenant)),
    }


def status_document(request: Request, tenant: str | None) -> dict[str, Any]:
    """Workers, queues and tenants for the admin; a tenant's token sees only its own tenant (its
    calls and quotas), never the workers' pids and memory or other tenants' numbers."""
    service = service_of(request)
    now = time.time()
    if tenant is not None:
        return {
            "uptime_secs": round(now - service.started_at, 3),
            "draining": request.app.state.gate.draining,
            "tenants": [_tenant_document(service, tenant)],
        }
    stats = service.pool.statistics()
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
        "tenants": [_tenant_document(service, t) for t in sorted(service.tokens.tenants)],
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
        raise RouteError(400, f"config not reloaded: {exc}") from None
    return reply({"reloaded": True, "tenants": sorted(service_of(request).tokens.tenants)})


async def admin_tenants(request: Request) -> Response:
    """Every tenant: ``{"id", "source": "config" | "api", "revoked"}``."""
    require_admin(request)
    return reply({"tenants": service_of(request).tenant_rows()})


async def admin_put_tenant(request: Request) -> Response:
    """``{"token_sha256"}``: add an API tenant or rotate its token (409 for a config-file tenant)."""
    require_admin(request)
    tenant = request.path_params["tenant"]
    if not TENANT_ID.match(tenant):
        raise RouteError(400, f"Invalid tenant id '{shown(tenant)}': letters, digits, '.', '_' and '-' only")
    body = await parse_body(request, TenantToken)
    fresh = await service_of(request).put_tenant(tenant, body.token_sha256.lower())
    return reply({"tenant": tenant}, 201 if fresh else 200)


async def admin_delete_tenant(request: Request) -> Response:
    """Revoke an API tenant (``?purge=true``: and remove its data now); 409 for a config-file tenant."""
    require_admin(request)
    purge = request.query_params.get("purge", "false")
    if purge not in ("true", "false"):
        raise RouteError(400, "purge must be true or false")
    await service_of(request).revoke_tenant(request.path_params["tenant"], purge=purge == "true")
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
