"""validate infers --kind, lists named functions only, checks whole configs;
doctor checks -m (issue 14, point 3)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from coordinator._cli.main import main

PROVIDER = 'fn initialize(c) { #{} }\nfn inference(s, r) { let f = |x| x; #{content: f.call("ok")} }\n'


def _run(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_kind_is_inferred_and_closures_are_not_functions(tmp_path: Path) -> None:
    script = tmp_path / "p.rhai"
    script.write_text(PROVIDER)
    doc = json.loads(_run("validate", str(script), "--json").stdout)
    assert doc["kind"] == "provider" and doc["valid"] is True
    assert [f["name"] for f in doc["functions"]] == ["inference", "initialize"] or {
        f["name"] for f in doc["functions"]
    } == {"inference", "initialize"}
    region = tmp_path / "r.rhai"
    region.write_text('fn render(ctx) { let f = |x| x; f.call("") }')
    doc = json.loads(_run("validate", str(region), "--json").stdout)
    assert doc["kind"] == "region" and doc["functions"] == [{"name": "render", "arity": 1}]


def test_a_whole_config_with_a_misspelled_table_fails_with_a_suggestion(tmp_path: Path) -> None:
    (tmp_path / "p.rhai").write_text(PROVIDER)
    config = tmp_path / "c.toml"
    config.write_text('providers_dir = "."\n[model_providers.p]\nbase_url = "http://x"\n[model_provider.q]\n')
    result = _run("validate", "--config", str(config), "--json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["providers"]["p"]["valid"] is True
    assert any("unknown key 'model_provider' (did you mean 'model_providers'?)" in p for p in doc["problems"])
    config.write_text('providers_dir = "."\n[model_providers.p]\n[model_providers.gone]\n')
    result = _run("validate", "--config", str(config))
    assert result.exit_code == 1 and "provider 'gone'" in result.stderr


def test_doctor_wants_provider_slash_model(tmp_path: Path) -> None:
    result = _run("doctor", "-m", "groq", "--json")
    assert result.exit_code == 2 and "PROVIDER/MODEL" in json.loads(result.stdout)["error"]["message"]
