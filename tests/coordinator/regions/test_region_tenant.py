"""A region belongs to a tenant: its compile and hooks run as it, and its warnings name it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from region_pool import Pooled

from coordinator.regions import open_region

RENDER = "fn render(ctx) { ctx.entries.map(|e| e.content) }\n"


@pytest.mark.parametrize("tenant", ["acme", None])
def test_region_warnings_name_the_tenant(
    pooled: Pooled, tmp_path: Path, caplog: pytest.LogCaptureFixture, tenant: str | None
) -> None:
    (tmp_path / "t.rhai").write_text(RENDER + 'fn on_write(ctx) { throw "refused" }')
    options = {} if tenant is None else {"tenant": tenant}
    region = pooled.run(open_region(pooled.pool, "brain", "t.rhai", budget=10, base_dir=tmp_path, **options))
    assert region.tenant == (tenant or "default")
    with caplog.at_level(logging.WARNING, logger="rhaipool.regions"):
        report = pooled.run(region.write("hi", 1))
    assert report.warnings and "refused" in report.warnings[0].cause
    records = [r for r in caplog.records if r.name == "rhaipool.regions"]
    assert records and all(getattr(r, "tenant", None) == region.tenant for r in records)
