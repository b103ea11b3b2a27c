"""The provider CLI on rhaipool's own surface (docs/reference/json.md: PG1, PG4) plus infer and doctor."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from coordinator._cli.demo import provider_demo
from coordinator._cli.providers import doctor_model_command, infer_command, models_command, run_validate
from coordinator.bench.standin import StandinServer

GROQ = (Path(__file__).resolve().parents[3] / "examples" / "providers" / "groq.rhai").read_text()

GOOD = 'fn initialize(config) { #{} }\nfn inference(state, request) { #{content: "ok"} }\n'


@click.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True)
def validate(path: Path, as_json: bool) -> None:
    """What the lead wires as ``rhaipool validate PATH --kind provider``."""
    raise SystemExit(asyncio.run(run_validate(path, as_json)))


def invoke(command: click.Command, *args: str) -> Any:
    return CliRunner().invoke(command, list(args), catch_exceptions=False)


def test_pg1_validate_provider(tmp_path: Path) -> None:
    bad = tmp_path / "bad.rhai"
    bad.write_text("fn initialize(config){#{}}")
    result = invoke(validate, str(bad), "--json")
    doc = json.loads(result.stdout)
    assert result.exit_code == 1 and doc["valid"] is False and "inference" in doc["error"]["message"]
    assert doc["error"]["class"] == "MissingFunction" and doc["error"]["file"] == str(bad)
    good = tmp_path / "groq.rhai"
    good.write_text(GROQ)
    result = invoke(validate, str(good), "--json")
    doc = json.loads(result.stdout)
    assert result.exit_code == 0 and doc["valid"] is True and doc["error"] is None
    assert {"name": "count_tokens", "arity": 3} in doc["functions"]
    assert doc["metadata"]["max_context_tokens"] == 131072
    assert "defines count_tokens" in invoke(validate, str(good)).stdout


def test_validate_messages(tmp_path: Path) -> None:
    path = tmp_path / "p.rhai"
    path.write_text("fn initialize(config) { #{} }\nfn inference(state) { #{} }")
    result = invoke(validate, str(path))
    assert result.exit_code == 1
    assert "fn inference must take 2 parameters (state, request), found 1" in result.output
    path.write_text("fn initialize(c) { #{} }\nfn inference( { oops")
    assert f"{path}:2:" in invoke(validate, str(path)).output
    path.write_text('fn initialize(c) { throw "never run" }\nfn inference(s, r) { #{} }')  # PA5
    assert invoke(validate, str(path)).exit_code == 0


@pytest.fixture(scope="module")
def server() -> Iterator[StandinServer]:
    """The stand-in OpenAI-compatible API on 127.0.0.1."""
    with StandinServer() as srv:
        yield srv


@pytest.fixture
def providers(tmp_path: Path, server: StandinServer) -> Path:
    d = tmp_path / "providers"
    d.mkdir()
    (d / "groq.rhai").write_text(GROQ)
    (d / "nolist.rhai").write_text(GOOD)
    (d / "throws.rhai").write_text(GOOD + 'fn list_models(s) { throw "catalog down" }')
    (tmp_path / "config.toml").write_text(
        f'providers_dir = "providers"\n[model_providers.groq]\napi_key = "k"\n'
        f'base_url = "{server.base_url}"\negress_allow = ["127.0.0.1"]\n'
    )
    return tmp_path / "config.toml"


def test_pg4_models_list(providers: Path) -> None:
    cfg = ["--config", str(providers)]
    result = invoke(models_command, "list", "--provider", "nosuch", *cfg)
    assert result.exit_code != 0 and "no provider named 'nosuch'" in result.output
    result = invoke(models_command, "list", "--provider", "throws", *cfg)
    assert result.exit_code != 0 and "could not list its models" in result.output
    result = invoke(models_command, "list", "--provider", "nolist", *cfg)
    assert result.exit_code == 0 and "loaded and listed no models" in result.output
    result = invoke(models_command, "list", "--provider", "groq", *cfg, "--json")
    doc = json.loads(result.stdout)
    assert result.exit_code == 0 and [m["id"] for m in doc["models"]] == ["standin-small", "standin-large"]
    assert all(m["learned"] for m in doc["models"])
    assert "standin-large" in invoke(models_command, "list", "--provider", "groq", *cfg).output


def test_infer_json_and_stream(providers: Path, tmp_path: Path) -> None:
    request = tmp_path / "req.json"
    request.write_text(
        json.dumps({"model": "standin-small", "messages": [{"role": "user", "content": "a b"}]})
    )
    cfg = ["--config", str(providers), "--request", str(request), "--provider", "groq"]
    result = invoke(infer_command, *cfg, "--json")
    doc = json.loads(result.stdout)
    assert result.exit_code == 0 and doc["content"] == "echo: a b" and doc["finish_reason"] == "Complete"
    assert set(doc["tokens_used"]) == {
        "prompt_tokens",
        "completion_tokens",
        "total_tokens",
        "cached_tokens",
        "cache_write_tokens",
        "cost_usd",
    }
    lines = [
        json.loads(line) for line in invoke(infer_command, *cfg, "--json", "--stream").stdout.splitlines()
    ]
    assert "".join(line["delta"] for line in lines) == "echo: a b"
    assert lines[-1]["finish_reason"] == "Complete"
    human = invoke(infer_command, *cfg)
    assert human.exit_code == 0 and "echo: a b" in human.output and "finish: Complete" in human.output


def test_infer_error_json(providers: Path, tmp_path: Path) -> None:
    (providers.parent / "providers" / "fails.rhai").write_text(
        'fn initialize(c) { #{} }\nfn inference(s, r) { throw #{kind: "api", message: "HTTP 401: bad key"} }'
    )
    request = tmp_path / "req.json"
    request.write_text(json.dumps({"model": "m", "messages": []}))
    result = invoke(
        infer_command, "--config", str(providers), "--request", str(request), "--provider", "fails", "--json"
    )
    assert result.exit_code == 1
    error = json.loads(result.stdout)["error"]
    assert {k: error.pop(k) for k in ("class", "message", "transient", "reason")} == {
        "class": "Unavailable",
        "message": "HTTP 401: bad key",
        "transient": False,
        "reason": "auth-failed",
    }
    assert error.pop("remedy").startswith("the provider refused the API key")
    assert error == {
        "failure_kind": "auth-failed",
        "attempts": 1,
        "file": str(providers.parent / "providers" / "fails.rhai"),
        "line": 2,
        "column": 22,
    }
    request.write_text(json.dumps({"messages": []}))
    result = invoke(
        infer_command, "--config", str(providers), "--request", str(request), "--provider", "fails"
    )
    assert result.exit_code == 2 and "request.model is required" in result.output


def test_doctor_model(providers: Path) -> None:
    result = invoke(doctor_model_command, "-m", "groq/standin-small", "--config", str(providers), "--json")
    report = json.loads(result.stdout)
    assert result.exit_code == 0 and report["ok"] and report["reply"] == "PONG"
    result = invoke(doctor_model_command, "-m", "nosuch/x", "--config", str(providers))
    assert result.exit_code == 1 and "no provider named 'nosuch'" in result.output


def test_readme_demo() -> None:
    lines: list[str] = []
    assert asyncio.run(provider_demo(lines.append))
    assert "'PONG'" in lines[1]
    assert lines[2].endswith("echo: | streamed | word | by | word")
