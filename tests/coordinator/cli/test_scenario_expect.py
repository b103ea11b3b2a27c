"""Scenarios that can fail: expectations per step, exit codes, directories,
unknown keys (issue 14, point 4)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from coordinator._cli.main import main

SCRIPT = 'fn render(ctx) { ctx.entries.map(|e| e.content).reduce(|a, b| a + "|" + b, "") }\n'


def _scenario(tmp_path: Path, steps: list[Any], name: str = "s.scenario.json") -> Path:
    (tmp_path / "r.rhai").write_text(SCRIPT)
    path = tmp_path / name
    path.write_text(json.dumps({"script": "r.rhai", "region": {"name": "b", "budget": 100}, "steps": steps}))
    return path


def _run(*args: str) -> Any:
    return CliRunner().invoke(main, ["test", *args], catch_exceptions=False)


def test_expectations_that_hold_exit_0(tmp_path: Path) -> None:
    steps = [
        {
            "write": {
                "content": "a",
                "tokens": 3,
                "expect": {"outcome": "accepted", "entries": 1, "tokens": 3},
            }
        },
        {"render": {"expect": {"contains": "a", "fallback": False}}},
    ]
    result = _run(str(_scenario(tmp_path, steps)))
    assert result.exit_code == 0, result.output
    assert "expectations: passed" in result.output


def test_a_failed_expectation_exits_1_with_a_diff(tmp_path: Path) -> None:
    steps = [
        {"write": {"content": "a", "tokens": 3}},
        {"render": {"expect": {"equals": "b", "fallback": True}}},
    ]
    path = _scenario(tmp_path, steps)
    result = _run(str(path))
    assert result.exit_code == 1
    assert "FAILED step [2] render: expect.equals" in result.output and "- b" in result.output
    doc = json.loads(_run(str(path), "--json").stdout)
    assert doc["passed"] is False and [f["key"] for f in doc["failures"]] == ["equals", "fallback"]


def test_a_directory_runs_every_scenario(tmp_path: Path) -> None:
    _scenario(tmp_path, [{"render": {"expect": {"fallback": False}}}], "a.scenario.json")
    _scenario(tmp_path, [{"render": {"expect": {"contains": "nope"}}}], "b.scenario.json")
    result = _run(str(tmp_path))
    assert result.exit_code == 1 and "1 of 2 scenario(s) passed" in result.output


def test_unknown_keys_are_errors_with_a_suggestion(tmp_path: Path) -> None:
    result = _run(str(_scenario(tmp_path, [{"write": {"content": "x", "kidn": "text"}}])), "--json")
    assert result.exit_code == 2
    assert "unknown key 'kidn' (did you mean 'kind'?)" in json.loads(result.stdout)["error"]["message"]
    result = _run(str(_scenario(tmp_path, [{"render": {"stage_nmae": "x"}}])))
    assert result.exit_code == 2 and "did you mean 'stage_name'?" in result.stderr
