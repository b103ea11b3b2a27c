"""The scripts API (docs/reference/json.md; PG1-PG3) on a real service: kinds, names, status codes,
tenancy."""

from __future__ import annotations

import httpx
import pytest
from service_support import ADMIN, TOKENS, ServiceProcess

from coordinator._cli.demo import GROQ_SCRIPT
from coordinator.client import ServiceError

GOOD_HOOK = "fn render(ctx) { `entries: ${ctx.entries.len()}` }"


def _raw(
    service: ServiceProcess, method: str, path: str, token: str | None = TOKENS["acme"], **kw: object
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    headers.update(kw.pop("headers", {}))  # type: ignore[call-overload]
    return httpx.request(method, service.url + path, headers=headers, timeout=30, **kw)  # type: ignore[arg-type]


def test_put_get_list_delete_round_trip(service: ServiceProcess) -> None:
    with service.client("acme") as c:
        written = c.put_script("region_hook", "roundtrip", GOOD_HOOK)
        assert written["path"] == "region_hook/roundtrip" and written["compiles"] is True
        assert "error" not in written
        got = c.get_script("region_hook", "roundtrip.rhai")  # the suffix names the same script
        assert got["content"] == GOOD_HOOK and got["kind"] == "region_hook" and got["compiles"] is True
        listed = [(s["kind"], s["name"]) for s in c.list_scripts()["scripts"]]
        assert ("region_hook", "roundtrip") in listed
        assert c.delete_script("region_hook", "roundtrip") is None
        with pytest.raises(ServiceError) as missing:
            c.get_script("region_hook", "roundtrip")
        assert (
            missing.value.status == 404 and missing.value.message == "No such script: region_hook/roundtrip"
        )
        with pytest.raises(ServiceError) as again:
            c.delete_script("region_hook", "roundtrip")
        assert again.value.status == 404


def test_a_script_that_does_not_compile_is_stored_and_says_so(service: ServiceProcess) -> None:
    with service.client("acme") as c:
        written = c.put_script("region_hook", "draft", "fn other(ctx) { () }")
        assert written["compiles"] is False and "fn render(ctx)" in written["error"]
        assert c.get_script("region_hook", "draft")["compiles"] is False


def test_provider_script_listing_carries_its_metadata(service: ServiceProcess) -> None:
    with service.client("acme") as c:
        c.put_script("provider", "groq", GROQ_SCRIPT.read_text())
        got = c.get_script("provider", "groq")
        assert got["compiles"] is True
        assert got["provider"]["default_model"] == "llama-3.3-70b-versatile"


def test_pg1_validate_provider(service: ServiceProcess) -> None:
    with service.client("acme") as c:
        bad = c.validate("provider", "fn initialize(config){#{}}")
        assert bad["valid"] is False and "inference" in bad["error"]
        assert c.validate("provider", GROQ_SCRIPT.read_text()) == {"valid": True}


def test_pg2_validate_region_hook(service: ServiceProcess) -> None:
    with service.client("acme") as c:
        assert c.validate("region_hook", "fn render(ctx) {")["valid"] is False
        other = c.validate("region_hook", "fn other(ctx){()}")
        assert other["valid"] is False and "fn render(ctx)" in other["error"]
        assert c.validate("region_hook", GOOD_HOOK) == {"valid": True}


def test_pg3_unknown_kind_names_the_supported_ones(service: ServiceProcess) -> None:
    for method, path, body in (
        ("GET", "/api/scripts/model_provider/x", None),
        ("PUT", "/api/scripts/tool/x", {"content": "1"}),
        ("DELETE", "/api/scripts/stage_hook/x", None),
        ("POST", "/api/scripts/validate", {"kind": "model_provider", "content": ""}),
    ):
        r = _raw(service, method, path, json=body)
        assert r.status_code == 400, (method, path)
        assert "provider" in r.json()["error"] and "region_hook" in r.json()["error"]


@pytest.mark.parametrize("name", ["..%2Fx", "a%20b", "x%2Fy", ".rhai", "%2E%2E", "a%00b"])
def test_pg3_names_outside_the_rule_are_400(service: ServiceProcess, name: str) -> None:
    r = _raw(service, "PUT", f"/api/scripts/region_hook/{name}", json={"content": GOOD_HOOK})
    assert r.status_code == 400
    assert r.json()["error"].startswith("Invalid script name")


def test_pg3_agent_scope_is_refused(service: ServiceProcess) -> None:
    r = _raw(service, "GET", "/api/scripts/provider/groq?agent=a")
    assert r.status_code == 400 and "?agent=" in r.json()["error"]


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "JSON object"),
        (b"", "empty"),
        (b'{"content": 5}', "field 'content'"),
        (b"{}", "missing field 'content'"),
        (b"\xff\xfe", "UTF-8"),
    ],
)
def test_malformed_bodies_are_400_with_one_line(service: ServiceProcess, body: bytes, why: str) -> None:
    r = _raw(service, "PUT", "/api/scripts/region_hook/x", content=body)
    assert r.status_code == 400
    assert why in r.json()["error"] and "\n" not in r.json()["error"]


