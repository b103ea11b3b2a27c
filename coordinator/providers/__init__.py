"""Script model providers: load, configure and run provider scripts through the pool. The contract a
script author writes against is docs/scripts/providers.md (failures, retries and rate limits:
docs/scripts/errors.md).

    ProviderRuntime(PoolExecutor(pool), Egress(), load_config(path))
        .inference(name, request) -> Response          retries, RPM/TPM limits, token guard, job bound
        .stream(name, request)    -> StreamChunk | ProviderError items, as produced
        .count_tokens(provider, text, model) / .list_models(provider) / .lookup(name)

One module per job: ``config`` (tables, paths, discovery), ``metadata`` (directives), ``request`` (the
request map), ``response``/``parts`` (what a script returns), ``failures`` (thrown values to error
classes), ``retry`` (the retry loop), ``ratelimit`` (RPM/TPM windows), ``loader`` (the load sequence
and cache), ``errors`` (every exception of the package), ``host`` (brokered host functions),
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
