"""Two tenant resources the audit of the service found unbounded, each now under its quota: each test is
the attack, and fails without the quota.

- Answers kept for ``Idempotency-Key`` (``idempotency.py``, ``storage.py``; ``max_idempotency_bytes``):
  unbounded, 40 keyed renders of a region holding 1 MB stored 42 MB for 24 h.
- A tenant's own provider tables (``PUT /api/providers/{name}/config``, ``state.py``;
  ``max_provider_tables``, ``max_provider_table_bytes``): unbounded, 30 tables of 1 MB added 33 MB to
  the database and 33 MiB to the coordinator's memory.

Each test measures its own growth (not through ``arena.alongside``, whose bounds are the module's: one
test's leftovers would fail the next whatever it did). Before test_restart.py, which restarts on them.
"""

from __future__ import annotations

import uuid

from hostile_service import MIB, Arena, assert_typed

HOOK = 'fn render(ctx) { ctx.entries.map(|e| e.content).reduce(|a, b| a + b, "") }'
MEGABYTE = 1_000_000
GROWTH = 8 * MIB
"""What 40 megabyte-sized requests may grow the database by: twice the tenant's 4 MiB ``max_entry_bytes``
(conftest.DEFAULTS), the most any of its other quotas lets it store."""

KEPT_GROWTH = 2 * 4 * MIB + 4 * MIB + 2 * MEGABYTE
"""What 40 keyed renders of a 1 MB region may grow the database by: the tenant's 4 MiB
``max_idempotency_bytes`` (conftest.DEFAULTS) in the database file and as much again in pages the
dropped bodies freed (SQLite reuses them, never shrinks the file), SQLite's WAL up to its automatic
checkpoint (1 000 pages of 4 KiB), and the one or two answers being written. Unbounded: 42 MB."""


def test_answers_kept_for_idempotency_keys_are_bounded_per_tenant(arena: Arena) -> None:
    keyed = arena.add_tenant("keyed", "keyed-token-3e9a")
    try:
        assert keyed.put_script("region_hook", "echo", HOOK).status == 200
        assert (
            keyed.request("POST", "/api/regions", {"name": "echo", "script": "echo", "budget": 10}).status
            == 201
        )
        write = keyed.request("POST", "/api/regions/echo/write", {"content": "m" * MEGABYTE, "tokens": 1})
        assert write.status == 200, write.text[:300]
        before = arena.usage().disk
        for _ in range(40):
            answer = keyed.request(
                "POST", "/api/regions/echo/render", {}, headers={"Idempotency-Key": uuid.uuid4().hex}
            )
            if answer.status != 200:
                assert_typed(answer)
        grown = arena.usage().disk - before
        assert grown <= KEPT_GROWTH, f"40 keyed renders grew the database by {grown / MIB:.1f} MiB"
    finally:
        keyed.close()


def test_a_tenants_provider_tables_are_bounded(arena: Arena) -> None:
    tabled = arena.add_tenant("tabled", "tabled-token-77c2")
    try:
        before = arena.usage()
        refused = 0
        for i in range(40):
            table = {"base_url": "https://example.com", "blob": "b" * MEGABYTE}
            answer = tabled.request("PUT", f"/api/providers/t{i}/config", table)
            if answer.status != 200:
                assert_typed(answer, (413, 429))
                refused += 1
        now = arena.usage()
        assert refused, "40 provider tables of 1 MB each were all stored"
        assert now.disk - before.disk <= GROWTH, f"the database grew {(now.disk - before.disk) / MIB:.1f} MiB"
        assert now.rss - before.rss <= GROWTH, f"the coordinator grew {(now.rss - before.rss) / MIB:.1f} MiB"
    finally:
        tabled.close()
