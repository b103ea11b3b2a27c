"""The service's API table and the OpenAPI document generated from it and the schemas (``schemas.py``):
every route with its method, auth, body and reply schemas and the failure statuses it may answer.
Kept apart from the schemas so each module has one job (what a body is; what the API is).

Regenerate the document after changing a schema or a route (a test checks it is current)::

    .venv/bin/python -c 'from coordinator.service.openapi import write_openapi; write_openapi()'
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import TypeAdapter
from pydantic.json_schema import JsonSchemaMode

from coordinator.service.front.schemas import (
    AnthropicErrorReply,
    ChatCompletionBody,
    ChatCompletionReply,
    InputTokens,
    MessageReply,
    MessagesBody,
    ModelsReply,
    OpenAIErrorReply,
)
from coordinator.service.schemas import (
    OPENAPI_PATH,
    Assemble,
    Assembled,
    CountTokens,
    ErrorReply,
    Evict,
    EvictReport,
    Health,
    InferenceReply,
    InferenceRequest,
    ModelList,
    ProviderErrorReply,
    ProviderTableBody,
    Readiness,
    RedactedTable,
    RegionCreate,
    RegionDetail,
    RegionInfo,
    RegionList,
    Reloaded,
    Render,
    RenderReport,
    Replace,
    ScriptInfo,
    ScriptList,
    ScriptPut,
    ScriptValidate,
    ScriptWritten,
    Status,
    TenantList,
    TenantSaved,
    TenantToken,
    TokenCount,
    Validation,
    WriteEntry,
    WriteReport,
)

__all__ = ["API", "FAILURES", "Endpoint", "openapi_document", "openapi_text", "write_openapi"]


# -- the API table -------------------------------------------------------------------------------

Auth = Literal["none", "tenant", "admin", "any", "metrics"]

FAILURES: Final[Mapping[int, str]] = {
    400: "the body, a name or a kind is not valid (one line naming the field)",
    401: "no valid token for this route",
    404: "no such script, region, provider or table (the message names it)",
    409: "conflicts with what exists (the message says why)",
    413: "the body is larger than [serve] max_body_bytes, or a size quota is full",
    422: "the script does not load, or a value is over its quota's limit",
    429: "a quota of the tenant refused it (Retry-After)",
    500: "the provider script failed or did not load (the /v1 fronts)",
    502: "the provider's API or script failed",
    503: "the pool is overloaded or closing, or storage is unavailable (retryable, Retry-After)",
    504: "the provider did not answer in time (the /v1 fronts)",
    507: "storage is full: nothing changed",
}
"""What each failure status means, whatever the route."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One documented route: its body schema, its success (status, schema, description), the failure
    statuses it can answer (:data:`FAILURES`), and their body (``{"error": ...}`` or a provider error)."""

    method: str
    path: str
    summary: str
    auth: Auth
    body: Any
    ok: tuple[int, Any, str]
    fails: tuple[int, ...]
    error: Any = ErrorReply
    content_type: str = "application/json"
    also_ok: tuple[int, ...] = ()
    """Other success statuses answering the same schema (201 for a tenant the PUT created)."""


_T: Final = "tenant"
_A: Final = "admin"
_WRITE: Final = (400, 401, 413, 429, 503, 507)
"""A tenant's request with a body that may change stored state."""
_CALL: Final = (400, 401, 404, 413, 429, 503)
"""A tenant's per-call request with a body."""
_PROVIDER: Final = (*_CALL, 422)
_FRONT: Final = (400, 401, 404, 413, 429, 500, 502, 503, 504)
"""A /v1 front's call: its errors in the API's own shape."""
_REGION_CHANGE: Final = (*_CALL, 507)

