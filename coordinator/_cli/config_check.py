"""``rhaipool validate --config FILE`` and ``doctor --config``: a config file checked as a whole.

The runtime reads only the tables it knows and forwards provider keys to the script, so a misspelled
table (``[model_provider.x]``) would silently do nothing; here every unknown name is a problem with a
"did you mean" suggestion.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from coordinator.providers.config import OWN_KEYS, ProviderConfigError, ProvidersConfig, parse_config

__all__ = ["KNOWN_TOP_LEVEL", "check_config_file", "did_you_mean", "naming_problems", "unknown_keys"]

KNOWN_TOP_LEVEL: Final = frozenset(
    {
        "providers_dir",
        "model_providers",
        "limits",
        "security",
        "request_timeout_secs",
        "model_capabilities",
        "tenants",
        "max_response_bytes",
        "serve",
        "nodes",
        "call_timeout_secs",
    }
)
"""Every top-level name the provider runtime and ``rhaipool serve`` read from the same file."""

KNOWN_LIMITS: Final = frozenset(
    {
        "inference_retry_attempts",
        "inference_retry_base_ms",
        "exact_token_counting",
        "max_concurrent_inferences_by_provider",
    }
)
"""The ``[limits]`` keys the provider runtime reads (the service may read more)."""

_PROVIDER_KEYS: Final = OWN_KEYS | {"api_key", "base_url", "model", "serves"}


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` when a known name is close, else empty."""
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def unknown_keys(found: Iterable[str], known: Iterable[str], where: str) -> list[str]:
    """One problem line per name of ``found`` that is not in ``known``."""
    allowed = set(known)
    return [
        f"{where}: unknown key '{key}'{did_you_mean(key, allowed)}" for key in found if key not in allowed
    ]


def _near_own_key(name: str, table: Mapping[str, Any]) -> list[str]:
    """Provider keys go to the script unchecked, but one a letter away from ours is almost surely a typo."""
    out = []
    for key in table:
        if key in _PROVIDER_KEYS:
            continue
        hint = did_you_mean(key, OWN_KEYS)
        if hint:
            out.append(f"[model_providers.{name}]: key '{key}' is passed to the script as is{hint}")
    return out


def naming_problems(data: Mapping[str, Any], path: Path) -> list[str]:
    """Names the runtime would silently skip: unknown top-level and ``[limits]`` keys, near-miss
    provider keys."""
    problems = unknown_keys(data, KNOWN_TOP_LEVEL, str(path))
    limits = data.get("limits")
    if isinstance(limits, dict):
        problems += unknown_keys(limits, KNOWN_LIMITS | {"tenant_cpu_seconds_per_minute"}, "[limits]")
    tables = data.get("model_providers")
    if isinstance(tables, dict):
        for name, table in tables.items():
            if isinstance(table, dict):
                problems += _near_own_key(name, table)
    return problems


def check_config_file(path: Path) -> tuple[ProvidersConfig | None, list[str]]:
    """The parsed config (None when it cannot be parsed) and every problem found in it."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        return None, [f"cannot read config {path}: {getattr(exc, 'strerror', None) or exc}"]
    except tomllib.TOMLDecodeError as exc:
        return None, [f"{path}: not valid TOML: {exc}"]
    problems = naming_problems(data, path)
    try:
        config = parse_config(data, base_dir=path.parent)
    except ProviderConfigError as exc:
        return None, [*problems, str(exc)]
    return config, problems
