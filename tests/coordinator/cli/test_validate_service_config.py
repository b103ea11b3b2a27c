"""``rhaipool validate --config`` on a service config (a file with a ``[serve]`` table) checks it as
``rhaipool serve`` reads it (``load_service_config``) and looks for no provider script file (tenants
upload them); a plain provider config keeps its checks (``test_validate_config.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from service_support import free_port, write_config

from coordinator._cli.main import main

OPERATOR_TABLE = '[model_providers.groq]\napi_key = "k"\nbase_url = "https://api.groq.com/openai/v1"\n'


def _run(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_a_correct_service_config_passes_without_provider_script_files(tmp_path: Path) -> None:
    config = write_config(tmp_path, port=free_port())
    config.write_text(config.read_text() + OPERATOR_TABLE)
    assert not list(tmp_path.glob("**/*.rhai"))
    result = _run("validate", "--config", str(config), "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc == {"valid": True, "config": str(config), "service": True, "problems": [], "providers": {}}
    text = _run("validate", "--config", str(config))
    assert (
        text.exit_code == 0
        and text.stdout.startswith(f"ok: {config} (service config")
        and "groq" in text.stdout
    )


@pytest.mark.parametrize(
    "text",
    [
        '[serve]\nlisten = "no-port"\n',
        '[serve]\nlocal_workers = 0\n[nodes]\nlisten = "tcp://127.0.0.1:8766"\n'
        'secret_key = "keys/absent.key_secret"\nauthorized_keys = "nodes"\n',
    ],
    ids=["listen", "node-keys"],
)
def test_what_serve_refuses_validate_refuses_with_the_same_line(tmp_path: Path, text: str) -> None:
    from coordinator.service.config import ServiceConfigError, load_service_config

    config = tmp_path / "serve.toml"
    config.write_text(text)
    with pytest.raises(ServiceConfigError) as refused:
        load_service_config(config)
    line = str(refused.value)
    result = _run("validate", "--config", str(config), "--json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["valid"] is False and doc["problems"] == [line]
    assert doc["error"] == {"class": "InvalidConfig", "message": line, "count": 1}
    shown = _run("validate", "--config", str(config))
    assert shown.exit_code == 1 and shown.stderr.strip() == f"error: {line}"


def test_a_misspelt_top_level_table_of_a_service_config_is_named(tmp_path: Path) -> None:
    config = write_config(tmp_path, port=free_port())
    config.write_text(config.read_text() + "[model_provider.groq]\n")
    doc = json.loads(_run("validate", "--config", str(config), "--json").stdout)
    assert doc["valid"] is False
    assert any("did you mean 'model_providers'" in p for p in doc["problems"])