API: Final[tuple[Endpoint, ...]] = (
    Endpoint("GET", "/healthz", "Alive", "none", None, (200, Health, "always while serving"), ()),
    Endpoint("GET", "/readyz", "Ready to take calls", "none", None, (200, Readiness, "ready"), (503,)),
    Endpoint(
        "GET", "/metrics", "Prometheus text (admin or metrics token)", "metrics", None,
        (200, str, "text exposition"), (401,), content_type="text/plain",
    ),
    Endpoint("GET", "/openapi.json", "This document", "none", None, (200, dict[str, Any], "OpenAPI 3.1"), ()),
    Endpoint(
        "GET", "/api/status", "Calls, queues, regions, quotas (admin: all tenants and the workers)", "any",
        None, (200, Status, "status"), (401,),
    ),
    Endpoint(
        "GET", "/api/scripts", "The tenant's scripts", _T, None,
        (200, ScriptList, "by kind, then name"), (400, 401),
    ),
    Endpoint(
        "POST", "/api/scripts/validate", "Compile without storing", _T, ScriptValidate,
        (200, Validation, "the verdict"), (400, 401, 413, 429, 503),
    ),
    Endpoint(
        "GET", "/api/scripts/{kind}/{name}", "Source and compile verdict", _T, None,
        (200, ScriptInfo, "the script"), (400, 401, 404),
    ),
    Endpoint(
        "PUT", "/api/scripts/{kind}/{name}", "Store (durable before the reply)", _T, ScriptPut,
        (200, ScriptWritten, "stored; whether it compiles"), _WRITE,
    ),
    Endpoint(
        "DELETE", "/api/scripts/{kind}/{name}", "Delete", _T, None,
        (204, None, "deleted"), (400, 401, 404, 507),
    ),
    Endpoint(
        "GET", "/api/regions", "The tenant's open regions", _T, None, (200, RegionList, "by name"), (401,),
    ),
    Endpoint(
        "POST", "/api/regions", "Open a region from a stored region_hook script", _T, RegionCreate,
        (201, RegionInfo, "opened"), (*_WRITE, 404, 409, 422),
    ),
    Endpoint(
        "GET", "/api/regions/{region}", "The region and its entries", _T, None,
        (200, RegionDetail, "the region"), (401, 404),
    ),
    Endpoint(
        "DELETE", "/api/regions/{region}", "Close the region (its stored entries too)", _T, None,
        (204, None, "closed"), (401, 404, 507),
    ),
    Endpoint(
        "POST", "/api/regions/{region}/write", "Write one entry (docs/scripts/regions.md#renderctx)", _T,
        WriteEntry,
        (200, WriteReport, "the write report"), _REGION_CHANGE,
    ),
    Endpoint(
        "POST", "/api/regions/{region}/replace", "replace_region", _T, Replace,
        (200, WriteReport, "the write report"), _REGION_CHANGE,
    ),
    Endpoint(
        "POST", "/api/regions/{region}/render", "Render", _T, Render,
        (200, RenderReport, "the render report"), _CALL,
    ),
    Endpoint(
        "POST", "/api/regions/{region}/evict", "Window-level eviction for this region", _T, Evict,
        (200, EvictReport, "what was freed"), _REGION_CHANGE,
    ),
    Endpoint(
        "POST", "/api/window/assemble", "Assemble a window of the tenant's regions", _T, Assemble,
        (200, Assembled, "the assembled request and each region's render report"), _CALL,
    ),
    Endpoint(
        "POST", "/api/providers/{name}/inference", "One inference: what `rhaipool infer --json` prints", _T,
        InferenceRequest, (200, InferenceReply, "the response"), (*_PROVIDER, 502), ProviderErrorReply,
    ),
    Endpoint(
        "POST", "/api/providers/{name}/stream",
        "Stream chunks as Server-Sent Events (data: chunk; event: error; event: done)", _T, InferenceRequest,
        (200, str, "data: {delta, tool_calls, tokens, finish_reason, parts} per chunk"), _PROVIDER,
        ProviderErrorReply, "text/event-stream",
    ),
    Endpoint(
        "POST", "/api/providers/{name}/count_tokens", "count_tokens", _T, CountTokens,
        (200, TokenCount, "the count"), _PROVIDER, ProviderErrorReply,
    ),
    Endpoint(
        "GET", "/api/providers/{name}/models", "list_models", _T, None,
        (200, ModelList, "the script's listing"), (401, 404, 422, 429, 502, 503), ProviderErrorReply,
    ),
    Endpoint(
        "PUT", "/api/providers/{name}/config", "Set the tenant's own provider table", _T, ProviderTableBody,
        (200, RedactedTable, "the stored table, secrets redacted"), (*_WRITE, 409),
    ),
    Endpoint(
        "GET", "/api/providers/{name}/config", "The tenant's own provider table, secrets redacted", _T, None,
        (200, RedactedTable, "the table"), (400, 401, 404),
    ),
    Endpoint(
        "DELETE", "/api/providers/{name}/config", "Remove the tenant's own provider table", _T, None,
        (204, None, "removed"), (400, 401, 404, 507),
    ),
    Endpoint(
        "POST", "/v1/chat/completions", "OpenAI Chat Completions (model: PROVIDER/MODEL)", _T,
        ChatCompletionBody, (200, ChatCompletionReply, "the completion, or chat.completion.chunk events"),
        _FRONT, OpenAIErrorReply,
    ),
    Endpoint(
        "GET", "/v1/models", "PROVIDER/ID of every model the tenant's providers list", _T, None,
        (200, ModelsReply, "the models"), (401,), OpenAIErrorReply,
    ),
    Endpoint(
        "GET", "/v1/models/{model}", "One PROVIDER/ID row of that list", _T, None,
        (200, dict[str, Any], "the model"), (401, 404), OpenAIErrorReply,
    ),
    Endpoint(
        "POST", "/v1/messages", "Anthropic Messages (model: PROVIDER/MODEL; x-api-key or bearer)", _T,
        MessagesBody, (200, MessageReply, "the message, or its stream events"), _FRONT, AnthropicErrorReply,
    ),
    Endpoint(
        "POST", "/v1/messages/count_tokens", "The provider's count of a Messages prompt", _T, MessagesBody,
        (200, InputTokens, "the count"), _FRONT, AnthropicErrorReply,
    ),
    Endpoint(
        "POST", "/api/admin/reload", "Re-read the config file (what SIGHUP does)", _A, None,
        (200, Reloaded, "reloaded"), (400, 401),
    ),
    Endpoint("GET", "/api/admin/tenants", "Every tenant", _A, None, (200, TenantList, "the tenants"), (401,)),
    Endpoint(
        "PUT", "/api/admin/tenants/{tenant}", "Add an API tenant (201) or rotate its token (200)", _A,
        TenantToken, (200, TenantSaved, "saved"), (400, 401, 409, 413, 507), also_ok=(201,),
    ),
    Endpoint(
        "DELETE", "/api/admin/tenants/{tenant}", "Revoke a tenant (?purge=true: remove its data too)", _A,
        None, (204, None, "revoked"), (400, 401, 404, 409, 507),
    ),
)  # fmt: skip
"""Every route of the service, in the order the document lists them."""

