"""The HTTP client of ``rhaipool serve`` (async and sync, on httpx), used by the CLI and the tests.

    async with AsyncClient("http://127.0.0.1:8765", token) as c:
        await c.put_script("region_hook", "brain", source)
        await c.create_region("brain", script="brain", budget=1000)
        await c.write("brain", "hello", tokens=5)
        report = await c.render("brain", stage_name="plan")
        answer = await c.inference("groq", {"messages": [...]})
        async for chunk in c.stream("groq", {...}): ...

``Client`` has the same methods, synchronously. A 4xx/5xx answer raises :class:`ServiceError` with the
status, the server's ``error`` value and ``Retry-After`` when given.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any, Generic, Self, TypeVar
from urllib.parse import quote

import httpx

from coordinator.errors import ServiceError

__all__ = ["AsyncClient", "Client", "ServiceError", "token_from_env"]

R = TypeVar("R")
_TIMEOUT = httpx.Timeout(60.0, connect=5.0)


def token_from_env(*, admin: bool = False) -> str | None:
    """``$RHAIPOOL_TOKEN`` (``$RHAIPOOL_ADMIN_TOKEN`` first when ``admin``)."""
    if admin and os.environ.get("RHAIPOOL_ADMIN_TOKEN"):
        return os.environ["RHAIPOOL_ADMIN_TOKEN"]
    return os.environ.get("RHAIPOOL_TOKEN")


def _seg(name: str) -> str:
    """One path segment: a name with ``/``, ``?``, ``#`` or spaces still names one thing."""
    return quote(name, safe="")


