"""A tenant's own provider tables over HTTP: ``PUT|GET|DELETE /api/providers/{name}/config`` on a real
service with a secrets key (both tenants are granted the operator's ``groq`` table)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet
from service_support import TOKENS, ServiceProcess, free_port, write_config

from coordinator.bench.standin import StandinServer


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, standin: StandinServer) -> Iterator[ServiceProcess]:
    folder = tmp_path_factory.mktemp("service")
    key = folder / "secrets.key"
    key.write_bytes(Fernet.generate_key())
    key.chmod(0o600)
    port = free_port()
    config = write_config(folder, port=port, standin=standin.base_url, extra=f'secrets_key_file = "{key}"')
    running = ServiceProcess.start(config, port)
    yield running
    assert running.stop() == 0


TABLE = {
    "api_key": "sk-tenant-secret",
    "base_url": "https://api.example.com/v1",
    "rate_limit": {"requests_per_minute": 60, "tokens_per_minute": 100000},
    "serves": ["m1"],
    "temperature_floor": 0.25,
    "nested": {"client_secret": "hidden-too", "label": "shown"},
}


def _call(
    service: ServiceProcess, method: str, name: str, body: Any = None, tenant: str = "acme", **kw: Any
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {TOKENS[tenant]}"}
    url = f"{service.url}/api/providers/{name}/config"
    return httpx.request(method, url, json=body, headers=headers, timeout=30, **kw)


def test_put_get_delete_round_trip_never_shows_a_secret(service: ServiceProcess) -> None:
    put = _call(service, "PUT", "mine", TABLE)
    assert put.status_code == 200, put.text
    shown = put.json()
    assert shown["api_key"] == "********" and shown["nested"]["client_secret"] == "********"
    assert shown["base_url"] == TABLE["base_url"] and shown["nested"]["label"] == "shown"
    assert shown["rate_limit"] == TABLE["rate_limit"] and shown["temperature_floor"] == 0.25
    got = _call(service, "GET", "mine")
    assert got.status_code == 200 and got.json() == shown
    assert "sk-tenant-secret" not in got.text and "hidden-too" not in got.text
    assert _call(service, "DELETE", "mine").status_code == 204
    assert _call(service, "GET", "mine").status_code == 404
    assert _call(service, "DELETE", "mine").status_code == 404


def test_a_put_replaces_the_whole_table(service: ServiceProcess) -> None:
    assert _call(service, "PUT", "swap", TABLE).status_code == 200
    assert _call(service, "PUT", "swap", {"base_url": "https://other.example.com"}).status_code == 200
    assert _call(service, "GET", "swap").json() == {"base_url": "https://other.example.com"}
    _call(service, "DELETE", "swap")


def test_a_granted_name_is_the_operators(service: ServiceProcess) -> None:
    r = _call(service, "PUT", "groq", TABLE)
    assert r.status_code == 409 and "operator" in r.json()["error"]
    assert _call(service, "GET", "groq").status_code == 404  # the operator's table is never shown


@pytest.mark.parametrize("key", ["egress_allow", "allow_env_vars", "script"])
def test_operator_only_keys_are_refused(service: ServiceProcess, key: str) -> None:
    r = _call(service, "PUT", "sneaky", {**TABLE, key: ["127.0.0.1"] if key != "script" else "x"})
    assert r.status_code == 400 and key in r.json()["error"] and "\n" not in r.json()["error"]
    assert _call(service, "GET", "sneaky").status_code == 404


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b'{"api_key": 5}', "field 'api_key'"),
        (b'{"rate_limit": {"requests_per_minute": 1}}', "missing field 'rate_limit.tokens_per_minute'"),
        (b'{"rate_limit": {"requests_per_minute": 1, "tokens_per_minute": 1, "burst": 2}}', "burst"),
        (b'{"x": NaN}', "finite"),
        (b'{"x": 100000000000000000000}', "64 bits"),
        (b'{"x": "\\ud800"}', "surrogate"),
        (b'{"x": null}', "null"),
        (b'{"base_url": "file:///etc/passwd"}', "base_url"),
        (b"[1]", "JSON object"),
        (b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deep"),
    ],
)
def test_bad_tables_are_400_with_one_line(service: ServiceProcess, body: bytes, why: str) -> None:
    r = _call(service, "PUT", "bad", content=body)
    assert r.status_code == 400, r.text
    assert why in r.json()["error"] and "\n" not in r.json()["error"]
    assert _call(service, "GET", "bad").status_code == 404


@pytest.mark.parametrize("name", ["x" * 65, "a%20b", "..", "a%2Fb"])
def test_table_names_follow_the_name_rule(service: ServiceProcess, name: str) -> None:
    for method in ("PUT", "GET", "DELETE"):
        r = _call(service, method, name, TABLE if method == "PUT" else None)
        assert r.status_code in (400, 404), (method, name, r.status_code)
        if r.status_code == 400:
            assert "Invalid provider name" in r.json()["error"]


def test_a_tenant_never_sees_another_tenants_table(service: ServiceProcess) -> None:
    assert _call(service, "PUT", "private", TABLE).status_code == 200
    assert _call(service, "GET", "private", tenant="globex").status_code == 404
    assert _call(service, "DELETE", "private", tenant="globex").status_code == 404
    assert _call(service, "GET", "private").status_code == 200
    _call(service, "DELETE", "private")


def test_without_a_tenant_token_every_config_route_is_401(service: ServiceProcess) -> None:
    for method in ("PUT", "GET", "DELETE"):
        r = httpx.request(method, f"{service.url}/api/providers/mine/config", json=TABLE, timeout=30)
        assert r.status_code == 401 and r.json() == {"error": "unauthorized"}


def test_a_tenants_own_tables_are_bounded_by_count_and_bytes(tmp_path: Any, standin: StandinServer) -> None:
    """``max_provider_tables`` and ``max_provider_table_bytes`` ([tenants.<id>]): past either a PUT is
    refused (429, 413) and nothing is stored; replacing a table counts its new size, not both."""
    key = tmp_path / "secrets.key"
    key.write_bytes(Fernet.generate_key())
    port = free_port()
    config = write_config(tmp_path, port=port, standin=standin.base_url, extra=f'secrets_key_file = "{key}"')
    acme = config.read_text().index("[tenants.acme]\n") + len("[tenants.acme]\n")
    text = config.read_text()
    config.write_text(
        text[:acme] + "max_provider_tables = 2\nmax_provider_table_bytes = 3000\n" + text[acme:]
    )
    running = ServiceProcess.start(config, port)
    try:
        small = {"base_url": "https://api.example.com/v1"}
        assert _call(running, "PUT", "one", small).status_code == 200
        assert _call(running, "PUT", "two", small).status_code == 200
        third = _call(running, "PUT", "three", small)
        assert third.status_code == 429 and "max_provider_tables" in third.text, third.text
        big = {**small, "blob": "b" * 2950}
        too_big = _call(running, "PUT", "two", big)
        assert too_big.status_code == 413 and "max_provider_table_bytes" in too_big.text, too_big.text
        assert _call(running, "GET", "two").json() == small  # nothing changed
        assert _call(running, "PUT", "one", {**small, "blob": "b" * 2000}).status_code == 200  # a replacement
        assert _call(running, "PUT", "two", small, tenant="globex").status_code == 200  # another tenant's own
        assert _call(running, "DELETE", "two").status_code == 204
        assert _call(running, "PUT", "three", small).status_code == 200
        with running.client("acme") as c:
            quotas = c.status()["tenants"][0]["quotas"]
        assert quotas["max_provider_tables"]["used"] == 2 and quotas["max_provider_tables"]["limit"] == 2
        assert 2000 < quotas["max_provider_table_bytes"]["used"] <= 3000
    finally:
        assert running.stop() == 0
    restarted = ServiceProcess.start(config, port)  # the tables read back count as they did
    try:
        refused = _call(restarted, "PUT", "four", small)
        assert refused.status_code == 429 and "max_provider_tables" in refused.text, refused.text
    finally:
        assert restarted.stop() == 0
