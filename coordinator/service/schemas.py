"""One schema per request and reply body of ``rhaipool serve``: what validates a request and what
``openapi.json`` is generated from, so the document cannot say one thing and the service do another.

    request bytes ──▶ http.parse_body(request, Schema) ──▶ a validated value ──▶ the route
    schemas (+ the API table below) ──▶ openapi_document() ──▶ coordinator/service/openapi.json

Every request body refuses unknown keys, takes numbers only in the range the runtime can hold (a count
is a non-negative i64, a float is finite) and only the JSON types it documents ("10" is not 10, true is
not 1). Bodies the route reads field by field are models; the two handed on whole as JSON mappings
(a region entry to ``entry_from_json``, an inference request to the provider runtime) are typed dicts,
so the validated dict is handed on as it is. Replies are documented here and checked by the tests
against what the service answers; the service does not validate its own replies at run time.

Regenerate the document after changing a schema or a route (a test checks it is current)::

    .venv/bin/python -c 'from coordinator.service.schemas import write_openapi; write_openapi()'
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Final, Literal, NotRequired, Required

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter, WithJsonSchema, with_config
from pydantic.json_schema import JsonSchemaMode
from typing_extensions import TypedDict

from coordinator.service.names import MAX_NAME_CHARS, check_name

__all__ = [
    "API",
    "FAILURES",
    "I64_MAX",
    "I64_MIN",
    "OPENAPI_PATH",
    "Assemble",
    "CountTokens",
    "Endpoint",
    "Evict",
    "InferenceRequest",
    "Json",
    "ProviderTable",
    "ProviderTableBody",
    "RegionCreate",
    "Render",
    "Replace",
    "ScriptPut",
    "ScriptValidate",
    "TenantToken",
    "WriteEntry",
    "openapi_document",
    "openapi_text",
    "write_openapi",
]

I64_MIN: Final = -(2**63)
I64_MAX: Final = 2**63 - 1
OPENAPI_PATH: Final = Path(__file__).with_name("openapi.json")

_BODY: Final = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
_REPLY: Final = ConfigDict(extra="forbid")


# -- values --------------------------------------------------------------------------------------


def _json_value(value: Any) -> Any:
    """Arbitrary JSON a script will see: every number must fit Rhai's i64 or be a finite f64.

    The parser keeps big integers and reads ``Infinity``, ``NaN`` and ``1e400`` as floats; a schema
    type checks only the fields it names, so the nested values of a free-form field are walked here
    (iteratively: the parser has already capped the depth).
    """
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        elif kind is float and not math.isfinite(item):
            raise ValueError("numbers must be finite (no Infinity or NaN)")
        elif kind is int and not I64_MIN <= item <= I64_MAX:
            raise ValueError("integers must fit in 64 bits")
    return value


Json = Annotated[Any, AfterValidator(_json_value), WithJsonSchema({"description": "any JSON value"})]
"""Free-form JSON (tool arguments, JSON schemas, extra parameters), its numbers in the runtime's range."""
I64 = Annotated[int, Field(ge=I64_MIN, le=I64_MAX)]
Count = Annotated[int, Field(ge=0, le=I64_MAX)]
"""Tokens, budgets, iterations: a non-negative 64-bit integer."""
Finite = Annotated[float, Field(allow_inf_nan=False)]
Kind = Literal["provider", "region_hook"]
Volatility = Literal["stable", "grows", "rewritten"]
EntryKind = Literal["text", "user_message", "assistant_turn", "tool_result"]
CacheHintName = Literal["Always", "UntilChanged", "RecentlyChanged", "Never"]

_SCRIPT_NAME: Final = {
    "type": "string",
    "pattern": rf"^[A-Za-z0-9._-]{{1,{MAX_NAME_CHARS}}}(\.rhai)?$",
    "description": "letters, digits, '.', '_', '-' (not '.' or '..'); '.rhai' names the same script",
}
ScriptName = Annotated[str, AfterValidator(check_name), WithJsonSchema(_SCRIPT_NAME)]
RegionName = Annotated[
    str,
    AfterValidator(lambda name: check_name(name, "region")),
    WithJsonSchema({**_SCRIPT_NAME, "pattern": rf"^[A-Za-z0-9._-]{{1,{MAX_NAME_CHARS}}}$"}),
]


class _Body(BaseModel):
    model_config = _BODY


class _Reply(BaseModel):
    model_config = _REPLY


# -- request bodies: scripts -----------------------------------------------------------------------


class ScriptPut(_Body):
    """``PUT /api/scripts/{kind}/{name}``: the script's source (stored even when it does not compile)."""

    content: str


class ScriptValidate(_Body):
    """``POST /api/scripts/validate``: compile without storing."""

    kind: Kind
    content: str


# -- request bodies: regions -----------------------------------------------------------------------


class RegionCreate(_Body):
    """``POST /api/regions``: open a region from the tenant's stored ``region_hook`` script."""

    name: RegionName
    script: ScriptName
    budget: Count
    persistent: bool = False
    admission: Literal["evict", "reject"] = "evict"
    volatility: Volatility = "rewritten"


