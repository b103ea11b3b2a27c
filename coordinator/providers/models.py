"""What a provider says about its models: ``list_models`` rows and capabilities
(docs/scripts/providers.md#list_modelsstate, docs/scripts/providers.md#metadata)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coordinator.providers.metadata import Metadata
from coordinator.providers.response import Unconvertible, to_plain, uint

__all__ = [
    "Capabilities",
    "ModelInfo",
    "capabilities",
    "parse_models",
]


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """One row of a provider's own listing (``"learned": true``)."""

    id: str
    provider: str
    display_name: str | None = None
    max_context_tokens: int = 8192
    max_output_tokens: int = 4096
    supports_streaming: bool = True
    supports_tools: bool = True
    supports_temperature: bool = True
    supports_system_prompt: bool = True

    def to_dict(self) -> dict[str, Any]:
        """JSON row of ``rhaipool models list --json``."""
        return {
            "id": self.id,
            "provider": self.provider,
            "display_name": self.display_name,
            "max_context_tokens": self.max_context_tokens,
            "max_output_tokens": self.max_output_tokens,
            "learned": True,
        }


def _int_or(value: Any, default: int) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return default


def _bool_or(value: Any) -> bool:
    return value if isinstance(value, bool) else True


def parse_models(value: Any, provider: str) -> list[ModelInfo]:
    """Rows with a string ``id`` are kept; unconvertible or non-array answers mean no rows."""
    try:
        plain = to_plain(value)
    except Unconvertible:
        return []
    if not isinstance(plain, list):
        return []
    rows = []
    for row in plain:
        if not isinstance(row, dict) or not isinstance(row.get("id"), str):
            continue
        name = row.get("display_name")
        rows.append(
            ModelInfo(
                id=row["id"],
                provider=provider,
                display_name=name if isinstance(name, str) else None,
                max_context_tokens=_int_or(row.get("max_context_tokens"), 8192),
                max_output_tokens=_int_or(row.get("max_output_tokens"), 4096),
                supports_streaming=_bool_or(row.get("supports_streaming")),
                supports_tools=_bool_or(row.get("supports_tools")),
                supports_temperature=_bool_or(row.get("supports_temperature")),
                supports_system_prompt=_bool_or(row.get("supports_system_prompt")),
            )
        )
    return rows


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What the runtime assumes of one model of a script provider."""

    max_context_tokens: int
    max_output_tokens: int
    supports_streaming: bool = True
    supports_temperature: bool = True
    supports_tools: bool = True
    supports_system_prompt: bool = True


def capabilities(metadata: Metadata, override: dict[str, Any]) -> Capabilities:
    """Script metadata with ``[model_capabilities.<model>]`` laid over it, field by field."""
    return Capabilities(
        max_context_tokens=uint(override.get("max_context_tokens")) or metadata.max_context_tokens,
        max_output_tokens=uint(override.get("max_output_tokens")) or metadata.max_output_tokens,
        supports_streaming=True,
        supports_temperature=override.get("supports_temperature", True) is not False,
        supports_tools=override.get("supports_tools", True) is not False,
        supports_system_prompt=override.get("supports_system_prompt", True) is not False,
    )
