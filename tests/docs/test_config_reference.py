"""The configuration reference documents every key the code reads, with the code's defaults.

Keys are taken from the parsers themselves (their constants and the names they ``.get``), so a key
added to the code without a line in ``docs/reference/configuration.md`` fails here.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from coordinator._cli.config_check import KNOWN_LIMITS, KNOWN_TOP_LEVEL
from coordinator.providers import config as providers_config
from coordinator.service import config as service_config
from coordinator.service.connections import ConnectionLimits

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reference" / "configuration.md"
_HEADING = re.compile(r"^#{2,3} (.*)$")
_ROW = re.compile(r"^\| `([a-z_0-9]+)` \| ([^|]*)\|")


def documented() -> dict[str, dict[str, str]]:
    """Section title → {key: default column} for every key row of the page."""
    sections: dict[str, dict[str, str]] = {}
    current = ""
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        heading = _HEADING.match(line)
        if heading:
            current = heading.group(1).strip()
            sections.setdefault(current, {})
            continue
        row = _ROW.match(line)
        if row and current:
            sections[current][row.group(1)] = row.group(2).strip()
    return sections


def keys_read(module_source: Path, variable: str) -> set[str]:
    """Every literal key ``variable.get("KEY"`` / ``variable["KEY"]`` reads in ``module_source``."""
    text = module_source.read_text(encoding="utf-8")
    pattern = rf'\b{variable}(?:\.get\(|\[)"([a-z_0-9]+)"'
    return set(re.findall(pattern, text))


def code_value(default_column: str) -> str:
    """The first code span of a default column (``"`900`"`` → ``900``)."""
    found = re.search(r"`([^`]*)`", default_column)
    assert found, f"no default value in {default_column!r}"
    return found.group(1)


SECTIONS = documented()


def section(name: str) -> dict[str, str]:
    assert name in SECTIONS, f"no section {name!r} in {PAGE.name}; sections: {sorted(SECTIONS)}"
    return SECTIONS[name]


def test_every_top_level_name_is_documented() -> None:
    assert set(section("Top level")) == set(KNOWN_TOP_LEVEL)


def test_every_provider_table_key_is_documented() -> None:
    own = set(providers_config.OWN_KEYS) | {"api_key", "base_url", "serves"}
    assert set(section("`[model_providers.<name>]`")) == own
    assert set(section("`[model_providers.<name>.rate_limit]`")) == {
        "requests_per_minute",
        "tokens_per_minute",
    }


def test_every_limits_key_is_documented() -> None:
    read = keys_read(Path(providers_config.__file__), "limits") | {"max_concurrent_inferences_by_provider"}
    assert read <= set(KNOWN_LIMITS)
    assert set(section("`[limits]`")) == set(KNOWN_LIMITS)


def test_every_serve_and_tenant_key_is_documented() -> None:
    source = Path(service_config.__file__)
    connection_keys = {f.name for f in dataclasses.fields(ConnectionLimits)}  # its own parser reads them
    assert keys_read(source, "serve") | connection_keys == set(section("`[serve]`"))
    assert keys_read(source, "table") == set(section("`[tenants.<id>]`"))


def test_every_nodes_key_is_documented() -> None:
    from coordinator.nodes import config as nodes_config

    text = Path(nodes_config.__file__).read_text(encoding="utf-8")
    allowed = re.search(r"set\(table\) - \{([^}]*)\}", text)
    assert allowed, "the [nodes] parser no longer lists its keys the way this test reads them"
    keys = set(re.findall(r'"([a-z_]+)"', allowed.group(1)))
    assert keys == set(section("`[nodes]`"))


@pytest.mark.parametrize(
    ("where", "key", "value"),
    [
        ("Top level", "providers_dir", f'"{providers_config.DEFAULT_PROVIDERS_DIR}"'),
        ("Top level", "request_timeout_secs", f"{providers_config.DEFAULT_REQUEST_TIMEOUT_SECS:g}"),
        ("Top level", "max_response_bytes", str(providers_config.DEFAULT_MAX_RESPONSE_BYTES)),
        ("`[limits]`", "inference_retry_attempts", str(providers_config.DEFAULT_RETRY_ATTEMPTS)),
        ("`[limits]`", "inference_retry_base_ms", str(providers_config.DEFAULT_RETRY_BASE_MS)),
        ("`[limits]`", "exact_token_counting", "false"),
        ("`[serve]`", "listen", f'"{service_config.DEFAULT_LISTEN}"'),
        ("`[serve]`", "database", f'"{service_config.ServeConfig().database}"'),
        ("`[serve]`", "max_body_bytes", str(service_config.DEFAULT_MAX_BODY_BYTES)),
        ("`[serve]`", "max_header_bytes", str(service_config.DEFAULT_MAX_HEADER_BYTES)),
        ("`[serve]`", "grace_secs", f"{service_config.DEFAULT_GRACE_SECS:g}"),
    ],
)
def test_documented_defaults_are_the_codes(where: str, key: str, value: str) -> None:
    assert code_value(section(where)[key]) == value


def test_parsers_use_the_documented_defaults() -> None:
    """An empty file gives exactly the defaults above (the constants are what the parsers use)."""
    parsed = service_config.parse_service_config({}, ROOT)
    assert (parsed.host, parsed.port) == ("127.0.0.1", 8765)
    assert parsed.max_body_bytes == service_config.DEFAULT_MAX_BODY_BYTES
    assert parsed.grace_secs == service_config.DEFAULT_GRACE_SECS
    providers = parsed.providers
    assert providers.request_timeout_secs == providers_config.DEFAULT_REQUEST_TIMEOUT_SECS
    assert providers.retry_attempts == providers_config.DEFAULT_RETRY_ATTEMPTS
    assert providers.retry_base_ms == providers_config.DEFAULT_RETRY_BASE_MS
    assert providers.max_response_bytes == providers_config.DEFAULT_MAX_RESPONSE_BYTES
    assert providers.exact_token_counting is False


def test_every_tenant_limit_is_documented_with_its_default() -> None:
    documented_limits = section("`[serve.tenant_defaults]`")
    assert set(documented_limits) == set(service_config.LIMIT_KEYS)
    defaults = service_config.TenantLimits()
    for key, column in documented_limits.items():
        value = getattr(defaults, key)
        if value is None:
            assert "no cap" in column or "none" in column, key
        elif key != "provider_call_secs":
            assert code_value(column) == (f"{value:g}" if isinstance(value, float) else str(value)), key
