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


@pytest.mark.parametrize(
    ("extra", "files", "problem"),
    [
        ('secrets_key_file = "absent.key"', {}, "secrets_key_file: cannot read"),
        ('secrets_key_file = "secrets.key"', {"secrets.key": "not a key\n"}, "must hold Fernet keys"),
        ('tls_cert = "cert.pem"\ntls_key = "key.pem"', {}, "tls_cert"),
        ('tls_cert = "cert.pem"\ntls_key = "key.pem"', {"cert.pem": "x", "key.pem": "y"}, "tls_cert"),
    ],
    ids=["key-file-missing", "not-a-key", "tls-files-missing", "tls-files-not-pem"],
)
def test_files_serve_opens_at_start_are_checked_too(
    tmp_path: Path, extra: str, files: dict[str, str], problem: str
) -> None:
    """What would stop ``rhaipool serve`` as it starts (after the config parsed) stops validate first."""
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    config = write_config(tmp_path, port=free_port(), extra=extra)
    doc = json.loads(_run("validate", "--config", str(config), "--json").stdout)
    assert doc["valid"] is False and len(doc["problems"]) == 1, doc
    assert problem in doc["problems"][0], doc


def test_a_good_secrets_key_file_passes(tmp_path: Path) -> None:
    from cryptography.fernet import Fernet

    keys = "".join(Fernet.generate_key().decode() + "\n" for _ in range(2))  # rotation: new, then old
    (tmp_path / "secrets.key").write_text(keys)
    config = write_config(tmp_path, port=free_port(), extra='secrets_key_file = "secrets.key"')
    result = _run("validate", "--config", str(config), "--json")
    assert result.exit_code == 0, result.output


def test_a_grant_of_a_table_the_operator_does_not_define_is_named(tmp_path: Path) -> None:
    """``providers = ["grok"]`` would give the tenant nothing, and forbid it a table of its own by
    that name."""
    config = write_config(tmp_path, port=free_port())
    text = config.read_text().replace("[tenants.acme]\n", '[tenants.acme]\nproviders = ["groq", "grok"]\n')
    config.write_text(text + OPERATOR_TABLE)
    doc = json.loads(_run("validate", "--config", str(config), "--json").stdout)
    assert doc["valid"] is False, doc
    assert doc["problems"] == [
        "[tenants.acme] providers: 'grok' is no operator table ([model_providers.grok] is not defined)"
    ]


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        ('secrets_key_file = "absent.key"', "secrets_key_file: cannot read"),
        ('tls_cert = "c.pem"\ntls_key = "k.pem"', "tls_cert"),
    ],
    ids=["key-file-missing", "tls-files-missing"],
)
def test_serve_refuses_to_start_on_them_with_one_line(tmp_path: Path, extra: str, problem: str) -> None:
    """The real ``rhaipool serve``: exit 2 and one line before it listens, not a traceback after."""
    import subprocess
    import sys

    config = write_config(tmp_path, port=free_port(), extra=extra)
    ran = subprocess.run(
        [sys.executable, "-m", "coordinator", "serve", "--config", str(config)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert ran.returncode == 2, ran.stderr
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and problem in lines[0], ran.stderr
