"""One schema per request and reply body of ``rhaipool serve``: what validates a request and what
``openapi.json`` is generated from, so the document cannot say one thing and the service do another.

    request bytes ──▶ http.parse_body(request, Schema) ──▶ a validated value ──▶ the route
    schemas + the API table (openapi.py) ──▶ openapi_document() ──▶ coordinator/service/openapi.json

Every request body refuses unknown keys, takes numbers only in the range the runtime can hold (a count
is a non-negative i64, a float is finite) and only the JSON types it documents ("10" is not 10, true is
not 1). Bodies the route reads field by field are models; the two handed on whole as JSON mappings
(a region entry to ``entry_from_json``, an inference request to the provider runtime) are typed dicts,
so the validated dict is handed on as it is. Replies are documented here and checked by the tests
against what the service answers; the service does not validate its own replies at run time.

Regenerate the document after changing a schema or a route (a test checks it is current)::

    .venv/bin/python -c 'from coordinator.service.openapi import write_openapi; write_openapi()'

Past 400 lines because it is one file of declarations (one model per body and reply, each a few
lines): splitting them by route would scatter the shared field types they are built from.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Final, Literal, NotRequired, Required

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema, with_config
from typing_extensions import TypedDict

from coordinator.service.names import MAX_NAME_CHARS, check_name

__all__ = [
    "I64_MAX",
    "I64_MIN",
    "OPENAPI_PATH",
    "Assemble",
    "CountTokens",
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
    """One tool call of an ``assistant_turn`` entry (docs/scripts/regions.md#renderctx)."""

    id: Required[str]
    name: Required[str]
    arguments: Json
    thought_signature: str | None


@with_config(_BODY)
class WriteEntry(TypedDict, total=False):
    """``POST /api/regions/{region}/write``: one entry in the docs/scripts/regions.md#renderctx shape
    (``tokens`` defaults to an estimate; ``timestamp`` is set on insertion)."""

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
    """``POST /api/regions/{region}/evict``: window-level eviction
    (docs/scripts/regions.md#on_overflowctx)."""

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
    """A system block (docs/scripts/providers.md#inferencestate-request); a plain string is a block with
    defaults."""

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
    """``POST /api/providers/{name}/inference`` and ``/stream``: a partial
    docs/scripts/providers.md#inferencestate-request request; the runtime fills the rest (``model`` from the
    script's ``@default_model``, ``temperature`` 0.7, ``max_tokens`` from the window)."""

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
