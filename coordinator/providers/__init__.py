"""Script model providers (SPEC §3): load, configure and run provider scripts through the pool.

    ProviderRuntime(PoolExecutor(pool), Egress(), load_config(path))
        .inference(name, request) -> Response          retries, RPM/TPM limits, token guard, job bound
        .stream(name, request)    -> Chunk | ProviderError items, as produced
        .count_tokens(provider, text, model) / .list_models(provider) / .lookup(name)

One module per job: ``config`` (tables, paths, discovery), ``metadata`` (directives), ``request``
(§3.6), ``response``/``parts`` (§3.7–§3.10), ``failures`` (§3.16), ``retry`` (§3.17), ``ratelimit``
(§3.18), ``loader`` (§3.1/§3.4 load sequence and cache), ``host`` (brokered host functions),
``executor`` (the pool boundary), ``runtime`` (entry points), ``cli``/``present``/``session``/``demo``
(the command line), ``standin`` (a local OpenAI-compatible API for demos, benchmarks and tests).
"""

from __future__ import annotations

from coordinator.providers.config import (
    ProviderConfigError,
    ProvidersConfig,
    ProviderTable,
    RateLimit,
    load_config,
)
from coordinator.providers.executor import PoolExecutor
from coordinator.providers.failures import (
    ApiError,
    InvalidResponse,
    Other,
    ProviderError,
    RateLimitExceeded,
    RequestFailed,
    TokenLimitExceeded,
    Unavailable,
)
from coordinator.providers.loader import LoadedProvider, ProviderLoadError, ProviderNotFound
from coordinator.providers.metadata import Metadata, MimeRow
from coordinator.providers.models import Capabilities, ModelInfo
from coordinator.providers.request import RequestError
from coordinator.providers.response import Chunk, Response, TokenUsage, ToolCall, ToolCallDelta
from coordinator.providers.runtime import ProviderRuntime

__all__ = [
    "ApiError",
    "Capabilities",
    "Chunk",
    "InvalidResponse",
    "load_config",
    "LoadedProvider",
    "Metadata",
    "MimeRow",
    "ModelInfo",
    "Other",
    "PoolExecutor",
    "ProviderConfigError",
    "ProviderError",
    "ProviderLoadError",
    "ProviderNotFound",
    "ProviderRuntime",
    "ProvidersConfig",
    "ProviderTable",
    "RateLimit",
    "RateLimitExceeded",
    "RequestError",
    "RequestFailed",
    "Response",
    "TokenLimitExceeded",
    "TokenUsage",
    "ToolCall",
    "ToolCallDelta",
    "Unavailable",
]
