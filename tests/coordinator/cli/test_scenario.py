"""``rhaipool test`` (docs/scripts/scenarios.md#the-file) and ``validate --kind region``
(docs/reference/json.md, PG2), through real workers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner

from coordinator._cli import regions as region_cli
from coordinator._cli.region_present import format_result
from coordinator._cli.regions import _run_test, _validate, validate_region
from coordinator._cli.scenario import ScenarioError, load_scenario, run_scenario

if TYPE_CHECKING:
    from region_pool import Pooled

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "regions"


def _scenario(tmp_path: Path, script: str, steps: list[dict[str, Any]], **region: Any) -> Path:
    (tmp_path / "s.rhai").write_text(script)
    doc = {
        "script": "s.rhai",
        "region": {"name": "brain", "budget": 1000, "persistent": False, **region},
        "meta": {
            "stage_name": "plan",
            "stage_iterations": 2,
            "model": "m1",
            "window": {"total_tokens": 50, "max_tokens": 2000},
        },
        "steps": steps,
    }
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(doc))
    return path


def _run(pooled: Pooled, path: Path) -> dict[str, Any]:
    return pooled.run(run_scenario(load_scenario(path), pooled.pool)).to_json()


def test_scenario_output_shapes(pooled: Pooled, tmp_path: Path) -> None:
    script = """
    fn render(ctx) { `${ctx.stage_name}|${ctx.stage_iterations}|${ctx.model}|${ctx.entries.len()}` }
    fn on_write(ctx) {
        if ctx.entry.content == "drop" { false } else if ctx.entry.content == "up" { "UP" } else { () }
    }
    fn on_overflow(ctx) { [0] }
    """
    steps = [
        {"write": {"content": "hi", "kind": "text", "tokens": 5, "key": None}},
        {"write": {"content": "drop", "tokens": 5}},
        {"write": {"content": "up", "tokens": 5}},
        {"render": {}},
        {"write": {"content": "big", "tokens": 995}},
        {"evict": {"needed_tokens": 15}},
        {"replace": {"content": "e"}},
    ]
    out = _run(pooled, _scenario(tmp_path, script, steps))
    assert set(out) == {"steps", "entries", "passed", "failures"} and out["passed"] is True
    s = out["steps"]
    assert s[0] == {
        "op": "write",
        "outcome": "accepted",
        "content": "hi",
        "tokens": 5,
        "dropped_indices": [],
        "error": None,
        "warnings": [],
    }
    assert s[1]["outcome"] == "dropped" and s[1]["content"] is None and s[1]["tokens"] is None
    assert (s[2]["outcome"], s[2]["content"], s[2]["tokens"]) == ("replaced", "UP", 1)
    assert s[3] == {
        "op": "render",
        "system": [
            {"text": "plan|2|m1|2", "cache_hint": "UntilChanged", "volatility": "rewritten", "region": ""}
        ],
        "messages": [],
        "fallback": False,
        "warnings": [],
    }
    assert s[4]["outcome"] == "accepted" and s[4]["dropped_indices"] == [0]
    # the script frees 1 token ("UP"); oldest-first makes up the rest
    assert s[5] == {"op": "evict", "freed": 996, "dropped": ["UP", "big"], "warnings": []}
    assert s[6]["op"] == "replace" and s[6]["outcome"] == "accepted"
    assert out["entries"] == [{"content": "e", "tokens": 1, "key": None, "kind": "text"}]


def test_scenario_typed_entries_round_trip(pooled: Pooled, tmp_path: Path) -> None:
    steps = [
        {
            "write": {
                "content": "",
                "kind": "assistant_turn",
                "tokens": 3,
                "tool_calls": [
                    {"id": "c1", "name": "shell", "arguments": {"command": "ls"}, "thought_signature": "s"}
                ],
            }
        },
        {
            "write": {
                "content": "out",
                "kind": "tool_result",
                "tokens": 2,
                "tool_call_id": "c1",
                "tool_name": "shell",
                "is_error": True,
            }
        },
    ]
    entries = _run(pooled, _scenario(tmp_path, 'fn render(ctx) { "" }', steps))["entries"]
    assert entries == [
        {
            "content": "",
            "tokens": 3,
            "key": None,
            "kind": "assistant_turn",
            "tool_calls": [
                {"id": "c1", "name": "shell", "arguments": {"command": "ls"}, "thought_signature": "s"}
            ],
        },
        {
            "content": "out",
            "tokens": 2,
            "key": None,
            "kind": "tool_result",
            "tool_call_id": "c1",
            "tool_name": "shell",
            "is_error": True,
        },
    ]


def test_pg5_test_uses_hooks_and_stage_meta(pooled: Pooled, tmp_path: Path) -> None:
    path = _scenario(tmp_path, "fn render(ctx) { `<brain iter=${ctx.stage_iterations}>` }", [{"render": {}}])
    doc = json.loads(path.read_text())
    doc["meta"] = {"stage_name": "plan", "stage_iterations": 0, "model": "m1"}
    path.write_text(json.dumps(doc))
    result = pooled.run(run_scenario(load_scenario(path), pooled.pool))
    assert result.steps[0]["system"][0]["text"] == "<brain iter=0>"
    assert [m.content for m in result.requests[0].messages] == ["Begin."]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("script"), "script"),
        (lambda d: d["region"].pop("budget"), "region.budget"),
        (lambda d: d["region"].update(budget=-1), "region.budget"),
        (lambda d: d["steps"].append({"jump": {}}), "unknown step 'jump'"),
        (lambda d: d["steps"].append({"write": {"tokens": 3}}), r"steps\[0\].write.content"),
        (lambda d: d["steps"].append({"write": {"content": "x", "kind": "memo"}}), r"steps\[0\].write.kind"),
        (lambda d: d["steps"].append({"evict": {"needed_tokens": 1.5}}), "needed_tokens"),
        (lambda d: d["steps"].append({"write": {"content": "x"}, "render": {}}), "only key"),
    ],
)
def test_invalid_scenarios_are_refused_before_running(tmp_path: Path, mutate: Any, message: str) -> None:
    path = _scenario(tmp_path, 'fn render(ctx) { "" }', [])
    doc = json.loads(path.read_text())
    mutate(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(ScenarioError, match=message):
        load_scenario(path)


@pytest.mark.parametrize("name", ["brain", "sliding_window", "errors_kept", "hostile"])
def test_examples_run(pooled: Pooled, name: str) -> None:
    result = pooled.run(run_scenario(load_scenario(EXAMPLES / f"{name}.scenario.json"), pooled.pool))
    text = format_result(result)
    assert "what the model would see" in text
    renders = [s for s in result.steps if s["op"] == "render"]
    if name == "hostile":
        assert all(s["fallback"] for s in renders) and any(s["system"] for s in renders)
        assert all(s["warnings"] for s in result.steps if s["op"] == "write")
    else:
        assert not any(s["fallback"] for s in renders) and not any(
            s["outcome"] == "error" for s in result.steps if s["op"] == "write"
        )


def test_brain_example_keeps_errors(pooled: Pooled) -> None:
    result = pooled.run(run_scenario(load_scenario(EXAMPLES / "brain.scenario.json"), pooled.pool))
    assert [e["content"] for e in result.entries] == ["ERROR: test_login failed: expected 200, got 500"]
    first = result.requests[4].messages[0]
    assert isinstance(first.content, str) and first.content.startswith('<context><event kind="user_message">')


def test_validate_region(pooled: Pooled, tmp_path: Path) -> None:
    good = tmp_path / "good.rhai"
    good.write_text('fn render(ctx) { "" } fn on_write(ctx) { true }')
    result = pooled.run(validate_region(good, pooled.pool))
    assert result.to_json() == {
        "valid": True,
        "kind": "region",
        "error": None,
        "metadata": {},
        "functions": [{"name": "on_write", "arity": 1}, {"name": "render", "arity": 1}],
    }
    broken = tmp_path / "broken.rhai"
    broken.write_text("fn render(ctx) {")
    bad = pooled.run(validate_region(broken, pooled.pool))
    assert not bad.valid and bad.error is not None and bad.error.startswith("Script compilation failed: ")
    other = tmp_path / "other.rhai"
    other.write_text("fn other(ctx) { () }")
    missing = pooled.run(validate_region(other, pooled.pool))
    assert not missing.valid and "fn render(ctx)" in (missing.error or "")


def _shared(pooled: Pooled) -> Any:
    @asynccontextmanager
    async def factory() -> AsyncIterator[Any]:
        yield pooled.pool

    return factory


def test_cli_test_json_and_text(pooled: Pooled, capsys: pytest.CaptureFixture[str]) -> None:
    path = EXAMPLES / "hostile.scenario.json"
    assert pooled.run(_run_test([path], True, 5.0, _shared(pooled))) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"scenario", "steps", "entries", "passed", "failures"}
    assert doc["steps"][1]["fallback"] is True
    assert pooled.run(_run_test([path], False, 5.0, _shared(pooled))) == 0
    text = capsys.readouterr().out
    assert "FALLBACK" in text and "! region 'untrusted'" in text and "hostile.rhai" in text


def test_cli_exit_codes(pooled: Pooled, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad_script = _scenario(tmp_path, "fn render(ctx) {", [])
    assert pooled.run(_run_test([bad_script], True, 5.0, _shared(pooled))) == 1
    assert "Script compilation failed" in json.loads(capsys.readouterr().out)["error"]["message"]
    bad_doc = tmp_path / "bad.json"
    bad_doc.write_text("{}")
    assert pooled.run(_run_test([bad_doc], False, 5.0, _shared(pooled))) == 2
    good = tmp_path / "ok.rhai"
    good.write_text('fn render(ctx) { "" }')
    assert pooled.run(_validate(good, False, _shared(pooled))) == 0
    assert "valid region script (render/1)" in capsys.readouterr().out
    (tmp_path / "no.rhai").write_text("fn on_write(ctx) { true }")
    assert pooled.run(_validate(tmp_path / "no.rhai", True, _shared(pooled))) == 1
    assert json.loads(capsys.readouterr().out)["valid"] is False


def test_cli_command_end_to_end_with_its_own_pool() -> None:
    result = CliRunner().invoke(region_cli.test_command, [str(EXAMPLES / "brain.scenario.json"), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["entries"][0]["content"].startswith("ERROR")
