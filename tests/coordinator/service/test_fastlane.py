"""The fast lane (render, write, inference) answers exactly as Starlette's router does.

Each failure is sent to a lane route and to a router route that runs the same checks (replace and
evict share render's region lookup and body parsing; count_tokens shares inference's provider lookup),
and the two answers must be the same status, headers and body.
"""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from service_support import TOKENS, ServiceProcess

from coordinator.service.config import DEFAULT_MAX_BODY_BYTES

HOOK = 'fn render(ctx) { "ok" }'
MOCK = 'fn initialize(config) { #{} }\nfn inference(state, request) { #{ content: "ok" } }'
AUTH = {"Authorization": f"Bearer {TOKENS['acme']}"}
TEXT = b'{"text": "a"}'  # count_tokens checks its field before it looks the provider up
REQUEST = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def http(service: ServiceProcess) -> httpx.Client:
    with httpx.Client(base_url=service.url, timeout=30) as client:
        for put in (
            client.put("/api/scripts/region_hook/hook", json={"content": HOOK}, headers=AUTH),
            client.put("/api/scripts/provider/mock", json={"content": MOCK}, headers=AUTH),
            client.post("/api/regions", json={"name": "r", "script": "hook", "budget": 100}, headers=AUTH),
        ):
            put.raise_for_status()
        yield client


def _answer(response: httpx.Response) -> tuple[int, dict[str, str], bytes]:
    headers = {k: v for k, v in response.headers.items() if k != "date"}
    return response.status_code, headers, response.content


LANE_VS_ROUTER = [
    ("no token", "/api/regions/r/render", "/api/regions/r/replace", {}, b"{}"),
    ("bad token", "/api/regions/r/write", "/api/regions/r/replace", {"Authorization": "Bearer x"}, b"{}"),
    ("no region", "/api/regions/nope/render", "/api/regions/nope/replace", AUTH, b"{}"),
    ("not JSON", "/api/regions/r/write", "/api/regions/r/replace", AUTH, b"{nope"),
    ("empty body", "/api/regions/r/render", "/api/regions/r/evict", AUTH, b""),
    ("not an object", "/api/regions/r/render", "/api/regions/r/evict", AUTH, b"[1]"),
    ("no provider", "/api/providers/nope/inference", "/api/providers/nope/count_tokens", AUTH, TEXT),
    ("bad name", "/api/providers/b@d/inference", "/api/providers/b@d/count_tokens", AUTH, b"{}"),
    ("provider not JSON", "/api/providers/mock/inference", "/api/providers/mock/count_tokens", AUTH, b"{"),
]


@pytest.mark.parametrize(("case", "lane", "router", "headers", "body"), LANE_VS_ROUTER)
def test_a_lane_failure_is_answered_as_the_router_answers_it(
    http: httpx.Client, case: str, lane: str, router: str, headers: dict[str, str], body: bytes
) -> None:
    fast = _answer(http.post(lane, content=body, headers=headers))
    slow = _answer(http.post(router, content=body, headers=headers))
    assert fast[0] >= 400, case
    assert fast == slow, case


def test_a_body_over_the_limit_is_answered_as_the_router_answers_it(http: httpx.Client) -> None:
    big = b'{"content": "' + b"x" * DEFAULT_MAX_BODY_BYTES + b'"}'
    fast = _answer(http.post("/api/regions/r/write", content=big, headers=AUTH))
    slow = _answer(http.post("/api/regions/r/replace", content=big, headers=AUTH))
    assert fast[0] == 413 and fast == slow


def test_the_lane_answers_the_routes(http: httpx.Client) -> None:
    written = http.post("/api/regions/r/write", json={"content": "hello", "tokens": 2}, headers=AUTH)
    assert written.status_code == 200 and written.json()["outcome"] == "accepted"
    rendered = http.post("/api/regions/r/render", json={}, headers=AUTH)
    assert rendered.status_code == 200 and rendered.headers["content-type"] == "application/json"
    assert rendered.json()["system"][0]["text"] == "ok"
    answer = http.post("/api/providers/mock/inference", json=REQUEST, headers=AUTH)
    assert answer.status_code == 200 and answer.json()["content"] == "ok"


def test_other_methods_and_paths_still_reach_the_router(http: httpx.Client) -> None:
    wrong = http.get("/api/regions/r/render", headers=AUTH)
    assert wrong.status_code == 405 and wrong.json() == {"error": "method not allowed"}
    for path in ("/api/regions//render", "/api/regions/r/render/x", "/api/x/r/render"):
        missing = http.post(path, json={}, headers=AUTH)
        assert missing.status_code == 404 and missing.json() == {"error": "no such endpoint"}, path


def _count(http: httpx.Client, kind: str, outcome: str) -> float:
    labels = {"kind": kind, "tenant": "acme", "outcome": outcome}
    for family in text_string_to_metric_families(http.get("/metrics").text):
        for sample in family.samples:
            if sample.name == "rhaipool_calls_total" and sample.labels == labels:
                return float(sample.value)
    return 0.0


def test_lane_calls_are_counted_under_their_operation(http: httpx.Client) -> None:
    kinds = (("render", "ok"), ("write", "ok"), ("inference", "ok"), ("render", "client_error"))
    before = {k: _count(http, *k) for k in kinds}
    http.post("/api/regions/r/render", json={}, headers=AUTH).raise_for_status()
    http.post("/api/regions/r/write", json={"content": "x"}, headers=AUTH).raise_for_status()
    http.post("/api/providers/mock/inference", json=REQUEST, headers=AUTH).raise_for_status()
    assert http.post("/api/regions/nope/render", json={}, headers=AUTH).status_code == 404
    for kind in kinds:
        assert _count(http, *kind) == before[kind] + 1, kind