def _result(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        try:
            error = response.json().get("error", response.text)
        except ValueError:
            error = response.text or response.reason_phrase
        after = response.headers.get("retry-after")
        raise ServiceError(response.status_code, error, float(after) if after else None)
    if response.status_code == 204 or not response.content:
        return None
    if response.headers.get("content-type", "").startswith("text/plain"):
        return response.text
    return response.json()


def _event(lines: list[str]) -> Any:
    """One SSE event → a chunk dict, ``{"error": {...}}``, or None for ``done``."""
    name, data = "message", []
    for line in lines:
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
    if name == "done":
        return None
    value = json.loads("\n".join(data))
    return {"error": value} if name == "error" else value


class _Api(Generic[R]):
    """Every endpoint once; ``_call`` decides whether the answer is awaited or returned."""

    def _call(self, method: str, path: str, body: Any = None) -> R:
        raise NotImplementedError

    # scripts
    def list_scripts(self) -> R:
        """``GET /api/scripts``."""
        return self._call("GET", "/api/scripts")

    def get_script(self, kind: str, name: str) -> R:
        """``GET /api/scripts/{kind}/{name}``."""
        return self._call("GET", f"/api/scripts/{_seg(kind)}/{_seg(name)}")

    def put_script(self, kind: str, name: str, content: str) -> R:
        """``PUT /api/scripts/{kind}/{name}``."""
        return self._call("PUT", f"/api/scripts/{_seg(kind)}/{_seg(name)}", {"content": content})

    def delete_script(self, kind: str, name: str) -> R:
        """``DELETE /api/scripts/{kind}/{name}``."""
        return self._call("DELETE", f"/api/scripts/{_seg(kind)}/{_seg(name)}")

    def validate(self, kind: str, content: str) -> R:
        """``POST /api/scripts/validate`` → ``{"valid", "error"?}``."""
        return self._call("POST", "/api/scripts/validate", {"kind": kind, "content": content})

    # regions
    def list_regions(self) -> R:
        """``GET /api/regions``."""
        return self._call("GET", "/api/regions")

    def create_region(self, name: str, *, script: str, budget: int, **options: Any) -> R:
        """``POST /api/regions`` (``persistent``, ``admission``, ``volatility`` as options)."""
        return self._call(
            "POST", "/api/regions", {"name": name, "script": script, "budget": budget, **options}
        )

    def get_region(self, name: str) -> R:
        """``GET /api/regions/{name}``: the region and its entries."""
        return self._call("GET", f"/api/regions/{_seg(name)}")

    def delete_region(self, name: str) -> R:
        """``DELETE /api/regions/{name}``."""
        return self._call("DELETE", f"/api/regions/{_seg(name)}")

    def write(self, region: str, content: str, tokens: int | None = None, **entry: Any) -> R:
        """``POST /api/regions/{name}/write``; ``entry`` carries ``kind``, ``tool_calls`` …
        (docs/scripts/regions.md#renderctx)."""
        body = {"content": content, **({"tokens": tokens} if tokens is not None else {}), **entry}
        return self._call("POST", f"/api/regions/{_seg(region)}/write", body)

    def replace(self, region: str, content: str, tokens: int | None = None) -> R:
        """``POST /api/regions/{name}/replace``."""
        return self._call(
            "POST", f"/api/regions/{_seg(region)}/replace", {"content": content, "tokens": tokens}
        )

    def render(self, region: str, **meta: Any) -> R:
        """``POST /api/regions/{name}/render`` (``stage_name``, ``stage_iterations``,
        ``model``, ``window``)."""
        return self._call("POST", f"/api/regions/{_seg(region)}/render", meta)

    def evict(self, region: str, needed_tokens: int) -> R:
        """``POST /api/regions/{name}/evict``."""
        return self._call("POST", f"/api/regions/{_seg(region)}/evict", {"needed_tokens": needed_tokens})

    def assemble(self, regions: list[str], max_tokens: int, **meta: Any) -> R:
        """``POST /api/window/assemble``."""
        return self._call(
            "POST", "/api/window/assemble", {"regions": regions, "max_tokens": max_tokens, **meta}
        )

    # providers
    def inference(self, provider: str, request: dict[str, Any]) -> R:
        """``POST /api/providers/{name}/inference``: what ``rhaipool infer --json`` prints."""
        return self._call("POST", f"/api/providers/{_seg(provider)}/inference", request)

    def count_tokens(self, provider: str, text: str, model: str = "") -> R:
        """``POST /api/providers/{name}/count_tokens`` → ``{"tokens"}``."""
        return self._call(
            "POST", f"/api/providers/{_seg(provider)}/count_tokens", {"text": text, "model": model}
        )

    def list_models(self, provider: str) -> R:
        """``GET /api/providers/{name}/models``."""
        return self._call("GET", f"/api/providers/{_seg(provider)}/models")

    # operations
    def healthz(self) -> R:
        """``GET /healthz``."""
        return self._call("GET", "/healthz")

    def readyz(self) -> R:
        """``GET /readyz`` (raises ServiceError 503 while not ready)."""
        return self._call("GET", "/readyz")

    def status(self) -> R:
        """``GET /api/status``."""
        return self._call("GET", "/api/status")

    def metrics(self) -> R:
        """``GET /metrics`` (Prometheus text)."""
        return self._call("GET", "/metrics")

    def reload(self) -> R:
        """``POST /api/admin/reload`` (admin token)."""
        return self._call("POST", "/api/admin/reload", {})

    # tenants (admin token)
    def list_tenants(self) -> R:
        """``GET /api/admin/tenants`` → ``{"tenants": [{"id", "source", "revoked"}]}``."""
        return self._call("GET", "/api/admin/tenants")

    def put_tenant(self, tenant: str, token_sha256: str) -> R:
        """``PUT /api/admin/tenants/{id}``: add an API tenant or rotate its token (only the hash travels)."""
        return self._call("PUT", f"/api/admin/tenants/{_seg(tenant)}", {"token_sha256": token_sha256})

    def delete_tenant(self, tenant: str, *, purge: bool = False) -> R:
        """``DELETE /api/admin/tenants/{id}``: revoke (data kept); ``purge`` removes its data too."""
        return self._call("DELETE", f"/api/admin/tenants/{_seg(tenant)}" + ("?purge=true" if purge else ""))


def _headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


class AsyncClient(_Api[Any]):
    """The asyncio client; every endpoint method is a coroutine."""

    def __init__(self, url: str, token: str | None = None, **httpx_options: Any) -> None:
        options = {"timeout": _TIMEOUT, **httpx_options}
        self.http = httpx.AsyncClient(base_url=url, headers=_headers(token), **options)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connections."""
        await self.http.aclose()

    async def _call(self, method: str, path: str, body: Any = None) -> Any:
        try:
            response = await self.http.request(method, path, json=body)
        except httpx.TransportError as exc:
            raise ServiceError(0, f"cannot reach {self.http.base_url}: {exc}") from exc
        return _result(response)

    async def stream(self, provider: str, request: dict[str, Any]) -> AsyncIterator[Any]:
        """Chunks as they arrive (an error item is ``{"error": {...}}``); closing early cancels the script."""
        path = f"/api/providers/{_seg(provider)}/stream"
        async with self.http.stream("POST", path, json=request) as response:
            if response.status_code >= 400:
                await response.aread()
                _result(response)
            lines: list[str] = []
            async for line in response.aiter_lines():
                if line:
                    lines.append(line)
                    continue
                if lines:
                    item = _event(lines)
                    lines = []
                    if item is None:
                        return
                    yield item


class Client(_Api[Any]):
    """The synchronous client (the CLI's); same methods as :class:`AsyncClient`."""

    def __init__(self, url: str, token: str | None = None, **httpx_options: Any) -> None:
        options = {"timeout": _TIMEOUT, **httpx_options}
        self.http = httpx.Client(base_url=url, headers=_headers(token), **options)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections."""
        self.http.close()

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        try:
            response = self.http.request(method, path, json=body)
        except httpx.TransportError as exc:
            raise ServiceError(0, f"cannot reach {self.http.base_url}: {exc}") from exc
        return _result(response)

    def stream(self, provider: str, request: dict[str, Any]) -> Iterator[Any]:
        """Chunks as they arrive (an error item is ``{"error": {...}}``)."""
        with self.http.stream("POST", f"/api/providers/{_seg(provider)}/stream", json=request) as response:
            if response.status_code >= 400:
                response.read()
                _result(response)
            lines: list[str] = []
            for line in response.iter_lines():
                if line:
                    lines.append(line)
                    continue
                if lines:
                    item = _event(lines)
                    lines = []
                    if item is None:
                        return
                    yield item
