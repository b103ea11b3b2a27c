"""Load-time checks of region scripts (docs/scripts/regions.md#loading; cases RA1-RA10), compiled in real
sandboxed workers."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from coordinator.regions import RegionLoader, RegionLoadError, ScriptInfo

if TYPE_CHECKING:
    from region_pool import Pooled


def _load(pooled: Pooled, source: str) -> ScriptInfo:
    path = pooled.write_script(source)
    return pooled.run(RegionLoader(pooled.pool).load_script("brain", str(path)))


def _load_error(pooled: Pooled, source: str) -> str:
    with pytest.raises(RegionLoadError) as info:
        _load(pooled, source)
    return str(info.value)


def test_ra1_render_only_compiles(pooled: Pooled) -> None:
    info = _load(pooled, 'fn render(ctx) { "out" }')
    assert (info.has_on_write, info.has_on_overflow) == (False, False)
    assert len(info.sha256) == 64


def test_ra2_optional_hooks_detected(pooled: Pooled) -> None:
    info = _load(pooled, 'fn render(ctx) { "" } fn on_write(ctx) { true } fn on_overflow(ctx) { [] }')
    assert (info.has_on_write, info.has_on_overflow) == (True, True)


def test_ra3_syntax_error(pooled: Pooled) -> None:
    path = pooled.write_script("fn render(ctx) {")
    with pytest.raises(RegionLoadError) as info:
        pooled.run(RegionLoader(pooled.pool).load_script("brain", str(path)))
    message = str(info.value)
    assert message.startswith(
        "region 'brain': custom region script failed to compile: Script compilation failed"
    )
    assert str(path) in message


def test_ra4_missing_render(pooled: Pooled) -> None:
    message = _load_error(pooled, "fn on_write(ctx) { true }")
    assert "Script validation failed" in message and "script must define fn render(ctx)" in message


def test_ra5_render_arity(pooled: Pooled) -> None:
    message = _load_error(pooled, 'fn render(a, b) { "" }')
    assert "fn render must take exactly one parameter (ctx), found 2" in message


def test_ra6_optional_hook_arity(pooled: Pooled) -> None:
    on_write = _load_error(pooled, 'fn render(ctx) { "" } fn on_write() { true }')
    assert "fn on_write must take exactly one parameter (ctx), found 0" in on_write
    on_overflow = _load_error(pooled, 'fn render(ctx) { "" } fn on_overflow(a, b) { [] }')
    assert "fn on_overflow must take exactly one parameter (ctx), found 2" in on_overflow


def test_ra7_eval_rejected_at_compile(pooled: Pooled) -> None:
    message = _load_error(pooled, 'fn render(ctx) { eval("1+1") }')
    assert "Script compilation failed" in message and "eval" in message


def test_ra8_missing_file_then_created(pooled: Pooled, tmp_path: Path) -> None:
    loader = RegionLoader(pooled.pool, base_dir=tmp_path)
    with pytest.raises(RegionLoadError, match="region 'brain': cannot read custom region script"):
        pooled.run(loader.load_script("brain", "hooks/brain.rhai"))
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "brain.rhai").write_text('fn render(ctx) { "ok" }')
    assert pooled.run(loader.load_script("brain", "hooks/brain.rhai")).path == "hooks/brain.rhai"


def test_ra9_path_escaping_the_agent_dir(pooled: Pooled, tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    agent.mkdir()
    (tmp_path / "outside.rhai").write_text('fn render(ctx) { "ok" }')
    loader = RegionLoader(pooled.pool, base_dir=agent)
    with pytest.raises(RegionLoadError, match="resolves outside the blueprint's directory"):
        pooled.run(loader.load_script("brain", "../outside.rhai"))


def test_ra10_custom_kind_without_script(pooled: Pooled, tmp_path: Path) -> None:
    loader = RegionLoader(pooled.pool, base_dir=tmp_path)
    for script in ("", "  "):
        with pytest.raises(
            RegionLoadError, match=r'region \'brain\': kind = "custom" requires script = "<path>.rhai"'
        ):
            pooled.run(loader.load_script("brain", script))


def test_regions_sharing_a_script_share_one_load(pooled: Pooled, tmp_path: Path) -> None:
    (tmp_path / "shared.rhai").write_text("fn render(ctx) { ctx.region.name }")
    loader = RegionLoader(pooled.pool, base_dir=tmp_path)
    first = pooled.run(loader.region("one", "shared.rhai", budget=10))
    (tmp_path / "shared.rhai").write_text("this no longer compiles {")
    second = pooled.run(loader.region("two", "shared.rhai", budget=10))
    assert first.script == second.script
    assert pooled.run(second.render()).system[0].text == "two"


def test_edits_take_effect_only_on_the_next_load(pooled: Pooled, tmp_path: Path) -> None:
    (tmp_path / "b.rhai").write_text('fn render(ctx) { "v1" }')
    region = pooled.run(RegionLoader(pooled.pool, base_dir=tmp_path).region("brain", "b.rhai", budget=10))
    (tmp_path / "b.rhai").write_text('fn render(ctx) { "v2" }')
    assert pooled.run(region.render()).system[0].text == "v1"
    fresh = pooled.run(RegionLoader(pooled.pool, base_dir=tmp_path).region("brain", "b.rhai", budget=10))
    assert pooled.run(fresh.render()).system[0].text == "v2"


def test_a_closed_pool_is_the_hosts_error_not_a_fallback(tmp_path: Path) -> None:
    import asyncio

    from coordinator._core.pool import Pool
    from coordinator.errors import PoolClosed

    (tmp_path / "b.rhai").write_text('fn render(ctx) { "x" }')

    async def scenario() -> None:
        async with Pool() as pool:
            region = await RegionLoader(pool, base_dir=tmp_path).region("brain", "b.rhai", budget=10)
            assert (await region.render()).system[0].text == "x"
        with pytest.raises(PoolClosed):
            await region.render()

    asyncio.run(scenario())
