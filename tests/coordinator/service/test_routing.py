"""Routing answers: a wrong method or an unknown path gets the one-line JSON error, and every call is
counted under its operation (what the router set as the endpoint) with its outcome."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from service_support import ADMIN, TOKENS, ServiceProcess

HOOK = 'fn render(ctx) { "ok" }'
MOCK = 'fn initialize(config) { #{} }\nfn inference(state, request) { #{ content: "ok" } }'
AUTH = {"Authorization": f"Bearer {TOKENS['acme']}"}
REQUEST = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def http(service: ServiceProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=service.url, timeout=30) as client:
        for put in (
            client.put("/api/scripts/region_hook/hook", json={"content": HOOK}, headers=AUTH),
            client.put("/api/scripts/provider/mock", json={"content": MOCK}, headers=AUTH),
            client.post(
                "/api/regions", json={"name": "routed", "script": "hook", "budget": 100}, headers=AUTH
            ),
        ):
            assert put.status_code in (200, 201), put.text
        yield client


def test_wrong_methods_and_unknown_paths_get_one_line_json(http: httpx.Client) -> None:
    wrong = http.get("/api/regions/routed/render", headers=AUTH)
    assert wrong.status_code == 405 and wrong.json() == {"error": "method not allowed"}
    for path in ("/api/regions//render", "/api/regions/routed/render/x", "/api/x/routed/render"):
        missing = http.post(path, json={}, headers=AUTH)
        assert missing.status_code == 404 and missing.json() == {"error": "no such endpoint"}, path


def _count(http: httpx.Client, kind: str, outcome: str) -> float:
    labels = {"kind": kind, "tenant": "acme", "outcome": outcome}
    text = http.get("/metrics", headers={"Authorization": f"Bearer {ADMIN}"}).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "rhaipool_calls_total" and sample.labels == labels:
                return float(sample.value)
    return 0.0


def test_calls_are_counted_under_their_operation(http: httpx.Client) -> None:
    kinds = (("render", "ok"), ("write", "ok"), ("inference", "ok"), ("render", "client_error"))
    before = {k: _count(http, *k) for k in kinds}
    http.post("/api/regions/routed/render", json={}, headers=AUTH).raise_for_status()
    http.post("/api/regions/routed/write", json={"content": "x"}, headers=AUTH).raise_for_status()
    http.post("/api/providers/mock/inference", json=REQUEST, headers=AUTH).raise_for_status()
    assert http.post("/api/regions/nope/render", json={}, headers=AUTH).status_code == 404
    for kind in kinds:
        assert _count(http, *kind) == before[kind] + 1, kind
