"""Every script of ``tests/hostile/scripts/`` sent through the HTTP API of a real service, as its header
says (a ``region_hook`` opened and rendered, or a ``provider`` asked for an inference), while tenant B
renders and runs inferences alongside (issue 22 point 9).

Each script attacks as a tenant of its own, added through the admin API, so strikes one attack earns
cannot quarantine the next. Each case asserts:

1. the attack ends as its header says, seen through HTTP: a hook's failure is a render answered 200
   with ``fallback: true`` and a warning naming the error class (hooks never fail a request); a script
   that does not compile is stored (``compiles: false``) and its region refused 422; a provider's
   failure is a typed error object (4xx/5xx, never a bare 500, the connection kept) answered within
   the tenant's ``provider_call_secs``; where the header allows a value, it holds nothing secret and
   nothing of B's;
2. B lost no call and its p99 stayed within ``max(3 × baseline, baseline + 250 ms)``;
3. the coordinator's memory, database and descriptors stayed within the folder's bounds, and it
   still answers ``/healthz``.

test_restart.py restarts the service with everything the corpus stored.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from hostile_service import (
    B_ENTRIES,
    OPERATOR_KEY,
    PLAIN,
    PONG,
    SECRET,
    Answer,
    Arena,
    Attacker,
    assert_typed,
)

from ..arena import Hostile, corpus

CORPUS = corpus()
CALL_SECS = 3.0
"""``provider_call_secs`` of every tenant but A (conftest.DEFAULTS): the bound of a provider attack."""
HOOK_SECS = 5.0
"""A region hook's deadline (coordinator.regions.loading.DEFAULT_HOOK_TIMEOUT)."""
SLACK = 2.0
"""What a loaded 2-core machine may add to a deadline before the answer leaves the service."""
ENTRY_POINT = "fn inference(state, request) { #{} }"
SHAPE_REFUSED = "invalid shape"
"""A render's warning when the hook returned something else than a string or a map
(docs/scripts/regions.md#persistent-regions): the value the script built never reaches anyone, which is as
harmless as the header's ``value``."""


def tenant_of(hostile: Hostile) -> tuple[str, str]:
    return f"corpus-{hostile.name}", f"corpus-token-{hostile.name}-e41b"


def provider_source(hostile: Hostile) -> str:
    """The script with ``inference`` calling its attacking function (HTTP reaches only the entry points)."""
    if hostile.call == "inference":
        return hostile.source
    assert ENTRY_POINT in hostile.source, f"{hostile.name}: no plain inference to route through"
    routed = f"fn inference(state, request) {{ #{{ content: `${{{hostile.call}()}}` }} }}"
    return hostile.source.replace(ENTRY_POINT, routed)


def strings_in(value: Any) -> list[str]:
    """Every string inside a JSON value, walked without recursion."""
    found, todo = [], [value]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
    return found


def harmless(hostile: Hostile, value: Any, *, refused: bool = False) -> None:
    """A value the header allows (or an answer that refused the script's value): nothing of the host's
    environment, the operator's key or B's notes."""
    text = "\n".join(strings_in(value))
    assert refused or "value" in hostile.expect, f"expected {hostile.expect}, got a value: {text[:300]!r}"
    for secret in (SECRET, PLAIN, OPERATOR_KEY, *B_ENTRIES):
        assert secret not in text, f"{hostile.name} read {secret!r}: {text[:300]!r}"


def attack_region(attacker: Attacker, hostile: Hostile) -> None:
    stored = attacker.put_script("region_hook", hostile.name, hostile.source)
    assert stored.status == 200 and stored.kept_alive, stored.text[:300]
    created = attacker.request(
        "POST", "/api/regions", {"name": "target", "script": hostile.name, "budget": 1000}
    )
    if hostile.call == "load":
        assert stored.json()["compiles"] is False, stored.text[:300]
        error = assert_typed(created, (422,))
        assert "CompileError" in hostile.expect, error
        return
    assert created.status == 201, created.text[:300]
    started = time.monotonic()
    rendered = attacker.request("POST", "/api/regions/target/render", {})
    assert time.monotonic() - started <= HOOK_SECS + SLACK, f"{hostile.name}: render took too long"
    assert rendered.status == 200 and rendered.kept_alive, rendered.text[:300]
    report = rendered.json()
    if report["fallback"] and SHAPE_REFUSED not in " ".join(report["warnings"]):
        warnings = " ".join(report["warnings"])
        assert any(name in warnings for name in hostile.expect if name != "value"), (
            f"{hostile.name}: expected {hostile.expect}, warned {warnings[:300]!r}"
        )
    harmless(hostile, report, refused=report["fallback"])


def attack_provider(attacker: Attacker, hostile: Hostile) -> None:
    stored = attacker.put_script("provider", hostile.name, provider_source(hostile))
    assert stored.status == 200 and stored.kept_alive, stored.text[:300]
    started = time.monotonic()
    answer: Answer = attacker.request("POST", f"/api/providers/{hostile.name}/inference", PONG)
    elapsed = time.monotonic() - started
    assert elapsed <= CALL_SECS + SLACK, f"{hostile.name}: answered after {elapsed:.1f} s"
    if answer.status == 200:
        harmless(hostile, answer.json())
        return
    error = assert_typed(answer)
    assert {"class", "message", "transient"} <= set(error), error
    harmless_text = answer.text
    for secret in (SECRET, PLAIN, OPERATOR_KEY):
        assert secret not in harmless_text, f"{hostile.name}'s error shows {secret!r}"


@pytest.mark.parametrize("hostile", CORPUS, ids=[h.name for h in CORPUS])
def test_script_through_the_api_fails_only_itself(arena: Arena, hostile: Hostile) -> None:
    attacker = arena.add_tenant(*tenant_of(hostile))
    try:
        with arena.alongside(hostile.name):
            if hostile.kind == "region":
                attack_region(attacker, hostile)
            else:
                attack_provider(attacker, hostile)
    finally:
        attacker.close()
    arena.after_restart.append(
        (f"{hostile.name} still stored for its tenant", lambda: still_stored(arena, hostile))
    )


def still_stored(arena: Arena, hostile: Hostile) -> None:
    attacker = Attacker(arena.port, tenant_of(hostile)[1])
    kind = "region_hook" if hostile.kind == "region" else "provider"
    try:
        answer = attacker.request("GET", f"/api/scripts/{kind}/{hostile.name}")
    finally:
        attacker.close()
    assert answer.status == 200, answer.text[:300]
    assert answer.json()["content"] == (hostile.source if kind == "region_hook" else provider_source(hostile))
