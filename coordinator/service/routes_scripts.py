"""The scripts API, shaped like the reference's ``lev serve`` (docs/reference/json.md), scoped to the token's
tenant.

``GET /api/scripts``, ``GET|PUT|DELETE /api/scripts/{kind}/{name}``, ``POST /api/scripts/validate``.
Kinds are ``provider`` and ``region_hook``; names follow the service's one rule (names.py: the reference's
``[A-Za-z0-9._-]``, at most 64, not ``.`` or ``..``, an optional ``.rhai`` suffix meaning the same
script), with the reference's 400/404 messages; bodies are schemas.py's ``ScriptPut`` and
``ScriptValidate``. The tenant replaces the reference's ``?agent=`` scope, so that query is refused
rather than ignored.
A script that does not compile is still stored (an editor saves work in progress); the reply says so.
"""

from __future__ import annotations

from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from coordinator.providers.metadata import parse_metadata
from coordinator.service.http import (
    RouteError,
    note_script,
    parse_body,
    reply,
    require_tenant,
    service_of,
)
from coordinator.service.names import check_name, shown
from coordinator.service.schemas import ScriptPut, ScriptValidate
from coordinator.service.storage import ScriptRow
from coordinator.service.validation import KIND_LIST, KINDS

__all__ = ["ROUTES", "check_kind"]


def check_kind(kind: str) -> str:
    """The kind, or 400 naming the supported ones."""
    if kind not in KINDS:
        raise RouteError(400, f"Unknown script kind '{shown(kind)}': expected {KIND_LIST}")
    return kind


def _target(request: Request) -> tuple[str, str, str]:
    tenant = require_tenant(request)
    if "agent" in request.query_params:
        raise RouteError(400, "Scripts are scoped to the token's tenant, so this route takes no ?agent=")
    kind = check_kind(request.path_params["kind"])
    name = check_name(request.path_params["name"], "script")
    note_script(request, f"{kind}/{name}", None)
    return tenant, kind, name


async def _describe(request: Request, tenant: str, row: ScriptRow, *, content: bool) -> dict[str, Any]:
    valid, error = await service_of(request).validator.check(row.kind, row.name, row.content, tenant)
    out: dict[str, Any] = {
        "kind": row.kind,
        "name": row.name,
        "source": "tenant",
        "path": f"{row.kind}/{row.name}",
        "sha256": row.sha256,
    }
    if content:
        out["content"] = row.content
    out["compiles"] = valid
    if error is not None:
        out["error"] = error
    if row.kind == "provider":
        out["provider"] = parse_metadata(row.content).to_dict()
    return out


async def list_scripts(request: Request) -> Response:
    """Every script of the caller's tenant, by kind then name."""
    tenant = require_tenant(request)
    if "agent" in request.query_params:
        raise RouteError(400, "Scripts are scoped to the token's tenant, so this route takes no ?agent=")
    rows = await service_of(request).storage.list_scripts(tenant)
    return reply({"scripts": [await _describe(request, tenant, row, content=False) for row in rows]})


async def get_script(request: Request) -> Response:
    """The source and its compile verdict."""
    tenant, kind, name = _target(request)
    row = await service_of(request).storage.get_script(tenant, kind, name)
    if row is None:
        raise RouteError(404, f"No such script: {kind}/{name}")
    return reply(await _describe(request, tenant, row, content=True))


async def put_script(request: Request) -> Response:
    """Store it (durable before the reply), then say whether it compiles."""
    tenant, kind, name = _target(request)
    content = (await parse_body(request, ScriptPut)).content
    service = service_of(request)
    row = await service.put_script(tenant, kind, name, content)
    valid, error = await service.validator.check(kind, name, content, tenant)
    out: dict[str, Any] = {"path": f"{kind}/{name}", "compiles": valid, "sha256": row.sha256}
    if error is not None:
        out["error"] = error
    return reply(out)


async def delete_script(request: Request) -> Response:
    """204, or 404 when there is no such script."""
    tenant, kind, name = _target(request)
    if not await service_of(request).delete_script(tenant, kind, name):
        raise RouteError(404, f"No such script: {kind}/{name}")
    return Response(status_code=204)


async def validate_script(request: Request) -> Response:
    """Compile without storing: ``{"valid", "error"?}``."""
    tenant = require_tenant(request)
    body = await parse_body(request, ScriptValidate)
    valid, error = await service_of(request).validator.check(body.kind, "script", body.content, tenant)
    return reply({"valid": valid} if error is None else {"valid": valid, "error": error})


ROUTES: Final = [
    Route("/api/scripts", list_scripts, methods=["GET"]),
    Route("/api/scripts/validate", validate_script, methods=["POST"]),
    Route("/api/scripts/{kind}/{name:path}", get_script, methods=["GET"]),
    Route("/api/scripts/{kind}/{name:path}", put_script, methods=["PUT"]),
    Route("/api/scripts/{kind}/{name:path}", delete_script, methods=["DELETE"]),
]
