"""The getting-started region example works as the page shows it: it validates, and its scenario's
expectations hold when replayed through a real sandboxed pool."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from coordinator._cli.main import main

PAGE = Path(__file__).resolve().parents[2] / "docs" / "getting-started" / "regions.md"


def test_the_region_walkthrough_runs_as_written(tmp_path: Path) -> None:
    blocks = dict(re.findall(r"```(js|json)\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL))
    (tmp_path / "notes.rhai").write_text(blocks["js"])
    (tmp_path / "notes.scenario.json").write_text(blocks["json"])
    runner = CliRunner()
    valid = runner.invoke(main, ["validate", str(tmp_path / "notes.rhai")], catch_exceptions=False)
    assert valid.exit_code == 0, valid.output
    run = runner.invoke(main, ["test", str(tmp_path / "notes.scenario.json")], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    assert "expectations: passed" in run.output and "1. ship on Friday" in run.output
