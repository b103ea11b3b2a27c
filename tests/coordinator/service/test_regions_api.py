"""Region operations through the service: create from a stored script, write, render, evict, assemble."""

from __future__ import annotations

import httpx
import pytest
from service_support import TOKENS, ServiceProcess

from coordinator.client import ServiceError

HOOK = """
fn render(ctx) { `<${ctx.region.name}> ` + ctx.entries.map(|e| e.content).reduce(|a, b| a + "," + b, "") }
fn on_write(ctx) {
    if ctx.entry.content == "drop me" { false } else if ctx.entry.content == "one" { "ONE" } else { true }
}
fn on_overflow(ctx) { if ctx.entries.len() > 1 { [0, 1] } else { [0] } }
"""


@pytest.fixture(scope="module")
def acme(service: ServiceProcess) -> object:
    with service.client("acme") as c:
        c.put_script("region_hook", "upper", HOOK)
        c.create_region("notes", script="upper", budget=30)
        yield c


def test_write_render_evict(acme: object) -> None:
    c = acme
    assert c.write("notes", "one", tokens=10)["outcome"] == "replaced"  # on_write rewrote it
    assert c.write("notes", "drop me", tokens=1)["outcome"] == "dropped"
    c.write("notes", "two", tokens=10)
    report = c.render("notes", stage_name="plan")
    assert report["system"][0]["text"] == "<notes> ,ONE,two" and report["fallback"] is False
    over = c.write("notes", "three", tokens=25)  # over budget: on_overflow drops indices 0 and 1
    assert over["outcome"] == "accepted" and over["dropped_indices"] == [0, 1]
    assert [e["content"] for e in c.get_region("notes")["entries"]] == ["three"]
    evicted = c.evict("notes", 5)
    assert evicted["freed"] == 25 and evicted["dropped"] == ["three"]
    listed = {r["name"]: r for r in c.list_regions()["regions"]}
    assert listed["notes"]["budget"] == 30


def test_assemble_window(acme: object) -> None:
    c = acme
    c.create_region("second", script="upper", budget=100)
    c.write("second", "hello", tokens=3)
    out = c.assemble(["second"], 1000, stage_name="plan", model="m1")
    assert any("hello" in block["text"] for block in out["request"]["system"])
    with pytest.raises(ServiceError) as missing:
        c.assemble(["second", "nope"], 1000)
    assert missing.value.status == 404


def test_create_errors(acme: object) -> None:
    c = acme
    cases = [
        ({"name": "x", "script": "missing", "budget": 10}, 404),
        ({"name": "notes", "script": "upper", "budget": 10}, 409),
        ({"name": "x", "script": "upper", "budget": -1}, 400),
        ({"name": "x", "script": "upper", "budget": "10"}, 400),
        ({"name": "x", "script": "../upper", "budget": 10}, 400),
        ({"name": "x", "script": "upper", "budget": 10, "admission": "maybe"}, 400),
    ]
    for body, status in cases:
        with pytest.raises(ServiceError) as refused:
            c._call("POST", "/api/regions", body)
        assert refused.value.status == status, body
    c.put_script("region_hook", "norender", "fn other(ctx) { 1 }")
    with pytest.raises(ServiceError) as broken:
        c.create_region("y", script="norender", budget=10)
    assert broken.value.status == 422 and "fn render(ctx)" in broken.value.message


def test_bad_entries_are_400(acme: object) -> None:
    for body in (
        {"content": 5},
        {"content": "x", "tokens": -1},
        {"content": "x", "kind": "weird"},
        {"tokens": 1},
    ):
        with pytest.raises(ServiceError) as refused:
            acme._call("POST", "/api/regions/notes/write", body)
        assert refused.value.status == 400, body


def test_another_tenant_cannot_touch_a_region_through_any_endpoint(
    service: ServiceProcess, acme: object
) -> None:
    before = acme.get_region("notes")["entries"]
    headers = {"Authorization": f"Bearer {TOKENS['globex']}"}
    for method, path, body in (
        ("GET", "/api/regions/notes", None),
        ("DELETE", "/api/regions/notes", None),
        ("POST", "/api/regions/notes/write", {"content": "intruder", "tokens": 1}),
        ("POST", "/api/regions/notes/replace", {"content": "intruder"}),
        ("POST", "/api/regions/notes/render", {}),
        ("POST", "/api/regions/notes/evict", {"needed_tokens": 100}),
        ("POST", "/api/window/assemble", {"regions": ["notes"], "max_tokens": 100}),
        ("POST", "/api/regions", {"name": "stolen", "script": "upper", "budget": 10}),  # acme's script
    ):
        r = httpx.request(method, service.url + path, json=body, headers=headers, timeout=30)
        assert r.status_code == 404, (method, path, r.text)
    with service.client("globex") as globex:
        assert globex.list_regions() == {"regions": []}
    assert acme.get_region("notes")["entries"] == before


def test_delete_region(acme: object) -> None:
    acme.create_region("temp", script="upper", budget=10)
    assert acme.delete_region("temp") is None
    with pytest.raises(ServiceError) as gone:
        acme.render("temp")
    assert gone.value.status == 404


def test_bad_entry_values_are_400_and_the_region_stays_readable(
    service: ServiceProcess, acme: object
) -> None:
    before = acme.get_region("notes")["entries"]
    for raw in (
        b'{"content": "x", "timestamp": Infinity}',
        b'{"content": "x", "timestamp": 9223372036854775808}',
        b'{"content": "x", "tool_calls": [1]}',
        b'{"content": "x", "tool_calls": [{"id": "a", "name": "b", "arguments": NaN}]}',
        b'{"content": "\\ud800"}',
        b'{"content": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    ):
        r = httpx.post(
            service.url + "/api/regions/notes/write", content=raw,
            headers={"Authorization": f"Bearer {TOKENS['acme']}"}, timeout=30,
        )  # fmt: skip
        assert r.status_code == 400, (raw[:60], r.text)
        assert "\n" not in r.json()["error"]
    assert acme.get_region("notes")["entries"] == before


def test_a_mistyped_render_key_is_refused_with_a_suggestion(acme: object) -> None:
    with pytest.raises(ServiceError) as refused:
        acme._call("POST", "/api/regions/notes/render", {"stage": "plan"})
    assert refused.value.status == 400
    assert refused.value.message == "unknown field 'stage': did you mean 'stage_name'?"


@pytest.mark.parametrize("name", ["a b", "x" * 65, "a/b", "..", ""])
def test_region_names_follow_the_name_rule(acme: object, name: str) -> None:
    with pytest.raises(ServiceError) as refused:
        acme._call("POST", "/api/regions", {"name": name, "script": "upper", "budget": 10})
    assert refused.value.status == 400 and "Invalid region name" in refused.value.message


def test_a_budget_past_64_bits_is_refused_before_storing(acme: object) -> None:
    for budget in (10**30, 2**63):
        with pytest.raises(ServiceError) as refused:
            body = {"name": "huge", "script": "upper", "budget": budget, "persistent": True}
            acme._call("POST", "/api/regions", body)
        assert refused.value.status == 400 and "budget" in refused.value.message
    assert "huge" not in {r["name"] for r in acme.list_regions()["regions"]}


def test_replace_with_negative_tokens_is_400(acme: object) -> None:
    with pytest.raises(ServiceError) as refused:
        acme._call("POST", "/api/regions/notes/replace", {"content": "x", "tokens": -1})
    assert refused.value.status == 400 and "tokens" in refused.value.message