@with_config(_BODY)
class ToolCallBody(TypedDict, total=False):
    """One tool call of an ``assistant_turn`` entry (SPEC §1.5)."""

    id: Required[str]
    name: Required[str]
    arguments: Json
    thought_signature: str | None


@with_config(_BODY)
class WriteEntry(TypedDict, total=False):
    """``POST /api/regions/{region}/write``: one entry in the SPEC §1.5 shape (``tokens`` defaults to an
    estimate; ``timestamp`` is set on insertion)."""

    content: Required[str]
    tokens: Count | None
    kind: EntryKind
    key: str | None
    timestamp: I64
    tool_calls: list[ToolCallBody] | None
    tool_call_id: str
    tool_name: str
    is_error: bool
    tainted: bool


class Replace(_Body):
    """``POST /api/regions/{region}/replace``: ``replace_region`` (``tokens`` defaults to an estimate)."""

    content: str
    tokens: Count | None = None


class WindowFacts(_Body):
    """The window a render sees (defaults: this region's current tokens and budget)."""

    total_tokens: Count | None = None
    max_tokens: Count | None = None


class Render(_Body):
    """``POST /api/regions/{region}/render``: the stage context the hook sees."""

    stage_name: str = ""
    stage_iterations: Count = 0
    model: str = ""
    window: WindowFacts | None = None
    """Absent: this region's current tokens and budget (a default model would be copied per request)."""


class Evict(_Body):
    """``POST /api/regions/{region}/evict``: window-level eviction (SPEC §1.9 path B)."""

    needed_tokens: Count


class Assemble(_Body):
    """``POST /api/window/assemble``: the tenant's regions, in this order, within ``max_tokens``."""

    max_tokens: Count
    regions: list[str]
    stage_name: str = ""
    stage_iterations: Count = 0
    model: str = ""


# -- request bodies: providers ---------------------------------------------------------------------


@with_config(_BODY)
class SlidingPrefixShare(TypedDict):
    stable_fraction: Finite


@with_config(_BODY)
class SlidingPrefix(TypedDict):
    SlidingPrefix: SlidingPrefixShare


@with_config(_BODY)
class SystemBlockBody(TypedDict, total=False):
    """A system block (SPEC §3.6); a plain string is a block with defaults."""

    text: Required[str]
    cache_hint: CacheHintName | SlidingPrefix
    region: str
    volatility: Volatility


@with_config(_BODY)
class TextBlock(TypedDict):
    type: Literal["text"]
    text: str


@with_config(_BODY)
class ToolUseBlock(TypedDict):
    type: Literal["tool_use"]
    id: str
    name: str
    input: NotRequired[Json]
    thought_signature: NotRequired[str]


@with_config(_BODY)
class ToolResultBlock(TypedDict):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str
    is_error: NotRequired[bool]


ContentBlock = Annotated[TextBlock | ToolUseBlock | ToolResultBlock, Field(discriminator="type")]


@with_config(_BODY)
class MessageBody(TypedDict):
    role: Literal["user", "assistant"]
    content: str | list[ContentBlock]
    cache_breakpoint: NotRequired[bool]


@with_config(_BODY)
class ToolBody(TypedDict, total=False):
    name: Required[str]
    description: str
    parameters: dict[str, Json]


@with_config(_BODY)
class InferenceRequest(TypedDict, total=False):
    """``POST /api/providers/{name}/inference`` and ``/stream``: a partial SPEC §3.6 request; the
    runtime fills the rest (``model`` from the script's ``@default_model``, ``temperature`` 0.7,
    ``max_tokens`` from the window)."""

    system: list[str | SystemBlockBody] | None
    messages: list[MessageBody]
    tools: list[ToolBody] | None
    model: str
    temperature: Finite
    max_tokens: Count | None
    extra: dict[str, Json] | None
    request_timeout_secs: Count | None


class CountTokens(_Body):
    """``POST /api/providers/{name}/count_tokens``."""

    text: str
    model: str = ""


@with_config(_BODY)
class RateLimitBody(TypedDict):
    requests_per_minute: Annotated[int, Field(ge=1, le=I64_MAX)]
    tokens_per_minute: Annotated[int, Field(ge=1, le=I64_MAX)]


@with_config(ConfigDict(extra="allow", strict=True, allow_inf_nan=False))
class ProviderTable(TypedDict, total=False):
    """``PUT /api/providers/{name}/config``: a ``[model_providers.<name>]`` table as JSON, without the
    operator-only keys (``egress_allow``, ``allow_env_vars``, ``script``). Keys not named here are
    forwarded to the script's ``initialize(config)``."""

    api_key: str
    base_url: str
    serves: list[str]
    rate_limit: RateLimitBody
    allowed_hosts: list[str]
    env: dict[str, str]
    max_response_bytes: Annotated[int, Field(ge=1, le=I64_MAX)]


ProviderTableBody = Annotated[ProviderTable, AfterValidator(_json_value)]


# -- request bodies: operations --------------------------------------------------------------------


