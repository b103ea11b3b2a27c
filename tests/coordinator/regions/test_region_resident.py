"""Resident entries (issue 4 point 7): a pool-backed region keeps its entries in the worker.

Every test runs the same operations on two regions of one script in a real
pool -- one resident (the default), one shipping every entry on every call --
and requires byte-identical reports from both, and that the resident one did
ship deltas.  ``entry_delta`` is checked exhaustively against random edits.
"""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING, Any

import pytest

from coordinator.regions import Region, RegionLoader
from coordinator.regions.loading import PoolHookRunner
from coordinator.regions.model import ToolCall
from coordinator.regions.resident import ResidentEntries, entry_delta

if TYPE_CHECKING:
    from region_pool import Pooled

SCRIPT = r"""
fn render(ctx) {
    let out = `${ctx.region}|${ctx.window}|${ctx.stage_name}` + "\n";
    for e in ctx.entries { out += `${e}` + "\n"; }
    out
}
fn on_overflow(ctx) {
    let drop = [];
    let freed = 0;
    let i = 0;
    for e in ctx.entries {
        if freed >= ctx.needed_tokens { break; }
        if !e.content.contains("keep") { drop.push(i); freed += e.tokens; }
        i += 1;
    }
    drop
}
"""


def resident_of(region: Region) -> ResidentEntries:
    runner = region.runner
    assert isinstance(runner, PoolHookRunner) and runner.resident is not None
    return runner.resident


def twins(
    pooled: Pooled, *, budget: int = 200, tenant: str | None = None, name: str = "brain"
) -> list[Region]:
    """A resident region and a ship-all one: same script, name, budget and a fixed clock."""
    path = pooled.write_script(SCRIPT)
    made = []
    for resident in (True, False):
        loader = RegionLoader(pooled.pool, timeout=10.0, tenant=tenant, resident=resident)
        made.append(pooled.run(loader.region(name, str(path), budget=budget, clock=lambda: 1_700_000_000)))
    assert made[1].runner is not None and getattr(made[1].runner, "resident", 0) is None
    return made


async def both(regions: list[Region], op: str, *args: Any, **kwargs: Any) -> Any:
    """Run one operation on every region; every report must be equal; returns the first."""
    reports = [await getattr(region, op)(*args, **kwargs) for region in regions]
    assert all(report == reports[0] for report in reports[1:]), (op, reports)
    assert all(region.entries == regions[0].entries for region in regions[1:])
    return reports[0]


async def check_render(regions: list[Region]) -> str:
    report = await both(regions, "render")
    assert not report.fallback, report.warnings
    text: str = report.output.system[0].text if report.output.system else ""
    assert text.count("\n") == len(regions[0].entries) + 1  # every entry reached the script
    return text


async def random_step(regions: list[Region], rng: random.Random, step: int) -> None:
    roll = rng.random()
    if roll < 0.45:
        word = rng.choice(["keep", "note", "fact"])
        await both(regions, "write", f"{word} {step}", rng.randint(1, 30))
    elif roll < 0.55:
        call = ToolCall(f"c{step}", "search", {"q": step, "deep": [1, None, 2.5]})
        await both(regions, "write", f"turn {step}", 5, kind="assistant_turn", tool_calls=(call,))
        await both(regions, "write", "result", 4, kind="tool_result", tool_call_id=f"c{step}",
                   tool_name="search", is_error=step % 2 == 0)  # fmt: skip
    elif roll < 0.62:
        await both(regions, "write", f"keyed {step}", 3, key=f"k{step % 3}", tainted=True)
    elif roll < 0.70:
        await both(regions, "evict", rng.randint(1, 60))
    elif roll < 0.76:
        await both(regions, "replace", f"replacement {step}", rng.randint(1, 40))
    elif roll < 0.80:
        for region in regions:
            region.clear()
    elif roll < 0.85:
        await both(regions, "write", "too big to ever fit", 10_000)


