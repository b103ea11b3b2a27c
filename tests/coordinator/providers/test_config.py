"""Config tables, init config, script paths and discovery
(docs/scripts/providers.md#where-it-lives-and-how-it-is-named,
docs/reference/configuration.md#model_providersname; PF5, PF7)."""

from __future__ import annotations

import datetime as dt
import tomllib
from pathlib import Path

import pytest

from coordinator.providers.config import (
    ProviderConfigError,
    RateLimit,
    candidate_names,
    load_config,
    parse_config,
    resolve_script,
)


def test_pf5_path_overrides(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d = tmp_path / "providers"
    assert resolve_script(d, "x", "custom") == d / "custom.rhai"
    assert resolve_script(d, "x", "custom.rhai") == d / "custom.rhai"
    assert resolve_script(d, "x", "/abs/where/p.rhai") == Path("/abs/where/p.rhai")
    assert resolve_script(d, "z") == d / "z.rhai"
    assert resolve_script(d, "x", "vendor/custom") == d / "vendor" / "custom.rhai"
    for bad in ("../../tools/evil", "../evil.rhai", "sub/../../evil", "a/../b"):
        assert resolve_script(d, "x", bad) is None
    assert resolve_script(d, "../x") is None
    assert "escapes the providers directory - refusing to load" in caplog.text


def test_pf7_init_config_assembly() -> None:
    cfg = parse_config(
        {
            "model_providers": {
                "groq": {
                    "script": "groq",
                    "api_key": "k",
                    "base_url": "http://api",
                    "rate_limit": {"requests_per_minute": 30, "tokens_per_minute": 1000},
                    "region": "us",
                }
            }
        }
    )
    table = cfg.table("groq")
    assert table is not None
    assert table.init_config() == {"api_key": "k", "base_url": "http://api", "region": "us"}
    assert table.rate_limit == RateLimit(30, 1000)
    assert cfg.table("other") is None


def test_extras_forwarded_verbatim_and_own_keys_kept_out() -> None:
    text = """
[model_providers.p]
serves = ["a", "b"]
nested = { x = 1, y = [1, 2.5, "s"] }
when = 1979-05-27T07:32:00Z
egress_allow = ["127.0.0.1", "10.0.0.0/8"]
allowed_hosts = ["api.example.com"]
allow_env_vars = ["MY_KEY"]
[model_providers.p.env]
TOKEN = "secret"
"""
    table = parse_config(tomllib.loads(text)).table("p")
    assert table is not None
    init = table.init_config()
    assert init["serves"] == ["a", "b"] and table.serves == ("a", "b")
    assert init["nested"] == {"x": 1, "y": [1, 2.5, "s"]}
    assert init["when"] == {
        "$__toml_private_datetime": dt.datetime(1979, 5, 27, 7, 32, tzinfo=dt.UTC).isoformat()
    }
    assert not {"egress_allow", "allowed_hosts", "env", "allow_env_vars"} & set(init)
    assert table.egress_allow == ("127.0.0.1", "10.0.0.0/8") and table.env == (("TOKEN", "secret"),)


def test_snapshots_compare_by_value() -> None:
    raw = {"model_providers": {"p": {"base_url": "http://first", "x": [1, {"a": 2}]}}}
    assert parse_config(raw) == parse_config(raw)
    changed = {"model_providers": {"p": {"base_url": "http://second", "x": [1, {"a": 2}]}}}
    assert parse_config(raw).table("p") != parse_config(changed).table("p")


@pytest.mark.parametrize(
    "table",
    [
        {"rate_limit": {"requests_per_minute": 5}},
        {"rate_limit": {"requests_per_minute": 0, "tokens_per_minute": 1}},
        {"rate_limit": {"requests_per_minute": 1.5, "tokens_per_minute": 1}},
        {"script": 5},
        {"egress_allow": "127.0.0.1"},
        {"env": {"A": 1}},
    ],
)
def test_invalid_tables(table: dict[str, object]) -> None:
    with pytest.raises(ProviderConfigError):
        parse_config({"model_providers": {"p": table}})


def test_globals_and_file_loading(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        'providers_dir = "prov"\nrequest_timeout_secs = 30\n[security]\nallow_env_vars = ["A_KEY"]\n'
        "[limits]\ninference_retry_attempts = 2\ninference_retry_base_ms = 10\n"
        "exact_token_counting = true\n[model_capabilities.m]\nmax_context_tokens = 99\n"
    )
    cfg = load_config(path)
    assert cfg.providers_dir == tmp_path / "prov"
    assert (cfg.request_timeout_secs, cfg.retry_attempts, cfg.retry_base_ms) == (30.0, 2, 10)
    assert cfg.exact_token_counting and cfg.allow_env_vars == ("A_KEY",)
    assert cfg.capabilities("m") == {"max_context_tokens": 99}
    path.write_text("not = [toml")
    with pytest.raises(ProviderConfigError, match="cannot read config"):
        load_config(path)


def test_candidate_names(tmp_path: Path) -> None:
    (tmp_path / "groq.rhai").write_text("")
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "sub").mkdir()
    cfg = parse_config({"providers_dir": str(tmp_path), "model_providers": {"acme": {}}})
    assert candidate_names(cfg) == ["acme", "groq"]
    gone = parse_config({"providers_dir": str(tmp_path / "missing")})
    assert candidate_names(gone) == []
