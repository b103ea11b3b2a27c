"""Provider operations over HTTP, running the caller's tenant's provider script of that name.

``POST /api/providers/{name}/inference`` answers what ``rhaipool infer --json`` prints; ``/stream`` sends
the same chunks as Server-Sent Events (``data: {...}`` per chunk, ``event: error`` for a failed item,
``event: done`` at the end; a stream the service cuts ends with an ``event: error``), holding one of
the tenant's ``max_streams`` while it is open; ``/count_tokens`` and ``GET /models`` answer the other
two entry points. Failures are ``{"error": {"class", "message", "transient"}}`` with the status
:data:`STATUS` gives.

``PUT|GET|DELETE /api/providers/{name}/config`` keep the tenant's own provider table (its secrets are
never shown back); those answer ``{"error": "one line"}`` like the other routes.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from coordinator.providers import (
    InvalidProviderRequest,
    LoadedProvider,
    ProviderError,
    ProviderLoadError,
    ProviderNotFound,
)
from coordinator.providers.response import StreamChunk
from coordinator.providers.runtime import ProviderRuntime
from coordinator.service.http import (
    Cut,
    HeldStream,
    RouteError,
    note_script,
    parse_body,
    reply,
    require_tenant,
    service_of,
)
from coordinator.service.names import check_name
from coordinator.service.schemas import CountTokens, InferenceRequest, ProviderTableBody

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


def _failure(exc: ProviderError) -> RouteError:
    return RouteError(STATUS.get(exc.class_name, 502), exc.to_dict())


def _other(status: int, message: str) -> RouteError:
    return RouteError(status, {"class": "Other", "message": message, "transient": False})


def _target(request: Request) -> tuple[str, str, ProviderRuntime]:
    tenant = require_tenant(request)
    name = check_name(request.path_params["name"], "provider")
    return tenant, name, service_of(request).runtime(tenant)


async def _provider(request: Request, runtime: ProviderRuntime, name: str, tenant: str) -> LoadedProvider:
    """The tenant's own loaded copy (its compile and ``initialize`` ran as that tenant), state remembered."""
    try:
        loaded = await runtime.get(name, tenant=tenant)
    except ProviderNotFound:
        raise _other(404, f"no provider named '{name}'") from None
    except ProviderLoadError as exc:
        raise _other(422, f"provider '{name}' did not load: {exc}") from None
    note_script(request, name, getattr(loaded.handle, "sha256", None))
    await service_of(request).remember_provider(tenant, loaded)
    return loaded


async def _body(request: Request, schema: Any) -> Any:
    """The body by its schema; a refusal in the provider routes' error shape."""
    try:
        return await parse_body(request, schema)
    except RouteError as exc:
        raise _other(exc.status, str(exc.error)) from None


async def inference(request: Request) -> Response:
    """One inference with retries, rate limits and the token guard."""
    tenant, name, runtime = _target(request)
    body: InferenceRequest = await _body(request, InferenceRequest)
    provider = await _provider(request, runtime, name, tenant)
    try:  # the provider just looked up: ``inference(name)`` would look it up again
        response = await runtime.inference_for(provider, body, tenant=tenant)
    except InvalidProviderRequest as exc:
        raise _other(400, f"invalid request: {exc}") from None
    except ProviderError as exc:
        raise _failure(exc) from None
    return reply(response.to_dict())


def _event(item: Any, kind: str = "") -> str:
    head = f"event: {kind}\n" if kind else ""
    return f"{head}data: {json.dumps(item, ensure_ascii=False)}\n\n"


async def _events(
    runtime: ProviderRuntime, name: str, body: InferenceRequest, tenant: str
) -> AsyncIterator[str]:
    items = runtime.stream(name, body, tenant=tenant)
    async with contextlib.aclosing(items):  # type: ignore[type-var]
        try:
            async for item in items:
                if isinstance(item, StreamChunk):
                    yield _event(item.to_dict())
                else:
                    yield _event(item.to_dict(), "error")
        except InvalidProviderRequest as exc:
            yield _event(
                {"class": "Other", "message": f"invalid request: {exc}", "transient": False}, "error"
            )
        except ProviderError as exc:  # a script without ``stream`` runs ``inference``, which raises
            yield _event(exc.to_dict(), "error")
    yield "event: done\ndata: {}\n\n"


_CUTS: Final[dict[Cut, dict[str, Any]]] = {
    "revoked": {
        "class": "Other",
        "message": "unauthorized: the tenant's token was revoked",
        "transient": False,
    },
    "shutting_down": {
        "class": "Other",
        "message": "the service is shutting down; retry on another instance",
        "transient": True,
    },
}


def _cut(why: Cut) -> str:
    """The error event a stream the service cuts ends with."""
    return _event(_CUTS[why], "error")


async def stream(request: Request) -> Response:
    """Chunks as Server-Sent Events, as the script produces them (a reader that stops cancels the script)."""
    tenant, name, runtime = _target(request)
    body: InferenceRequest = await _body(request, InferenceRequest)
    await _provider(request, runtime, name, tenant)
    return HeldStream(_events(runtime, name, body, tenant), service_of(request).stream_slot(tenant), _cut)


async def count_tokens(request: Request) -> Response:
    """``{"text", "model"?}`` → ``{"tokens"}``."""
    tenant, name, runtime = _target(request)
    body: CountTokens = await _body(request, CountTokens)
    provider = await _provider(request, runtime, name, tenant)
    tokens = await runtime.count_tokens(provider, body.text, body.model, tenant=tenant)
    return reply({"tokens": tokens})


async def list_models(request: Request) -> Response:
    """``{"provider", "models": [...]}``."""
    tenant, name, runtime = _target(request)
    provider = await _provider(request, runtime, name, tenant)
    try:
        rows = await runtime.list_models(provider, tenant=tenant)
    except ProviderError as exc:
        raise _failure(exc) from None
    return reply({"provider": name, "models": [r.to_dict() for r in rows]})


def _table_target(request: Request) -> tuple[str, str]:
    return require_tenant(request), check_name(request.path_params["name"], "provider")


async def put_config(request: Request) -> Response:
    """Set the tenant's own table (409 when the operator grants one of that name); its redacted copy."""
    tenant, name = _table_target(request)
    table = await parse_body(request, ProviderTableBody)
    return reply(await service_of(request).put_provider_config(tenant, name, dict(table)))


async def get_config(request: Request) -> Response:
    """The tenant's own table, secret values as ``********``."""
    tenant, name = _table_target(request)
    table = service_of(request).provider_config(tenant, name)
    if table is None:
        raise RouteError(404, f"No provider table: {name}")
    return reply(table)


async def delete_config(request: Request) -> Response:
    """204, or 404 when the tenant has no table of that name."""
    tenant, name = _table_target(request)
    if not await service_of(request).delete_provider_config(tenant, name):
        raise RouteError(404, f"No provider table: {name}")
    return Response(status_code=204)


ROUTES: Final = [
    Route("/api/providers/{name}/inference", inference, methods=["POST"]),
    Route("/api/providers/{name}/stream", stream, methods=["POST"]),
    Route("/api/providers/{name}/count_tokens", count_tokens, methods=["POST"]),
    Route("/api/providers/{name}/models", list_models, methods=["GET"]),
    Route("/api/providers/{name}/config", put_config, methods=["PUT"]),
    Route("/api/providers/{name}/config", get_config, methods=["GET"]),
    Route("/api/providers/{name}/config", delete_config, methods=["DELETE"]),
]