def test_random_writes_replaces_clears_overflows_and_evictions_match(pooled: Pooled) -> None:
    regions = twins(pooled)

    async def go() -> None:
        rng = random.Random(7)
        for step in range(260):
            await random_step(regions, rng, step)
            await check_render(regions)

    pooled.run(go())
    state = resident_of(regions[0])
    assert state.sent_delta > 200 and state.sent_whole >= 1 and state.version > 100


def test_overflow_drops_from_the_middle_and_the_oldest(pooled: Pooled) -> None:
    regions = twins(pooled, budget=40)

    async def go() -> list[Any]:
        dropped = []
        for n, content in enumerate(["keep a", "b", "keep c", "d", "e", "keep f", "g", "h"]):
            report = await both(regions, "write", content, 10)
            dropped.append(list(report.dropped_indices))
            await check_render(regions)
            assert n < 4 or len(regions[0].entries) <= 4
        evicted = await both(regions, "evict", 25)
        dropped.append([entry.content for entry in evicted.dropped])
        await check_render(regions)
        return dropped

    dropped = pooled.run(go())
    assert dropped[4] == [1] and dropped[5] == [2]  # on_overflow skipped the "keep" entries
    assert dropped[-1], dropped


def test_unchanged_renders_ship_nothing_and_stay_on_one_worker(pooled: Pooled) -> None:
    regions = twins(pooled, budget=10_000)

    async def go() -> None:
        for i in range(50):
            await both(regions, "write", f"fact {i}", 7)
        for _ in range(10):
            await check_render(regions)
        await both(regions, "write", "one more", 7)
        await check_render(regions)

    pooled.run(go())
    state = resident_of(regions[0])
    assert state.sent_whole == 1 and state.resends == 0 and len(state.holders) == 1
    assert state.sent_delta == 10 and state.version == 2  # nine empty deltas keep v1; "one more" makes v2


def test_many_regions_overflow_the_worker_store_and_stay_correct(pooled: Pooled) -> None:
    count = 2 * 256 * max(1, pooled.pool.config.worker_count) + 40  # more than every worker's store holds
    path = pooled.write_script(SCRIPT)
    loader = RegionLoader(pooled.pool, timeout=10.0)

    async def go() -> list[Region]:
        regions = [await loader.region(f"r{i}", str(path), budget=1000) for i in range(count)]
        for lap in range(2):
            for i, region in enumerate(regions):
                await region.write(f"lap {lap} of region {i}", 2)
                lines = (await region.render()).output.system[0].text.split("\n")[1:-1]
                assert len(lines) == lap + 1, (i, lap, lines)
                assert all(f'"lap {k} of region {i}"' in line for k, line in enumerate(lines)), (i, lines)
        return regions

    regions = pooled.run(go(), timeout=240)
    assert sum(resident_of(r).resends for r in regions) > count // 2  # the LRU store really lost lists


def test_tenants_never_see_each_others_entries(pooled: Pooled) -> None:
    acme = twins(pooled, tenant="acme")
    globex = twins(pooled, tenant="globex")

    async def go() -> None:
        for i in range(12):
            await both(acme, "write", f"acme secret {i}", 3)
            await both(globex, "write", f"globex note {i}", 4)
            assert "globex" not in await check_render(acme)
            assert "acme" not in await check_render(globex)

    pooled.run(go())
    assert resident_of(acme[0]).key != resident_of(globex[0]).key


def test_a_guessed_key_from_another_tenant_reaches_nothing(pooled: Pooled) -> None:
    """The worker scopes lists by tenant: a delta under a stolen key and version is refused."""
    acme = twins(pooled, tenant="acme")
    globex = twins(pooled, tenant="globex")

    async def go() -> str:
        await both(acme, "write", "acme secret", 3)
        await check_render(acme)
        await both(globex, "write", "globex note", 4)
        victim, thief = resident_of(acme[0]), resident_of(globex[0])
        thief.key, thief.version, thief.holders = victim.key, victim.version, dict(victim.holders)
        thief.history = {victim.version: []}  # believes the worker holds it empty: sends a pure append
        return await check_render(globex)

    text = pooled.run(go())
    assert "acme" not in text and "globex note" in text
    assert resident_of(globex[0]).resends == 1  # the worker answered ResidentMissing, then got it whole