_SECURITY: Final[Mapping[Auth, list[dict[str, list[str]]]]] = {
    "none": [],
    "tenant": [{"tenant": []}],
    "admin": [{"admin": []}],
    "any": [{"tenant": []}, {"admin": []}],
    "metrics": [{"admin": []}, {"metrics": []}],
}
_REF: Final = "#/components/schemas/{model}"


def _schemas() -> tuple[dict[tuple[int, JsonSchemaMode], dict[str, Any]], dict[str, Any]]:
    """Every body and reply schema with their shared definitions, keyed by ``id`` of the type."""
    types: dict[int, Any] = {}
    for endpoint in API:
        for kind in (endpoint.body, endpoint.ok[1], endpoint.error):
            if kind is not None:
                types[id(kind)] = kind
    modes: tuple[JsonSchemaMode, ...] = ("validation", "serialization")
    inputs = [(key, mode, TypeAdapter(kind)) for key, kind in types.items() for mode in modes]
    found, definitions = TypeAdapter.json_schemas(inputs, ref_template=_REF)
    return dict(found), definitions.get("$defs", {})


def _content(schema: dict[str, Any], content_type: str) -> dict[str, Any]:
    return {content_type: {"schema": schema}}


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of :data:`API`."""
    found, definitions = _schemas()
    paths: dict[str, dict[str, Any]] = {}
    for endpoint in API:
        operation: dict[str, Any] = {"summary": endpoint.summary, "security": _SECURITY[endpoint.auth]}
        if endpoint.body is not None:
            operation["requestBody"] = {
                "required": True,
                "content": _content(found[(id(endpoint.body), "validation")], "application/json"),
            }
        status, schema, description = endpoint.ok
        replies: dict[str, Any] = {}
        for ok in (status, *endpoint.also_ok):
            replies[str(ok)] = {"description": description}
            if schema is not None:
                replies[str(ok)]["content"] = _content(
                    found[(id(schema), "serialization")], endpoint.content_type
                )
        for status in sorted(endpoint.fails):
            error = found[(id(endpoint.error), "serialization")]
            replies[str(status)] = {
                "description": FAILURES[status],
                "content": _content(error, "application/json"),
            }
        operation["responses"] = replies
        paths.setdefault(endpoint.path, {})[endpoint.method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "rhaipool serve",
            "version": "0.1.0",
            "description": "The rhaipool pool as an HTTP service. Every /api route is scoped to the "
            "tenant of its bearer token. Generated from coordinator/service/schemas.py and openapi.py.",
        },
        "components": {
            "securitySchemes": {
                "tenant": {"type": "http", "scheme": "bearer", "description": "a tenant's token"},
                "admin": {"type": "http", "scheme": "bearer", "description": "the admin token"},
                "metrics": {"type": "http", "scheme": "bearer", "description": "the metrics token"},
            },
            "schemas": definitions,
        },
        "paths": paths,
    }


def openapi_text() -> str:
    """The document as checked in: indented, keys in order, one trailing newline."""
    return json.dumps(openapi_document(), indent=1, ensure_ascii=False) + "\n"


def write_openapi() -> Path:
    """Regenerate the checked-in document; where it was written."""
    OPENAPI_PATH.write_text(openapi_text(), encoding="utf-8")
    return OPENAPI_PATH
