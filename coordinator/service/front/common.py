"""What the OpenAI and Anthropic fronts share: the model name, the provider lookup, failures by
status and the models cache.

    /v1 body ──▶ openai.py | anthropic.py (translate) ──▶ provider contract request
    (docs/scripts/providers.md#inferencestate-request)
             ──▶ lookup() ──▶ ProviderRuntime.inference_for / stream   (the native route's calls)
             ──▶ Response / StreamChunk ──▶ translate back ──▶ JSON | Server-Sent Events

A failure is a :class:`Refusal` (status, kind, message, whether to retry) carried by a
:class:`RouteError`; each API writes it in its own shape. :func:`failure` decides the status of a
provider error: the one both SDKs act on (429 and 5xx retried, ``x-should-retry`` saying so when
the error's ``transient`` knows better).
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, Final

from starlette.requests import Request

from coordinator.providers import (
    InvalidProviderRequest,
    LoadedProvider,
    ProviderError,
    ProviderLoadError,
    ProviderNotFound,
)
from coordinator.providers.errors import ProviderCallTimeout
from coordinator.providers.models import ModelInfo
from coordinator.providers.response import StreamChunk
from coordinator.providers.runtime import ProviderRuntime
from coordinator.service.errors import RouteError
from coordinator.service.http import ENCODE, Cut, note_script, service_of
from coordinator.service.names import check_name
from coordinator.service.state import Service

__all__ = [
    "CUTS",
    "REVOKED",
    "SHUTTING_DOWN",
    "ModelsCache",
    "Refusal",
    "Target",
    "failure",
    "invalid",
    "kind_of_status",
    "lookup",
    "open_stream",
    "refused",
    "split_model",
    "tool_arguments",
]

log = logging.getLogger("rhaipool.service")
_HTTP_STATUS: Final = re.compile(r"HTTP (\d{3})\b")


@dataclass(frozen=True, slots=True)
class Refusal:
    """A failure to answer in the API's own error shape (raised as the ``error`` of a
    :class:`RouteError`: :func:`refused`; a value, not an exception).

    ``kind`` is one of ``invalid_request``, ``authentication``, ``permission``, ``not_found``,
    ``too_large``, ``rate_limit``, ``server``, ``upstream``, ``overloaded``, ``timeout``; each API names
    it its own way. ``retry`` becomes ``x-should-retry`` (None: the SDK decides by status).
    """

    status: int
    kind: str
    message: str
    param: str | None = None
    code: str | None = None
    retry: bool | None = None
    retry_after: int | None = None

    def headers(self) -> dict[str, str]:
        """``Retry-After`` and ``x-should-retry`` when known."""
        out: dict[str, str] = {}
        if self.retry_after is not None:
            out["Retry-After"] = str(self.retry_after)
        if self.retry is not None:
            out["x-should-retry"] = "true" if self.retry else "false"
        return out


def refused(error: Refusal) -> RouteError:
    """The exception that carries ``error`` out of a translation to the route."""
    return RouteError(error.status, error, error.headers())


def invalid(message: str, param: str | None = None) -> RouteError:
    """A 400 for a body the front cannot translate."""
    return refused(Refusal(400, "invalid_request", message, param))


def kind_of_status(status: int) -> str:
    """The error kind a status means when nothing says more."""
    return _KINDS.get(status, "server" if status >= 500 else "invalid_request")


_KINDS: Final = {
    400: "invalid_request",
    401: "authentication",
    403: "permission",
    404: "not_found",
    413: "too_large",
    429: "rate_limit",
    500: "server",
    502: "upstream",
    503: "overloaded",
    504: "timeout",
}


def split_model(model: str) -> tuple[str, str]:
    """``PROVIDER/MODEL`` → (provider, model); a 404 naming the rule otherwise."""
    provider, sep, name = model.partition("/")
    if not sep or not provider or not name:
        raise refused(Refusal(
            404, "not_found", f"model '{model}' is not PROVIDER/MODEL (GET /v1/models lists them)",
            "model", "model_not_found",
        ))  # fmt: skip
    return provider, name


@dataclass(frozen=True, slots=True)
class Target:
    """Whose call, which runtime, which loaded provider."""

    tenant: str
    runtime: ProviderRuntime
    provider: LoadedProvider


async def lookup(request: Request, tenant: str, name: str) -> Target:
    """The tenant's loaded provider of that name, as the native route finds it (404, or 500 for a
    script that does not load); its state is remembered like the native route's."""
    try:
        check_name(name, "provider")
    except ValueError as exc:
        raise refused(Refusal(404, "not_found", str(exc), "model", "model_not_found")) from None
    service = service_of(request)
    runtime = service.runtime(tenant)
    try:
        loaded = await runtime.get(name, tenant=tenant)
    except ProviderNotFound:
        message = f"no provider named '{name}' for this tenant"
        raise refused(Refusal(404, "not_found", message, "model", "model_not_found")) from None
    except ProviderLoadError as exc:
        message = f"provider '{name}' did not load: {exc}"
        raise refused(Refusal(500, "server", message, retry=False)) from None
    note_script(request, name, getattr(loaded.handle, "sha256", None))
    await service.remember_provider(tenant, loaded)
    return Target(tenant, runtime, loaded)