class TenantToken(_Body):
    """``PUT /api/admin/tenants/{tenant}``: the sha256 (hex) of the tenant's bearer token."""

    token_sha256: Annotated[str, Field(pattern=r"^[0-9a-fA-F]{64}$")]


# -- replies ---------------------------------------------------------------------------------------


class ErrorReply(_Reply):
    """Every failure outside the provider routes: one line."""

    error: str


class ProviderFailure(_Reply):
    class_: Literal[
        "RateLimitExceeded",
        "RequestFailed",
        "ApiError",
        "Unavailable",
        "InvalidResponse",
        "TokenLimitExceeded",
        "Other",
    ] = Field(alias="class")
    message: str
    transient: bool


class ProviderErrorReply(_Reply):
    """A provider route's failure: the provider error's class, message and whether a retry may help."""

    error: ProviderFailure


class Health(_Reply):
    status: Literal["ok"]


class Readiness(_Reply):
    ready: bool
    reason: str | None = None


class ScriptWritten(_Reply):
    path: str
    compiles: bool
    sha256: str
    error: str | None = None


class ScriptInfo(_Reply):
    kind: Kind
    name: str
    source: Literal["tenant"]
    path: str
    sha256: str
    content: str | None = None
    compiles: bool
    error: str | None = None
    provider: dict[str, Any] | None = Field(None, description="the script's metadata directives")


class ScriptList(_Reply):
    scripts: list[ScriptInfo]


class Validation(_Reply):
    valid: bool
    error: str | None = None


class RegionInfo(_Reply):
    name: str
    script: str
    budget: int
    persistent: bool
    current_tokens: int
    entry_count: int
    sha256: str | None


class RegionList(_Reply):
    regions: list[RegionInfo]


class StoredToolCall(_Reply):
    id: str
    name: str
    arguments: Any = None
    thought_signature: str | None = None


class StoredEntry(_Reply):
    content: str
    tokens: int
    key: str | None
    kind: EntryKind
    timestamp: int
    tainted: bool
    tool_calls: list[StoredToolCall] | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool | None = None


class RegionDetail(RegionInfo):
    entries: list[StoredEntry]


class WriteReport(_Reply):
    """A write's or replace's outcome: a refused write is ``"outcome": "error"`` with its reason."""

    op: Literal["write", "replace"]
    outcome: Literal["accepted", "replaced", "dropped", "error"]
    content: str | None
    tokens: int | None
    dropped_indices: list[int]
    error: str | None
    warnings: list[str]


class BlockReply(_Reply):
    text: str
    cache_hint: Any
    volatility: Volatility
    region: str


class MessageReply(_Reply):
    role: Literal["user", "assistant"]
    content: str | list[dict[str, Any]]
    cache_breakpoint: bool | None = None


class RenderReport(_Reply):
    op: Literal["render"]
    system: list[BlockReply]
    messages: list[MessageReply]
    fallback: bool
    warnings: list[str]


class EvictReport(_Reply):
    op: Literal["evict"]
    freed: int
    dropped: list[str]
    warnings: list[str]


class AssembledRequest(_Reply):
    system: list[BlockReply]
    messages: list[MessageReply]


class Assembled(_Reply):
    request: AssembledRequest
    reports: list[RenderReport]


class ToolCallReply(_Reply):
    id: str
    name: str
    arguments: Any = None
    thought_signature: str | None = None


class TokensUsed(_Reply):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    cost_usd: float | None


class PartReply(_Reply):
    mime_type: str
    size: int
    name: str | None = None


class InferenceReply(_Reply):
    """What ``rhaipool infer --json`` prints."""

    content: str
    tool_calls: list[ToolCallReply]
    tokens_used: TokensUsed
    finish_reason: str
    parts: list[PartReply]


class TokenCount(_Reply):
    tokens: int


class ModelRow(_Reply):
    id: str
    provider: str
    display_name: str | None
    max_context_tokens: int
    max_output_tokens: int
    learned: bool


class ModelList(_Reply):
    provider: str
    models: list[ModelRow]


RedactedTable = Annotated[
    dict[str, Any], WithJsonSchema({"type": "object", "description": "the table, secret values as ********"})
]


class Reloaded(_Reply):
    reloaded: bool
    tenants: list[str]


class TenantRow(_Reply):
    id: str
    source: Literal["config", "api"]
    revoked: bool


class TenantList(_Reply):
    tenants: list[TenantRow]


class TenantSaved(_Reply):
    tenant: str


Status = Annotated[
    dict[str, Any],
    WithJsonSchema(
        {
            "type": "object",
            "description": "uptime, draining, queue, calls, restarts, tenants (a tenant's token: its own "
            "calls, regions and quotas; the admin token: workers too)",
        }
    ),
]


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
    502: "the provider's API or script failed",
    503: "the pool is overloaded or closing, or storage is unavailable (retryable, Retry-After)",
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
        "POST", "/api/regions/{region}/write", "Write one entry (SPEC §1.5 shape)", _T, WriteEntry,
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
            "tenant of its bearer token. Generated from coordinator/service/schemas.py.",
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