def test_concurrent_regions_stay_correct(pooled: Pooled) -> None:
    pairs = [twins(pooled, name=f"c{i}") for i in range(6)]

    async def one(regions: list[Region], i: int) -> None:
        for step in range(15):
            await both(regions, "write", f"c{i} step {step}", 5 + i)
            await check_render(regions)

    async def go() -> None:
        await asyncio.gather(*(one(regions, i) for i, regions in enumerate(pairs)))

    pooled.run(go())


def test_equal_but_different_values_are_resent(pooled: Pooled) -> None:
    """``1 == 1.0 == True`` in Python, not in a script: entries are matched by identity."""
    regions = twins(pooled, budget=1000)

    async def go() -> list[str]:
        seen = []
        for value in (1, 1.0, True, 1):
            for region in regions:
                region.clear()
            call = ToolCall("c", "calc", {"x": value})
            await both(regions, "write", "turn", 5, kind="assistant_turn", tool_calls=(call,))
            seen.append(await check_render(regions))
        return seen

    seen = pooled.run(go())
    assert len(set(seen)) == 3 and seen[0] == seen[3]
    assert entry_delta([{"x": 1}], [{"x": 1.0}]) == ([0], 0)


def test_a_script_mutating_ctx_entries_does_not_touch_the_kept_list(pooled: Pooled) -> None:
    path = pooled.write_script(
        'fn render(ctx) { let s = ""; for e in ctx.entries { s += e.content; } '
        'ctx.entries[0].content = "mutated"; ctx.entries.push(#{content: "pushed"}); '
        "ctx.entries.clear(); s }"
    )
    regions = []
    for resident in (True, False):
        loader = RegionLoader(pooled.pool, timeout=10.0, resident=resident)
        regions.append(pooled.run(loader.region("m", str(path), budget=1000)))

    async def go() -> list[str]:
        texts = []
        for i in range(4):
            await both(regions, "write", f"<{i}>", 1)
            report = await both(regions, "render")
            texts.append(report.output.system[0].text)
        return texts

    assert pooled.run(go()) == ["<0>", "<0><1>", "<0><1><2>", "<0><1><2><3>"]


def test_keys_are_random_per_region_never_from_content() -> None:
    keys = {ResidentEntries().key for _ in range(100)}
    assert len(keys) == 100 and all(len(key) >= 43 for key in keys)


@pytest.mark.parametrize("seed", range(40))
def test_entry_delta_rebuilds_any_edit(seed: int) -> None:
    rng = random.Random(seed)
    pool = [object() for _ in range(60)]
    old = rng.sample(pool, rng.randint(0, 30))
    new = list(old)
    for _ in range(rng.randint(0, 6)):
        edit = rng.random()
        if edit < 0.3 and new:
            del new[: rng.randint(1, len(new))]
        elif edit < 0.5 and new:
            del new[rng.randrange(len(new))]
        elif edit < 0.6:
            new = []
        elif edit < 0.7 and len(new) > 1:
            rng.shuffle(new)
        elif edit < 0.8 and new:
            new.append(rng.choice(new))  # a duplicate of a kept object
        else:
            new.extend(rng.sample(pool, rng.randint(1, 5)))
    drop, start = entry_delta(old, new)
    assert drop == sorted(set(drop)) and all(0 <= k < len(old) for k in drop)
    rebuilt = [x for k, x in enumerate(old) if k not in set(drop)] + new[start:]
    assert rebuilt == new
    if new[: len(old)] == old:
        assert (drop, start) == ([], len(old))
