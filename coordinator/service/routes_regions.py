"""Region operations over HTTP: open a region from a stored ``region_hook`` script, write, replace, render,
evict, delete, and assemble a window of several regions. Every region is addressed inside the caller's
tenant, so another tenant's region of the same name is simply not there (404).

Hooks never fail a request (the runtime's fallbacks apply and the report carries the warnings); a
refused write is a 200 whose report says ``"outcome": "error"``, as the library reports it.
"""

from __future__ import annotations

from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from coordinator.regions import RegionLoadError, RenderMeta, Window
from coordinator.service.http import (
    HTTPError,
    field,
    json_body,
    note_script,
    reply,
    require_tenant,
    service_of,
)
from coordinator.service.regions import RegionExists, Slot, entry_from_json, entry_to_json
from coordinator.service.routes_scripts import check_name

__all__ = ["ROUTES"]

_OPTIONS: Final = {"admission": ("evict", "reject"), "volatility": ("stable", "grows", "rewritten")}


def _slot(request: Request) -> tuple[str, Slot]:
    tenant = require_tenant(request)
    name = request.path_params["region"]
    slot = service_of(request).regions.get(tenant, name)
    if slot is None:
        raise HTTPError(404, f"No such region: {name}")
    note_script(request, slot.script, slot.region.script.sha256 if slot.region.script else None)
    return tenant, slot


def _meta(body: dict[str, Any], total: int, maximum: int) -> RenderMeta:
    window = field(body, "window", dict, {})
    return RenderMeta(
        stage_name=field(body, "stage_name", str, ""),
        stage_iterations=field(body, "stage_iterations", int, 0),
        model=field(body, "model", str, ""),
        window_total_tokens=field(window, "total_tokens", int, total),
        window_max_tokens=field(window, "max_tokens", int, maximum),
    )


async def list_regions(request: Request) -> Response:
    """The caller's open regions."""
    tenant = require_tenant(request)
    return reply({"regions": [s.describe() for s in service_of(request).regions.of(tenant)]})


async def create_region(request: Request) -> Response:
    """``{"name", "script", "budget", "persistent"?, "admission"?, "volatility"?}`` → 201."""
    tenant = require_tenant(request)
    body = await json_body(request)
    name = field(body, "name", str)
    if not name.strip():
        raise HTTPError(400, "field 'name' must not be blank")
    script = check_name(field(body, "script", str))
    budget = field(body, "budget", int)
    if budget < 0:
        raise HTTPError(400, "field 'budget' must be a non-negative integer")
    options: dict[str, Any] = {"persistent": field(body, "persistent", bool, False)}
    for key, allowed in _OPTIONS.items():
        value = field(body, key, str, allowed[0] if key == "admission" else "rewritten")
        if value not in allowed:
            raise HTTPError(400, f"field '{key}' must be one of {', '.join(allowed)}")
        options[key] = value
    service = service_of(request)
    if await service.storage.get_script(tenant, "region_hook", script) is None:
        raise HTTPError(404, f"No such script: region_hook/{script}")
    try:
        slot = await service.regions.open(tenant, name, script, budget, options)
    except RegionExists:
        raise HTTPError(409, f"Region '{name}' already exists") from None
    except RegionLoadError as exc:
        raise HTTPError(422, str(exc)) from None
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
    """One entry in the §1.5 shape through ``on_write`` and the budget path; the write report."""
    _, slot = _slot(request)
    body = await json_body(request)
    try:
        entry = entry_from_json(body)
    except (KeyError, TypeError, ValueError) as exc:
        raise HTTPError(400, f"invalid entry: {exc}") from None
    report = await service_of(request).regions.change(slot, lambda r: r.write_entry(entry))
    return reply(report.to_json())


async def replace(request: Request) -> Response:
    """``replace_region``: ``{"content", "tokens"?}``."""
    _, slot = _slot(request)
    body = await json_body(request)
    content, tokens = field(body, "content", str), field(body, "tokens", int, None)
    report = await service_of(request).regions.change(slot, lambda r: r.replace(content, tokens))
    return reply(report.to_json())


async def render(request: Request) -> Response:
    """``{"stage_name"?, "stage_iterations"?, "model"?, "window"?: {...}}`` → the render report."""
    _, slot = _slot(request)
    body = await json_body(request)
    region = slot.region
    report = await region.render(_meta(body, region.current_tokens, region.budget))
    return reply(report.to_json())


async def evict(request: Request) -> Response:
    """``{"needed_tokens"}`` → what window-level eviction freed from this region (§1.9 path B)."""
    _, slot = _slot(request)
    needed = field(await json_body(request), "needed_tokens", int)
    report = await service_of(request).regions.change(slot, lambda r: r.evict(needed))
    return reply(report.to_json())


async def assemble(request: Request) -> Response:
    """``{"max_tokens", "regions": [names], "stage_name"?, ...}`` → the assembled request and reports."""
    tenant = require_tenant(request)
    body = await json_body(request)
    names = field(body, "regions", list)
    book = service_of(request).regions
    slots = [book.get(tenant, n) if isinstance(n, str) else None for n in names]
    missing = [str(n) for n, s in zip(names, slots, strict=True) if s is None]
    if missing:
        raise HTTPError(404, f"No such region: {', '.join(missing)}")
    window = Window(field(body, "max_tokens", int), [s.region for s in slots if s is not None])
    assembled, reports = await window.assemble(
        stage_name=field(body, "stage_name", str, ""),
        stage_iterations=field(body, "stage_iterations", int, 0),
        model=field(body, "model", str, ""),
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