def _upstream_status(message: str) -> int | None:
    found = _HTTP_STATUS.search(message[:80])
    return int(found.group(1)) if found else None


def failure(exc: BaseException) -> Refusal:
    """The status and kind of a failed call (the mapping table of docs/use-from-any-runtime.md)."""
    if isinstance(exc, RouteError):
        if isinstance(exc.error, Refusal):
            return exc.error
        header = (exc.headers or {}).get("Retry-After")
        after = int(header) if header is not None and header.isdigit() else None
        return Refusal(exc.status, kind_of_status(exc.status), str(exc.error), retry_after=after)
    if isinstance(exc, InvalidProviderRequest):
        return Refusal(400, "invalid_request", f"invalid request: {exc}")
    if not isinstance(exc, ProviderError):
        raise TypeError(f"not a provider failure: {exc!r}")
    name, message, transient = exc.class_name, exc.message, exc.transient
    if name == "RateLimitExceeded":
        wait = max(1, math.ceil(exc.retry_after)) if exc.retry_after else 1
        return Refusal(429, "rate_limit", message, code="rate_limit_exceeded", retry=True, retry_after=wait)
    if name == "TokenLimitExceeded":
        return Refusal(400, "invalid_request", message, "messages", "context_length_exceeded", False)
    if isinstance(exc, ProviderCallTimeout) or message.startswith("[timeout]") or "job timeout" in message:
        return Refusal(504, "timeout", message, code="timeout", retry=transient)
    if name == "Unavailable":
        return Refusal(503, "overloaded", message, code=exc.reason or "unavailable", retry=False)
    if name == "ApiError":
        upstream = _upstream_status(message)
        if upstream == 404 and not transient:
            return Refusal(404, "not_found", message, "model", "model_not_found", False)
        if upstream in (400, 413, 422) and not transient:
            status = 413 if upstream == 413 else 400
            return Refusal(status, "too_large" if status == 413 else "invalid_request", message, retry=False)
        if transient and exc.capacity and upstream == 429:
            return Refusal(429, "rate_limit", message, code="rate_limit_exceeded", retry=True, retry_after=1)
        if transient and exc.capacity:
            return Refusal(503, "overloaded", message, code="upstream_overloaded", retry=True, retry_after=1)
        status = upstream if transient and upstream in (500, 502, 503, 504) else 502
        return Refusal(status, "upstream", message, code="upstream_error", retry=transient)
    if name in ("RequestFailed", "InvalidResponse"):
        return Refusal(502, "upstream", message, code="upstream_error", retry=transient)
    return Refusal(500, "server", message, code="provider_script_error", retry=transient)


def tool_arguments(value: Any) -> str:
    """A tool call's arguments as the JSON text OpenAI sends (a string stays the string it is)."""
    if isinstance(value, str):
        return value
    return "{}" if value is None else ENCODE(value)


# -- streams -----------------------------------------------------------------------------------


