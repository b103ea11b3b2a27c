"""Provider operations over HTTP, running the caller's tenant's provider script of that name.

``POST /api/providers/{name}/inference`` answers what ``rhaipool infer --json`` prints; ``/stream`` sends
the same chunks as Server-Sent Events (``data: {...}`` per chunk, ``event: error`` for a failed item,
``event: done`` at the end); ``/count_tokens`` and ``GET /models`` answer the other two entry points.
Failures are ``{"error": {"class", "message", "transient"}}`` with the status :data:`STATUS` gives.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from coordinator.providers import (
    LoadedProvider,
    ProviderError,
    ProviderLoadError,
    ProviderNotFound,
    RequestError,
)
from coordinator.providers.response import StreamChunk
from coordinator.providers.runtime import ProviderRuntime
from coordinator.service.http import (
    HTTPError,
    field,
    json_body,
    note_script,
    reply,
    require_tenant,
    service_of,
)
from coordinator.service.routes_scripts import check_name
from coordinator.service.state import with_tenant

__all__ = ["ROUTES", "STATUS"]

STATUS: Final = {
    "RateLimitExceeded": 429,
    "RequestFailed": 502,
    "ApiError": 502,
    "Unavailable": 503,
    "InvalidResponse": 502,
    "TokenLimitExceeded": 422,
    "Other": 502,
}


def _failure(exc: ProviderError) -> HTTPError:
    return HTTPError(STATUS.get(exc.class_name, 502), exc.to_dict())


def _other(status: int, message: str) -> HTTPError:
    return HTTPError(status, {"class": "Other", "message": message, "transient": False})


def _target(request: Request) -> tuple[str, str, ProviderRuntime]:
    tenant = require_tenant(request)
    name = check_name(request.path_params["name"])
    return tenant, name, service_of(request).runtime(tenant)


async def _provider(request: Request, runtime: ProviderRuntime, name: str, tenant: str) -> LoadedProvider:
    """The tenant's own loaded copy (its compile and ``initialize`` ran as that tenant), state remembered."""
    try:
        loaded = await runtime.get(name, **with_tenant(runtime.get, tenant))
    except ProviderNotFound:
        raise _other(404, f"no provider named '{name}'") from None
    except ProviderLoadError as exc:
        raise _other(422, f"provider '{name}' did not load: {exc}") from None
    note_script(request, name, getattr(loaded.handle, "sha256", None))
    await service_of(request).remember_provider(tenant, loaded)
    return loaded


async def _request_body(request: Request) -> dict[str, Any]:
    try:
        return await json_body(request)
    except HTTPError as exc:
        raise _other(exc.status, str(exc.error)) from None


async def inference(request: Request) -> Response:
    """One inference with retries, rate limits and the token guard."""
    tenant, name, runtime = _target(request)
    body = await _request_body(request)
    provider = await _provider(request, runtime, name, tenant)
    try:  # the provider just looked up: ``inference(name)`` would look it up (stat its script) again
        response = await runtime.inference_for(provider, body, tenant=tenant)
    except RequestError as exc:
        raise _other(400, f"invalid request: {exc}") from None
    except ProviderError as exc:
        raise _failure(exc) from None
    return reply(response.to_dict())


async def _events(
    runtime: ProviderRuntime, name: str, body: dict[str, Any], tenant: str
) -> AsyncIterator[str]:
    items: AsyncGenerator[Any, None] = runtime.stream(name, body, **with_tenant(runtime.stream, tenant))  # type: ignore[assignment]
    async with contextlib.aclosing(items):
        try:
            async for item in items:
                if isinstance(item, StreamChunk):
                    yield f"data: {json.dumps(item.to_dict(), ensure_ascii=False)}\n\n"
                else:
                    yield f"event: error\ndata: {json.dumps(item.to_dict(), ensure_ascii=False)}\n\n"
        except RequestError as exc:
            error = {"class": "Other", "message": f"invalid request: {exc}", "transient": False}
            yield f"event: error\ndata: {json.dumps(error)}\n\n"
        except ProviderError as exc:  # a script without ``stream`` runs ``inference``, which raises
            yield f"event: error\ndata: {json.dumps(exc.to_dict(), ensure_ascii=False)}\n\n"
    yield "event: done\ndata: {}\n\n"


async def stream(request: Request) -> Response:
    """Chunks as Server-Sent Events, as the script produces them (a reader that stops cancels the script)."""
    tenant, name, runtime = _target(request)
    body = await _request_body(request)
    await _provider(request, runtime, name, tenant)
    return StreamingResponse(
        _events(runtime, name, body, tenant),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def count_tokens(request: Request) -> Response:
    """``{"text", "model"?}`` → ``{"tokens"}``."""
    tenant, name, runtime = _target(request)
    body = await _request_body(request)
    text, model = field(body, "text", str), field(body, "model", str, "")
    provider = await _provider(request, runtime, name, tenant)
    tokens = await runtime.count_tokens(provider, text, model, **with_tenant(runtime.count_tokens, tenant))
    return reply({"tokens": tokens})


async def list_models(request: Request) -> Response:
    """``{"provider", "models": [...]}``."""
    tenant, name, runtime = _target(request)
    provider = await _provider(request, runtime, name, tenant)
    try:
        rows = await runtime.list_models(provider, **with_tenant(runtime.list_models, tenant))
    except ProviderError as exc:
        raise _failure(exc) from None
    return reply({"provider": name, "models": [r.to_dict() for r in rows]})


ROUTES: Final = [
    Route("/api/providers/{name}/inference", inference, methods=["POST"]),
    Route("/api/providers/{name}/stream", stream, methods=["POST"]),
    Route("/api/providers/{name}/count_tokens", count_tokens, methods=["POST"]),
    Route("/api/providers/{name}/models", list_models, methods=["GET"]),
]
