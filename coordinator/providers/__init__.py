"""Script model providers (docs/scripts/providers.md): load, configure and run provider scripts through the
pool.

    ProviderRuntime(PoolExecutor(pool), Egress(), load_config(path))
        .inference(name, request) -> Response          retries, RPM/TPM limits, token guard, job bound
        .stream(name, request)    -> StreamChunk | ProviderError items, as produced
        .count_tokens(provider, text, model) / .list_models(provider) / .lookup(name)

One module per job: ``config`` (tables, paths, discovery), ``metadata`` (directives), ``request``
(docs/scripts/providers.md#inferencestate-request), ``response``/``parts``
(docs/scripts/providers.md#inferencestate-request), ``failures``
(docs/scripts/errors.md#provider-error-classes), ``retry`` (docs/scripts/errors.md#retries), ``ratelimit``
(docs/scripts/errors.md#rate-limits), ``loader``
(docs/scripts/providers.md#where-it-lives-and-how-it-is-named, docs/scripts/providers.md#the-functions load
sequence and cache), ``errors`` (every exception of the package), ``host`` (brokered host functions),
``executor`` (the pool boundary), ``runtime`` (entry points), ``cli``/``present``/``session``/``demo`` (the
command line), ``standin`` (a local OpenAI-compatible API for demos, benchmarks and tests).
"""

from __future__ import annotations

from coordinator.providers.config import (
    ProvidersConfig,
    ProviderTable,
    RateLimit,
    load_config,
    parse_provider_table,
    redacted_table,
)
from coordinator.providers.errors import (
    ApiError,
    InvalidProviderRequest,
    InvalidResponse,
    ProviderCallTimeout,
    ProviderConfigError,
    ProviderError,
    ProviderFamilyError,
    ProviderLoadError,
    ProviderNotFound,
    RateLimitExceeded,
    RequestFailed,
    RerunDiverged,
    TokenLimitExceeded,
    Unavailable,
    UnclassifiedProviderError,
)
from coordinator.providers.executor import PoolExecutor
from coordinator.providers.loader import LoadedProvider
from coordinator.providers.metadata import Metadata, MimeRow
from coordinator.providers.models import Capabilities, ModelInfo
from coordinator.providers.response import Response, ResponseToolCall, StreamChunk, TokenUsage, ToolCallDelta
from coordinator.providers.runtime import ProviderRuntime
from coordinator.providers.source import ScriptSource

__all__ = [
    "ApiError",
    "Capabilities",
    "InvalidProviderRequest",
    "InvalidResponse",
    "LoadedProvider",
    "Metadata",
    "MimeRow",
    "ModelInfo",
    "PoolExecutor",
    "ProviderCallTimeout",
    "ProviderConfigError",
    "ProviderError",
    "ProviderFamilyError",
    "ProviderLoadError",
    "ProviderNotFound",
    "ProviderRuntime",
    "ProviderTable",
    "ProvidersConfig",
    "RateLimit",
    "RateLimitExceeded",
    "RequestFailed",
    "RerunDiverged",
    "Response",
    "ResponseToolCall",
    "ScriptSource",
    "StreamChunk",
    "TokenLimitExceeded",
    "TokenUsage",
    "ToolCallDelta",
    "Unavailable",
    "UnclassifiedProviderError",
    "load_config",
    "parse_provider_table",
    "redacted_table",
]
