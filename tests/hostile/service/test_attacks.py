"""Issue 22's attacks on the service itself, by tenant A, while tenant B renders and runs inferences
alongside: names, budgets, entry bytes, stored scripts, region counts, a quadratic provider script, a
stack attack behind held calls, malformed bodies, and tenant strings that try to reach the log.

Every case runs inside ``arena.alongside``, which asserts that B lost no call, B's p99 stayed within
``max(3 × baseline, baseline + 250 ms)``, the coordinator's memory, database and descriptors stayed
within the folder's bounds (conftest.BOUNDS) at their peak, and ``/healthz`` still answers. Every
answer A gets is checked by ``assert_typed`` (a 4xx/5xx in one JSON line, never a bare 500, the
keep-alive connection kept). test_restart.py restarts the service on the database these attacks left.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from hostile_service import MIB, PONG, Answer, Arena, Attacker, assert_typed, latency_bound, p99

HOOK = 'fn render(ctx) { ctx.entries.map(|e| e.content).reduce(|a, b| a + b, "") }'
ENTRY_QUOTA = 4 * MIB
"""``max_entry_bytes`` (conftest.DEFAULTS)."""
SCRIPT_QUOTA = 1 * MIB
"""``max_script_bytes``; ``max_scripts`` is 16."""
CALL_SECS = 3.0
"""``provider_call_secs``: the wall-clock cap of one provider call."""
SLACK = 2.0
MEGABYTE = 1_000_000
FORGED = "1999-01-01 00:00:00,000 rhaipool ERROR forged line"
"""A whole log line, as a tenant would forge one (the text log's own format)."""


@pytest.fixture(scope="module")
def mallory(arena: Arena) -> Attacker:
    """Tenant A, with a region hook stored."""
    stored = arena.attacker.put_script("region_hook", "plain", HOOK)
    assert stored.status == 200, stored.text
    return arena.attacker


def test_a_300_character_name_is_refused_before_anything_is_stored(arena: Arena, mallory: Attacker) -> None:
    long = "x" * 300
    with arena.alongside("300-character names"):
        error = assert_typed(mallory.put_script("region_hook", long, HOOK), (400,))
        assert "name" in error
        assert_typed(mallory.put_script("provider", long + ".rhai", HOOK), (400,))
        assert_typed(mallory.request("POST", "/api/regions", {"name": long, "script": "plain", "budget": 10}))
        assert_typed(mallory.request("PUT", f"/api/providers/{long}/config", {"base_url": "http://x"}))

    def stored_nowhere() -> None:
        listed = arena.attacker.request("GET", "/api/scripts")
        assert listed.status == 200 and all(len(s["name"]) <= 64 for s in listed.json()["scripts"])
        assert "plain" in {s["name"] for s in listed.json()["scripts"]}

    stored_nowhere()
    arena.after_restart.append(("no 300-character name stored", stored_nowhere))


def test_a_region_budget_of_10_to_the_12_is_refused_by_its_quota(arena: Arena, mallory: Attacker) -> None:
    with arena.alongside("budget 10**12"):
        for persistent in (False, True):
            body = {"name": "huge", "script": "plain", "budget": 10**12, "persistent": persistent}
            error = assert_typed(mallory.request("POST", "/api/regions", body), (413, 422))
            assert "max_region_budget" in error
    assert mallory.request("GET", "/api/regions/huge").status == 404


def test_200_one_megabyte_writes_stop_at_the_entry_quota(arena: Arena, mallory: Attacker) -> None:
    """Unbounded, 200 × 1 MB grew the coordinator by ~200 MiB; here the quota (4 MiB) refuses with 413
    once it is reached, and memory and the database stay within the bounds (checked at their peak)."""
    created = mallory.request(
        "POST", "/api/regions", {"name": "hoard", "script": "plain", "budget": 100_000, "persistent": True}
    )
    assert created.status == 201, created.text
    megabyte = json.dumps({"content": "m" * MEGABYTE, "tokens": 1}).encode()
    accepted = 0
    with arena.alongside("200 x 1 MB writes"):
        for _ in range(200):
            answer = mallory.request("POST", "/api/regions/hoard/write", raw=megabyte)
            if answer.status == 200:
                assert answer.json()["outcome"] == "accepted", answer.text[:300]
                accepted += 1
                continue
            error = assert_typed(answer, (413,))
            assert "max_entry_bytes" in error
    assert accepted == ENTRY_QUOTA // MEGABYTE

    def restored() -> None:
        hoard = arena.attacker.request("GET", "/api/regions/hoard")
        assert hoard.status == 200 and len(hoard.json()["entries"]) == accepted, hoard.text[:300]
        again = arena.attacker.request("POST", "/api/regions/hoard/write", raw=megabyte)
        assert "max_entry_bytes" in assert_typed(again, (413,))

    restored()
    arena.after_restart.append(("A's accepted 1 MB writes, and its quota still full", restored))


STUFFED: dict[str, Callable[[int], dict[str, Any]]] = {
    "tool_calls": lambda i: {
        "kind": "assistant_turn",
        "tool_calls": [{"id": f"c{i}", "name": "n", "arguments": {"a": "t" * MEGABYTE}}],
    },
    "key": lambda i: {"key": f"{i}-" + "k" * MEGABYTE},
    "tool_name": lambda i: {"kind": "tool_result", "tool_name": "n" * MEGABYTE},
    "tool_call_id": lambda i: {"kind": "tool_result", "tool_call_id": "i" * MEGABYTE},
}
"""A megabyte in each field of an entry but its content (which stays empty)."""


def test_a_megabyte_in_any_field_of_an_entry_counts_against_the_entry_quota(arena: Arena) -> None:
    """An entry's key, tool calls, tool name and call id are held and stored like its content: writes
    that put a megabyte in one of them stop at ``max_entry_bytes`` too (counting the content alone, 8 × 1 MB
    in each of the four fields were all accepted under a 4 MiB quota, which showed 0 bytes used)."""
    stuffer = arena.add_tenant("stuffer", "stuffer-token-0c41")
    try:
        assert stuffer.put_script("region_hook", "plain", HOOK).status == 200
        region = {"name": "stuffed", "script": "plain", "budget": 100_000, "persistent": True}
        with arena.alongside("a megabyte in every field of an entry"):
            for field, body in STUFFED.items():
                assert stuffer.request("POST", "/api/regions", region).status == 201
                accepted = 0
                for i in range(8):
                    entry = {"content": "", "tokens": 0, **body(i)}
                    answer = stuffer.request("POST", "/api/regions/stuffed/write", entry)
                    if answer.status == 200:
                        accepted += 1
                        continue
                    assert "max_entry_bytes" in str(assert_typed(answer, (413,))), field
                assert accepted <= ENTRY_QUOTA // MEGABYTE, f"{field}: {accepted} of 8 megabytes accepted"
                (mine,) = stuffer.request("GET", "/api/status").json()["tenants"]
                used = mine["quotas"]["max_entry_bytes"]["used"]
                assert accepted * MEGABYTE <= used <= ENTRY_QUOTA, (field, used)
                assert stuffer.request("DELETE", "/api/regions/stuffed").status == 204
    finally:
        stuffer.close()


def test_script_puts_stop_at_the_script_quotas(arena: Arena, mallory: Attacker) -> None:
    """100 × 100 KiB scripts (unbounded, 400 × 400 KiB made a 157 MiB database) stop at
    ``max_script_bytes``; then 40 small ones stop at ``max_scripts``."""
    big = "// " + "s" * (100 << 10)
    seen: dict[str, int] = {}

    def flood(prefix: str, content: str, count: int, quota: str, status: int) -> None:
        for i in range(count):
            answer = mallory.put_script("region_hook", f"{prefix}{i}", content)
            if answer.status != 200:
                assert quota in assert_typed(answer, (status,))
                seen[quota] = seen.get(quota, 0) + 1
        scripts = mallory.request("GET", "/api/scripts").json()["scripts"]
        assert len(scripts) <= 16
        sizes = [
            mallory.request("GET", f"/api/scripts/{s['kind']}/{s['name']}").json()["content"] for s in scripts
        ]
        assert sum(len(text.encode()) for text in sizes) <= SCRIPT_QUOTA
        for s in scripts:  # room for what comes next
            if s["name"] != "plain":
                assert mallory.request("DELETE", f"/api/scripts/{s['kind']}/{s['name']}").status == 204

    with arena.alongside("many script PUTs"):
        flood("bulk", big, 100, "max_script_bytes", 413)
        flood("small", "fn render(ctx) { 1 }", 40, "max_scripts", 429)
    assert seen.get("max_script_bytes", 0) >= 90 and seen.get("max_scripts", 0) >= 25, seen


DEEP_ARRAY = """
fn initialize(config) { #{} }
fn inference(state, request) { let a = []; for i in 0..150000 { a = [a]; } #{ content: "built" } }
"""


def test_a_150000_deep_array_provider_is_answered_within_its_cap(arena: Arena, mallory: Attacker) -> None:
    """~450 000 operations of quadratic cost: unbounded, 6 such calls killed 18 workers and ran past
    60 s. Each of 4 is answered (a typed error) within the tenant's ``provider_call_secs``."""
    assert mallory.put_script("provider", "deep", DEEP_ARRAY).status == 200
    with arena.alongside("150 000-deep nested array"):
        for _ in range(4):
            started = time.monotonic()
            answer = mallory.request("POST", "/api/providers/deep/inference", PONG)
            assert time.monotonic() - started <= CALL_SECS + SLACK, "past the provider call cap"
            assert_typed(answer)


NAPPER = """
fn initialize(config) { #{} }
fn inference(state, request) { sleep(2); #{ content: "rested" } }
"""
CHAIN = """
fn initialize(config) { #{} }
fn inference(state, request) {
    let f = || 0; for i in 0..90000 { let g = f; f = || g.call() + 1; } #{ content: `${f.call()}` }
}
"""


def test_a_closure_chain_behind_held_provider_calls_kills_nobody_elses_call(
    arena: Arena, mallory: Attacker
) -> None:
    """A holds 12 slow provider calls on the workers, then sends a closure chain (unbounded: the floor
    stack, a SIGSEGV, and B's inference p99 179 → 7 011 ms)."""
    assert mallory.put_script("provider", "napper", NAPPER).status == 200
    assert mallory.put_script("provider", "chain", CHAIN).status == 200
    answers: list[Answer] = []

    def nap(source: str) -> None:
        attacker = Attacker(arena.port, source=source)
        try:
            answers.append(attacker.request("POST", "/api/providers/napper/inference", PONG))
        finally:
            attacker.close()

    with arena.alongside("closure chain behind 12 held calls"):
        holders = [threading.Thread(target=nap, args=(f"127.0.0.{3 + i % 4}",)) for i in range(12)]
        for thread in holders:
            thread.start()
        time.sleep(0.5)
        started = time.monotonic()
        chained = mallory.request("POST", "/api/providers/chain/inference", PONG)
        assert time.monotonic() - started <= CALL_SECS + SLACK
        if chained.status != 200:
            assert_typed(chained)
        for thread in holders:
            thread.join(30)
    assert len(answers) == 12
    for answer in answers:  # A's own calls: answered, or refused by a quota, never a bare 500
        if answer.status != 200:
            assert_typed(answer)


def test_requests_past_the_tenant_connection_quota_are_refused(arena: Arena, mallory: Attacker) -> None:
    """``max_connections = 16``: A's 17th to 22nd requests at once (from four addresses, so no address
    cap is reached) are refused 429 naming the quota; its first 16 are answered."""
    assert mallory.put_script("provider", "napper", NAPPER).status == 200
    answers: list[Answer] = []

    def nap(source: str) -> None:
        attacker = Attacker(arena.port, source=source)
        try:
            answers.append(attacker.request("POST", "/api/providers/napper/inference", PONG))
        finally:
            attacker.close()

    with arena.alongside("22 requests at once"):
        holders = [threading.Thread(target=nap, args=(f"127.0.0.{3 + i % 4}",)) for i in range(22)]
        for thread in holders:
            thread.start()
        for thread in holders:
            thread.join(30)
    refused = [a for a in answers if a.status != 200]
    assert len(answers) == 22 and len(refused) >= 6, [a.status for a in answers]
    for answer in refused:
        assert "max_connections" in str(assert_typed(answer, (429,)))


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


WRITE = "/api/regions/plain1/write"
RENDER = "/api/regions/plain1/render"
INFER = "/api/providers/groq/inference"
MALFORMED: list[tuple[str, str, str, bytes]] = [
    ("deep JSON write", "POST", WRITE, f'{{"content": "x", "key": {deep(100_000)}}}'.encode()),
    ("deep JSON render", "POST", RENDER, f'{{"window": {deep(100_000)}}}'.encode()),
    ("deep JSON inference", "POST", INFER, f'{{"messages": {deep(100_000)}}}'.encode()),
    ("timestamp Infinity", "POST", WRITE, b'{"content": "x", "timestamp": Infinity}'),
    ("timestamp 1e400", "POST", WRITE, b'{"content": "x", "timestamp": 1e400}'),
    ("tool_calls [1]", "POST", WRITE, b'{"content": "x", "tool_calls": [1]}'),
    ("budget 10**30", "POST", "/api/regions",
     b'{"name": "b30", "script": "plain", "budget": 1000000000000000000000000000000, "persistent": true}'),
    ("replace tokens -1", "POST", "/api/regions/plain1/replace", b'{"content": "x", "tokens": -1}'),
    ("lone surrogate write", "POST", WRITE, b'{"content": "a\\ud800b"}'),
    ("surrogate bytes write", "POST", WRITE, b'{"content": "a\xed\xa0\x80b"}'),
    ("lone surrogate script", "PUT", "/api/scripts/region_hook/sur", b'{"content": "// \\udfff"}'),
    ("mistyped key", "POST", RENDER, b'{"stage": "plan"}'),
    ("not an object", "POST", WRITE, b'"content"'),
]  # fmt: skip
"""Each answered 500 with a traceback and a dropped connection before issue 22."""


@pytest.mark.parametrize(("what", "method", "path", "raw"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_body_gets_one_line_4xx(
    arena: Arena, mallory: Attacker, what: str, method: str, path: str, raw: bytes
) -> None:
    if mallory.request("GET", "/api/regions/plain1").status == 404:
        body = {"name": "plain1", "script": "plain", "budget": 1000, "persistent": True}
        assert mallory.request("POST", "/api/regions", body).status == 201
    with arena.alongside(what):
        error = assert_typed(mallory.request(method, path, raw=raw), range(400, 500))
    if what == "mistyped key":
        assert "did you mean 'stage_name'" in str(error), error

    def nothing_stored() -> None:
        region = arena.attacker.request("GET", "/api/regions/plain1")  # it still answers, nothing in it
        assert region.status == 200 and region.json()["entries"] == [], region.text[:300]
        assert arena.attacker.request("GET", "/api/scripts/region_hook/sur").status == 404
        assert arena.attacker.request("GET", "/api/regions/b30").status == 404

    nothing_stored()
    if what == MALFORMED[-1][0]:
        arena.after_restart.append(("nothing of the malformed bodies stored", nothing_stored))


THROWER = """
fn render(ctx) { let s = "t"; while s.len < 450000 { s += s; } s += s.sub_string(0, 400000); throw s; }
"""


def test_a_hook_throwing_900_kb_keeps_the_log_small(arena: Arena, mallory: Attacker) -> None:
    """Unbounded, each render wrote the whole message to the log (879 KiB per render)."""
    assert mallory.put_script("region_hook", "thrower", THROWER).status == 200
    assert (
        mallory.request("POST", "/api/regions", {"name": "loud", "script": "thrower", "budget": 10}).status
        == 201
    )
    before = len(arena.service.log())
    with arena.alongside("900 KB throw"):
        for _ in range(5):
            answer = mallory.request("POST", "/api/regions/loud/render", {})
            assert answer.status == 200 and answer.json()["fallback"] is True, answer.text[:300]
    grown = len(arena.service.log()) - before
    assert grown < 5 * (8 << 10), f"the log grew {grown} bytes for 5 renders"


FORGER = f'fn render(ctx) {{ throw "ok\\n{FORGED}\\r\\n{FORGED}"; }}'


def test_tenant_strings_cannot_forge_log_lines(arena: Arena, mallory: Attacker) -> None:
    """Names with newlines are refused before they reach anything; a thrown message with newlines is
    logged escaped, on its own record's line (the text log, as the service writes by default)."""
    newline = "%0A" + FORGED.replace(" ", "%20")
    assert mallory.put_script("region_hook", "forger", FORGER).status == 200
    with arena.alongside("log forging"):
        for path in (f"/api/scripts/region_hook/a{newline}", f"/api/providers/a{newline}/config"):
            assert_typed(mallory.request("PUT", path, {"content": "x"}), range(400, 500))
        for name in (f"a\n{FORGED}", f"a\r{FORGED}", f"a\u2028{FORGED}"):
            body = {"name": name, "script": "forger", "budget": 10}
            assert_typed(mallory.request("POST", "/api/regions", body), (400,))
        assert (
            mallory.request(
                "POST", "/api/regions", {"name": "forge", "script": "forger", "budget": 10}
            ).status
            == 201
        )
        assert mallory.request("POST", "/api/regions/forge/render", {}).json()["fallback"] is True
    deadline = time.monotonic() + 5
    while "forger" not in arena.service.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    lines = arena.service.log().splitlines()
    assert any("forged line" in line for line in lines), "the hook's failure was not logged at all"
    forged = [line for line in lines if re.match(r"\s*1999-01-01", line)]
    assert not forged, f"a tenant forged log lines: {forged[:2]}"


def test_thousands_of_regions_cost_the_neighbour_nothing(arena: Arena, mallory: Attacker) -> None:
    """A opens its 2 000 regions (its quota) and then some; B's listing and status take as long as
    before: a listing costs the caller's own regions only. (Last in the module: A keeps them.)"""
    paths = ["/api/regions", "/api/status"]
    before = arena.neighbour.time_gets(paths, 30)
    opened = len(mallory.request("GET", "/api/regions").json()["regions"])
    created = 0
    with arena.alongside("2 000 regions"):
        for i in range(2100 - opened):
            answer = mallory.request(
                "POST", "/api/regions", {"name": f"r{i}", "script": "plain", "budget": 10}
            )
            if answer.status == 201:
                created += 1
            else:
                assert "max_regions" in assert_typed(answer, (429,))
    assert len(mallory.request("GET", "/api/regions").json()["regions"]) == 2000
    after = arena.neighbour.time_gets(paths, 30)
    for path in paths:
        assert p99(after[path]) <= latency_bound(p99(before[path])), (
            f"B's GET {path}: p99 {p99(after[path]) * 1000:.1f} ms beside 2 000 regions of A's, "
            f"{p99(before[path]) * 1000:.1f} ms before"
        )
    assert created == 2000 - opened
