"""``validate PATH --kind provider --config FILE``: one provider script checked with its config table.

Real commands in real sandboxed workers: the table's problems are reported, and ``initialize`` runs
with what the table gives it, so a script that needs a key the table lacks fails here, not at the
first inference.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from coordinator._cli.main import main

NEEDS_KEY = """fn initialize(config) {
    if config.api_key == () { throw #{ message: "api_key not set", transient: false }; }
    #{ key: config.api_key }
}
fn inference(state, request) { #{ content: state.key } }
"""


def _run(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _files(tmp_path: Path, table: str) -> tuple[Path, Path]:
    script = tmp_path / "acme.rhai"
    script.write_text(NEEDS_KEY)
    config = tmp_path / "rhaipool.toml"
    config.write_text(f'providers_dir = "."\n[model_providers.acme]\n{table}')
    return script, config


def test_initialize_runs_with_the_tables_keys(tmp_path: Path) -> None:
    script, config = _files(tmp_path, 'api_key = "k"\n')
    result = _run("validate", str(script), "--kind", "provider", "--config", str(config), "--json")
    assert result.exit_code == 0, result.stdout
    doc = json.loads(result.stdout)
    assert doc["valid"] is True and doc["provider"] == "acme" and doc["problems"] == []
    text = _run("validate", str(script), "--config", str(config))
    assert text.exit_code == 0 and "initialize ran with [model_providers.acme]" in text.stdout


def test_a_table_without_what_initialize_needs_fails_with_the_scripts_words(tmp_path: Path) -> None:
    script, config = _files(tmp_path, 'base_url = "http://x"\n')
    result = _run("validate", str(script), "--kind", "provider", "--config", str(config), "--json")
    assert result.exit_code == 1
    error = json.loads(result.stdout)["error"]
    assert error["class"] == "ProviderLoadError" and error["message"] == "api_key not set"
    assert error["file"] == str(script) and error["line"] == 2
    text = _run("validate", str(script), "--kind", "provider", "--config", str(config))
    assert text.exit_code == 1
    assert text.stderr.count("api_key not set") == 1, text.stderr


def test_a_misspelled_key_of_the_table_is_a_problem_with_a_suggestion(tmp_path: Path) -> None:
    script, config = _files(tmp_path, 'api_key = "k"\nalowed_hosts = ["x"]\n')
    result = _run("validate", str(script), "--kind", "provider", "--config", str(config), "--json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["error"]["class"] == "InvalidConfig"
    assert any("did you mean 'allowed_hosts'?" in p for p in doc["problems"])


def test_the_table_is_found_by_its_script_not_only_by_the_file_name(tmp_path: Path) -> None:
    script, config = _files(tmp_path, "")
    config.write_text('providers_dir = "."\n[model_providers.other]\nscript = "acme"\napi_key = "k"\n')
    doc = json.loads(_run("validate", str(script), "--config", str(config), "--json").stdout)
    assert doc["provider"] == "other" and doc["valid"] is True


def test_a_missing_or_broken_config_is_bad_input(tmp_path: Path) -> None:
    script, config = _files(tmp_path, "")
    missing = _run(
        "validate", str(script), "--kind", "provider", "--config", str(tmp_path / "no.toml"), "--json"
    )
    assert missing.exit_code == 2 and json.loads(missing.stdout)["error"]["class"] == "ProviderConfigError"
    config.write_text("[model_providers.acme\n")
    broken = _run("validate", str(script), "--kind", "provider", "--config", str(config), "--json")
    assert broken.exit_code == 2 and "not valid TOML" in json.loads(broken.stdout)["error"]["message"]
