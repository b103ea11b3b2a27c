"""The document tells the truth: every route's success reply from a real service validates against the
reply schema openapi.API gives it (replies forbid undocumented keys), and so do the error replies."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from pydantic import TypeAdapter
from service_support import ADMIN, TOKENS, ServiceProcess

from coordinator._cli.demo import GROQ_SCRIPT
from coordinator.service.front.schemas import AnthropicErrorReply, OpenAIErrorReply
from coordinator.service.openapi import API, Endpoint
from coordinator.service.schemas import ErrorReply, ProviderErrorReply

HOOK = "fn render(ctx) { `n=${ctx.entries.len()}` }"
PONG = {"model": "standin-small", "messages": [{"role": "user", "content": "Reply with exactly: PONG"}]}

CALLS: dict[tuple[str, str], tuple[str, Any, str | None]] = {
    ("GET", "/healthz"): ("/healthz", None, None),
    ("GET", "/readyz"): ("/readyz", None, None),
    ("GET", "/openapi.json"): ("/openapi.json", None, None),
    ("GET", "/api/status"): ("/api/status", None, "acme"),
    ("GET", "/api/scripts"): ("/api/scripts", None, "acme"),
    ("POST", "/api/scripts/validate"): (
        "/api/scripts/validate", {"kind": "region_hook", "content": "x"}, "acme",
    ),
    ("PUT", "/api/scripts/{kind}/{name}"): ("/api/scripts/region_hook/replies", {"content": HOOK}, "acme"),
    ("GET", "/api/scripts/{kind}/{name}"): ("/api/scripts/provider/groq", None, "acme"),
    ("POST", "/api/regions"): (
        "/api/regions", {"name": "replies", "script": "replies", "budget": 50}, "acme",
    ),
    ("GET", "/api/regions"): ("/api/regions", None, "acme"),
    ("POST", "/api/regions/{region}/write"): (
        "/api/regions/replies/write",
        {"content": "x", "kind": "assistant_turn", "tool_calls": [{"id": "1", "name": "f", "arguments": {}}]},
        "acme",
    ),
    ("GET", "/api/regions/{region}"): ("/api/regions/replies", None, "acme"),
    ("POST", "/api/regions/{region}/replace"): ("/api/regions/replies/replace", {"content": "y"}, "acme"),
    ("POST", "/api/regions/{region}/render"): ("/api/regions/replies/render", {}, "acme"),
    ("POST", "/api/regions/{region}/evict"): ("/api/regions/replies/evict", {"needed_tokens": 1}, "acme"),
    ("POST", "/api/window/assemble"): (
        "/api/window/assemble", {"max_tokens": 99, "regions": ["replies"]}, "acme",
    ),
    ("POST", "/api/providers/{name}/inference"): ("/api/providers/groq/inference", PONG, "acme"),
    ("POST", "/api/providers/{name}/count_tokens"): (
        "/api/providers/groq/count_tokens", {"text": "hi"}, "acme",
    ),
    ("GET", "/api/providers/{name}/models"): ("/api/providers/groq/models", None, "acme"),
    ("PUT", "/api/providers/{name}/config"): (
        "/api/providers/own/config", {"base_url": "https://x.test"}, "acme",
    ),
    ("GET", "/api/providers/{name}/config"): ("/api/providers/own/config", None, "acme"),
    ("POST", "/api/admin/reload"): ("/api/admin/reload", None, None),
    ("GET", "/api/admin/tenants"): ("/api/admin/tenants", None, None),
    ("PUT", "/api/admin/tenants/{tenant}"): ("/api/admin/tenants/replies", {"token_sha256": "cd" * 32}, None),
    ("POST", "/v1/chat/completions"): ("/v1/chat/completions", {**PONG, "model": "groq/standin"}, "acme"),
    ("GET", "/v1/models"): ("/v1/models", None, "acme"),
    ("GET", "/v1/models/{model}"): ("/v1/models/groq/standin-small", None, "acme"),
    ("POST", "/v1/messages"): ("/v1/messages", {**PONG, "model": "groq/standin", "max_tokens": 9}, "acme"),
    ("POST", "/v1/messages/count_tokens"): ("/v1/messages/count_tokens", {**PONG, "model": "groq/m"}, "acme"),
}  # fmt: skip
"""A request whose success reply each route's schema must describe (token: a tenant, or None for the
admin token where the route needs one); the order is the one the calls depend on."""
NO_JSON_BODY = {"/metrics", "/api/providers/{name}/stream"}


def _endpoint(method: str, path: str) -> Endpoint:
    return next(e for e in API if (e.method, e.path) == (method, path))


def test_every_route_with_a_json_reply_is_exercised() -> None:
    documented = {(e.method, e.path) for e in API if e.ok[1] is not None and e.path not in NO_JSON_BODY}
    assert documented == set(CALLS)


def test_success_replies_match_their_schemas(service: ServiceProcess) -> None:
    with service.client("acme") as c:
        c.put_script("provider", "groq", GROQ_SCRIPT.read_text())
    with httpx.Client(base_url=service.url, timeout=30) as http:
        for (method, template), (path, body, tenant) in CALLS.items():
            token = TOKENS[tenant] if tenant else ADMIN
            r = http.request(method, path, json=body, headers={"Authorization": f"Bearer {token}"})
            endpoint = _endpoint(method, template)
            status, schema, _ = endpoint.ok
            assert r.status_code in (status, *endpoint.also_ok), (method, path, r.text)
            TypeAdapter(schema).validate_python(r.json())


@pytest.mark.parametrize(
    ("method", "path", "body", "schema"),
    [
        ("POST", "/api/regions/nope/render", {}, ErrorReply),
        ("PUT", "/api/scripts/region_hook/x", {"contnt": ""}, ErrorReply),
        ("POST", "/api/providers/nope/inference", PONG, ProviderErrorReply),
        ("POST", "/api/providers/groq/inference", {"mesages": []}, ProviderErrorReply),
        ("POST", "/v1/chat/completions", {**PONG, "model": "nope/m"}, OpenAIErrorReply),
        ("POST", "/v1/messages", {"model": "groq/m", "mesages": []}, AnthropicErrorReply),
    ],
)
def test_error_replies_match_their_schemas(
    service: ServiceProcess, method: str, path: str, body: Any, schema: Any
) -> None:
    r = httpx.request(
        method,
        service.url + path,
        json=body,
        headers={"Authorization": f"Bearer {TOKENS['acme']}"},
        timeout=30,
    )
    assert 400 <= r.status_code < 500
    TypeAdapter(schema).validate_python(r.json())