async def open_stream(
    request: Request, target: Target, contract: dict[str, Any]
) -> tuple[StreamChunk, AsyncIterator[Any], AsyncExitStack]:
    """Start the runtime's stream (the native route's) and wait for its first chunk, holding one of the
    tenant's ``max_streams``: a failure before any chunk is still an ordinary error reply (so an SDK sees
    the status and retries a 429 or 5xx); after it, the caller ends the stream with an error event."""
    stack = AsyncExitStack()
    await stack.enter_async_context(service_of(request).stream_slot(target.tenant))
    try:
        items = target.runtime.stream(target.provider.name, contract, tenant=target.tenant)
        stack.push_async_callback(items.aclose)  # type: ignore[attr-defined]
        first = await anext(items)
        if isinstance(first, ProviderError):
            raise first
    except BaseException:
        await stack.aclose()
        raise
    assert isinstance(first, StreamChunk)
    return first, items, stack


SHUTTING_DOWN: Final = Refusal(
    503, "overloaded", "the service is shutting down; retry on another instance", retry=True, retry_after=1
)
"""What a stream cut at the end of a drain's grace ends with."""

REVOKED: Final = Refusal(401, "authentication", "unauthorized: the tenant's token was revoked", retry=False)
"""What a stream ends with when its tenant's token is revoked while it runs."""

CUTS: Final[dict[Cut, Refusal]] = {"revoked": REVOKED, "shutting_down": SHUTTING_DOWN}
"""The refusal a cut stream ends with (``HeldStream``), by why it was cut."""


# -- GET /v1/models ----------------------------------------------------------------------------


class ModelsCache:
    """Each provider's ``list_models`` rows per tenant, reused for ``[serve] models_cache_secs`` while
    the same loaded version of the script answers (a changed script or table lists again)."""

    def __init__(self) -> None:
        self._rows: dict[tuple[str, str], tuple[LoadedProvider, float, list[ModelInfo]]] = {}

    def forget(self) -> None:
        """Drop every remembered listing."""
        self._rows.clear()

    async def rows(
        self, service: Service, tenant: str, *, only: str | None = None
    ) -> list[tuple[str, ModelInfo]]:
        """``(provider, row)`` of every provider the tenant may use (or of ``only``), providers in name
        order.

        A provider that does not load or whose listing fails is left out (and logged): one broken
        script must not hide the others' models."""
        runtime = service.runtime(tenant)
        names = {name for name, _table in runtime.config.providers}
        names |= {name for kind, name in service.scripts(tenant) if kind == "provider"}
        ttl = service.config.models_cache_secs
        ordered = sorted(names) if only is None else [only] if only in names else []
        found = await asyncio.gather(*(self._listing(runtime, tenant, n, ttl) for n in ordered))
        return [(name, row) for name, rows in zip(ordered, found, strict=True) for row in rows]

    async def _listing(self, runtime: ProviderRuntime, tenant: str, name: str, ttl: float) -> list[ModelInfo]:
        try:
            loaded = await runtime.get(name, tenant=tenant)
        except ProviderNotFound:  # a granted table the tenant stores no script for: nothing to list
            return []
        except ProviderLoadError as exc:
            log.warning("GET /v1/models: tenant %s: provider %s left out: %s", tenant, name, exc)
            return []
        key = (tenant, name)
        now = time.monotonic()
        known = self._rows.get(key)
        if known is not None and known[0] is loaded and now < known[1]:
            return known[2]
        try:
            rows = await runtime.list_models(loaded, tenant=tenant)
        except ProviderError as exc:
            log.warning("GET /v1/models: tenant %s: %s's list_models failed: %s", tenant, name, exc)
            return known[2] if known is not None and known[0] is loaded else []
        if ttl > 0:
            if len(self._rows) >= _MAX_LISTINGS:
                self._rows.clear()
            self._rows[key] = (loaded, now + ttl, rows)
        return rows


_MAX_LISTINGS: Final = 4096


def models_cache(request: Request) -> ModelsCache:
    """The app's cache (one per service)."""
    cache: ModelsCache = request.app.state.models_cache
    return cache
