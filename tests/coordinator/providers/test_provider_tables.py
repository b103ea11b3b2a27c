"""A provider table given as JSON (a tenant's PUT) follows the TOML table's rules; its redacted form
never shows a secret (issue 21 point 1, contracts "Grants and tenant provider tables")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coordinator.providers import ProviderConfigError, parse_provider_table, redacted_table
from coordinator.providers.config import parse_config

KEY = "sk-real-0123456789abcdef"
TABLE: dict[str, Any] = {
    "base_url": "https://api.example.com/v1",
    "api_key": KEY,
    "model": "m1",
    "max_tokens": 4096,
    "headers": {"X-Org": "acme", "X-Auth-Token": "tok-secret"},
    "rate_limit": {"requests_per_minute": 10, "tokens_per_minute": 1000},
    "allowed_hosts": ["cdn.example.com"],
    "env": {"GROQ_API_KEY": "env-secret"},
    "max_response_bytes": 1024,
}


def parse(raw: dict[str, Any], tenant_owned: bool = True) -> Any:
    return parse_provider_table("p", raw, base_dir=Path("."), tenant_owned=tenant_owned)


def test_a_json_table_parses_as_the_same_toml_table_does() -> None:
    from_json = parse(json.loads(json.dumps(TABLE)))
    from_toml = parse_config({"model_providers": {"p": TABLE}}).table("p")
    assert from_json == from_toml
    assert from_json.base_url == "https://api.example.com/v1" and from_json.rate_limit is not None


@pytest.mark.parametrize("key", ["egress_allow", "allow_env_vars", "script"])
def test_a_tenant_table_may_not_name_an_operator_only_key(key: str) -> None:
    with pytest.raises(ProviderConfigError, match=f"'{key}' may be set only by the operator"):
        parse({**TABLE, key: ["x"] if key != "script" else "x"})
    parse({**TABLE, key: ["127.0.0.1"] if key != "script" else "x"}, tenant_owned=False)  # the operator may


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"base_url": "ftp://x"}, "base_url must be an http"),
        ({"base_url": 5}, "base_url must be an http"),
        ({"model": None}, "null is not a value"),
        ({"n": 1 << 70}, "out of the 64-bit range"),
        ({"rate_limit": {"requests_per_minute": 1}}, "requires tokens_per_minute"),
        ({"env": {"A": 1}}, "env must be a table of strings"),
        ({"allowed_hosts": "x"}, "allowed_hosts must be an array of strings"),
    ],
)
def test_a_bad_table_is_refused_with_the_rule_it_broke(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ProviderConfigError, match=message):
        parse({**TABLE, **change})


def test_the_redacted_table_shows_everything_but_secret_values() -> None:
    shown = redacted_table(parse(TABLE))
    text = json.dumps(shown)
    for secret in (KEY, "tok-secret", "env-secret"):
        assert secret not in text
    assert shown["api_key"] == "********" and shown["env"] == {"GROQ_API_KEY": "********"}
    assert shown["headers"] == {"X-Org": "acme", "X-Auth-Token": "********"}
    assert (shown["model"], shown["max_tokens"], shown["base_url"]) == ("m1", 4096, TABLE["base_url"])
    assert shown["rate_limit"] == TABLE["rate_limit"] and shown["allowed_hosts"] == ["cdn.example.com"]
    assert shown["max_response_bytes"] == 1024


def test_a_redacted_toml_table_is_valid_json() -> None:
    table = parse_config({"model_providers": {"p": {"t": float("nan"), "u": float("-inf")}}}).table("p")
    assert table is not None
    assert json.loads(json.dumps(redacted_table(table), allow_nan=False)) == {"t": "nan", "u": "-inf"}


def test_a_password_in_any_url_is_a_secret() -> None:
    table = parse({"base_url": "https://user:hunter2@proxy.example/v1", "docs": "see a@b.c"})
    shown = redacted_table(table)
    assert shown["base_url"] == "https://user:********@proxy.example/v1" and shown["docs"] == "see a@b.c"
    masked = table.init_config(lambda value: f"<{len(value)}>")
    assert masked["base_url"] == "https://user:<7>@proxy.example/v1"
