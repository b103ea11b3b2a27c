"""Region operations over HTTP: open a region from a stored ``region_hook`` script, write, replace, render,
evict, delete, and assemble a window of several regions. Every region is addressed inside the caller's
tenant, so another tenant's region of the same name is simply not there (404).

Hooks never fail a request (the runtime's fallbacks apply and the report carries the warnings); a
refused write is a 200 whose report says ``"outcome": "error"``, as the library reports it. Each body
is validated by its schema (schemas.py) before anything runs.
"""

from __future__ import annotations

from typing import Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from coordinator.regions import RegionLoadError, RenderMeta, Window
from coordinator.service.http import (
    RouteError,
    note_script,
    parse_body,
    reply,
    require_tenant,
    service_of,
)
from coordinator.service.names import shown
from coordinator.service.regions import RegionExists, Slot, entry_from_json, entry_to_json
from coordinator.service.schemas import Assemble, Evict, RegionCreate, Render, Replace, WriteEntry

__all__ = ["ROUTES"]


def _slot(request: Request) -> tuple[str, Slot]:
    tenant = require_tenant(request)
    name = request.path_params["region"]
    slot = service_of(request).regions.get(tenant, name)
    if slot is None:
        raise RouteError(404, f"No such region: {shown(name)}")
    note_script(request, slot.script, slot.region.script.sha256 if slot.region.script else None)
    return tenant, slot


async def list_regions(request: Request) -> Response:
    """The caller's open regions."""
    tenant = require_tenant(request)
    return reply({"regions": [s.describe() for s in service_of(request).regions.of(tenant)]})


async def create_region(request: Request) -> Response:
    """``{"name", "script", "budget", "persistent"?, "admission"?, "volatility"?}`` → 201."""
    tenant = require_tenant(request)
    body = await parse_body(request, RegionCreate)
    options = {"persistent": body.persistent, "admission": body.admission, "volatility": body.volatility}
    service = service_of(request)
    if ("region_hook", body.script) not in service.scripts(tenant):
        raise RouteError(404, f"No such script: region_hook/{body.script}")
    try:
        slot = await service.regions.open(tenant, body.name, body.script, body.budget, options)
    except RegionExists:
        raise RouteError(409, f"Region '{body.name}' already exists") from None
    except RegionLoadError as exc:
        raise RouteError(422, str(exc)) from None
    return reply(slot.describe(), 201)


async def get_region(request: Request) -> Response:
    """The region and its entries."""
    _, slot = _slot(request)
    return reply({**slot.describe(), "entries": [entry_to_json(e) for e in slot.region.entries]})


async def delete_region(request: Request) -> Response:
    """204 (its stored entries go too)."""
    tenant, slot = _slot(request)
    await service_of(request).regions.close(tenant, slot.region.name)
    return Response(status_code=204)


async def write(request: Request) -> Response:
    """One entry in the docs/scripts/regions.md#renderctx shape through ``on_write`` and the budget path; the
    write report."""
    _, slot = _slot(request)
    entry = entry_from_json(await parse_body(request, WriteEntry))
    report = await service_of(request).regions.change(slot, lambda r: r.write_entry(entry))
    return reply(report.to_json())


async def replace(request: Request) -> Response:
    """``replace_region``: ``{"content", "tokens"?}``."""
    _, slot = _slot(request)
    body = await parse_body(request, Replace)
    report = await service_of(request).regions.change(slot, lambda r: r.replace(body.content, body.tokens))
    return reply(report.to_json())


async def render(request: Request) -> Response:
    """``{"stage_name"?, "stage_iterations"?, "model"?, "window"?: {...}}`` → the render report."""
    _, slot = _slot(request)
    body = await parse_body(request, Render)
    region, window = slot.region, body.window
    total = None if window is None else window.total_tokens
    maximum = None if window is None else window.max_tokens
    meta = RenderMeta(
        stage_name=body.stage_name,
        stage_iterations=body.stage_iterations,
        model=body.model,
        window_total_tokens=region.current_tokens if total is None else total,
        window_max_tokens=region.budget if maximum is None else maximum,
    )
    return reply((await region.render(meta)).to_json())


async def evict(request: Request) -> Response:
    """``{"needed_tokens"}`` → what window-level eviction freed from this region
    (docs/scripts/regions.md#on_overflowctx)."""
    _, slot = _slot(request)
    needed = (await parse_body(request, Evict)).needed_tokens
    report = await service_of(request).regions.change(slot, lambda r: r.evict(needed))
    return reply(report.to_json())


async def assemble(request: Request) -> Response:
    """``{"max_tokens", "regions": [names], "stage_name"?, ...}`` → the assembled request and reports."""
    tenant = require_tenant(request)
    body = await parse_body(request, Assemble)
    book = service_of(request).regions
    slots = [book.get(tenant, n) for n in body.regions]
    missing = [shown(n) for n, s in zip(body.regions, slots, strict=True) if s is None]
    if missing:
        raise RouteError(404, f"No such region: {', '.join(missing)}")
    window = Window(body.max_tokens, [s.region for s in slots if s is not None])
    assembled, reports = await window.assemble(
        stage_name=body.stage_name, stage_iterations=body.stage_iterations, model=body.model
    )
    return reply({"request": assembled.to_json(), "reports": [r.to_json() for r in reports]})


ROUTES: Final = [  # the per-call operations first: the router tries routes in order
    Route("/api/regions/{region}/render", render, methods=["POST"]),
    Route("/api/regions/{region}/write", write, methods=["POST"]),
    Route("/api/regions/{region}/replace", replace, methods=["POST"]),
    Route("/api/regions/{region}/evict", evict, methods=["POST"]),
    Route("/api/regions", list_regions, methods=["GET"]),
    Route("/api/regions", create_region, methods=["POST"]),
    Route("/api/regions/{region}", get_region, methods=["GET"]),
    Route("/api/regions/{region}", delete_region, methods=["DELETE"]),
    Route("/api/window/assemble", assemble, methods=["POST"]),
]