def test_oversized_body_is_413(service: ServiceProcess) -> None:
    r = _raw(service, "PUT", "/api/scripts/region_hook/big", json={"content": "x" * (2 << 20)})
    assert r.status_code == 413


def test_oversized_headers_are_refused(service: ServiceProcess) -> None:
    r = _raw(service, "GET", "/api/scripts", headers={"X-Big": "y" * (64 << 10)})
    assert 400 <= r.status_code < 500


@pytest.mark.parametrize("token", [None, "wrong", ADMIN, "Basic abc"])
def test_without_a_tenant_token_every_route_is_401_without_detail(
    service: ServiceProcess, token: str | None
) -> None:
    for method, path in (
        ("GET", "/api/scripts"),
        ("GET", "/api/scripts/region_hook/x"),
        ("PUT", "/api/scripts/region_hook/x"),
        ("DELETE", "/api/scripts/region_hook/x"),
        ("POST", "/api/scripts/validate"),
    ):
        r = _raw(service, method, path, token=token, json={"content": "", "kind": "provider"})
        assert r.status_code == 401, (method, path, token)
        assert r.json() == {"error": "unauthorized"}


def test_a_tenant_never_sees_another_tenants_scripts(service: ServiceProcess) -> None:
    with service.client("acme") as acme, service.client("globex") as globex:
        acme.put_script("region_hook", "secret", GOOD_HOOK)
        assert ("region_hook", "secret") not in [
            (s["kind"], s["name"]) for s in globex.list_scripts()["scripts"]
        ]
        for call in (
            lambda: globex.get_script("region_hook", "secret"),
            lambda: globex.delete_script("region_hook", "secret"),
        ):
            with pytest.raises(ServiceError) as refused:
                call()
            assert refused.value.status == 404
        globex.put_script("region_hook", "secret", "fn render(ctx) { `globex` }")
        assert acme.get_script("region_hook", "secret")["content"] == GOOD_HOOK


@pytest.mark.parametrize("name", ["x" * 65, "x" * 300, "a%09b", "%C3%A9"])
def test_names_over_the_limit_or_outside_the_charset_are_refused_before_storing(
    service: ServiceProcess, name: str
) -> None:
    """A 300-character name was once stored and then stopped the service from starting."""
    r = _raw(service, "PUT", f"/api/scripts/region_hook/{name}", json={"content": GOOD_HOOK})
    assert r.status_code == 400 and r.json()["error"].startswith("Invalid script name")
    assert "\n" not in r.json()["error"] and len(r.json()["error"]) < 300
    listed = _raw(service, "GET", "/api/scripts").json()["scripts"]
    assert all(len(s["name"]) <= 64 for s in listed)


def test_a_name_of_exactly_64_is_stored(service: ServiceProcess) -> None:
    with service.client("acme") as c:
        assert c.put_script("region_hook", "n" * 64, GOOD_HOOK)["compiles"] is True
        assert c.get_script("region_hook", "n" * 64 + ".rhai")["name"] == "n" * 64
        c.delete_script("region_hook", "n" * 64)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b'{"content": "fn render(ctx) { \\"\\ud800\\" }"}', "surrogate"),
        (b'{"content": "x", "contnet": "y"}', "unknown field 'contnet': did you mean 'content'?"),
        (b'{"conten": "x"}', "unknown field 'conten': did you mean 'content'?"),
    ],
)
def test_a_refused_script_body_stores_nothing(service: ServiceProcess, body: bytes, why: str) -> None:
    r = _raw(service, "PUT", "/api/scripts/region_hook/refused", content=body)
    assert r.status_code == 400 and why in r.json()["error"], r.text
    assert _raw(service, "GET", "/api/scripts/region_hook/refused").status_code == 404


def test_validate_refuses_unknown_keys(service: ServiceProcess) -> None:
    r = _raw(service, "POST", "/api/scripts/validate", json={"kind": "provider", "content": "", "knd": 1})
    assert r.status_code == 400 and r.json()["error"].startswith("unknown field 'knd'")
