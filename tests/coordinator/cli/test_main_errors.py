"""CLI cases beyond the numbered ones, derived from the prose of docs/reference/json.md,
docs/scripts/scenarios.md#the-file: every failure is one clear line (or, with ``--json``, a JSON document) and
a non-zero exit, never a traceback or a usage dump in place of JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from coordinator._cli.main import main
from coordinator._cli.providers import infer_command, models_command

ROOT = Path(__file__).resolve().parents[3]
CLI = [sys.executable, "-c", "from coordinator._cli.main import main; main()"]

GOOD_PROVIDER = 'fn initialize(config) { #{} }\nfn inference(state, request) { #{content: "ok"} }\n'
GOOD_REGION = 'fn render(ctx) { "hi" }\n'


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


def rhaipool(*args: str) -> Ran:
    """``rhaipool ARGS`` run in this process (click's runner, so no interpreter start-up per case): the exit
    code and both streams as the command wrote them. An exception escaping the command fails the test, as
    a traceback on stderr would; ``rhaipool_process`` runs the real command line."""
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return Ran(result.exit_code, result.stdout, result.stderr)


def rhaipool_process(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, check=False
    )


def invoke(command: click.Command, *args: str) -> Any:
    return CliRunner().invoke(command, list(args), catch_exceptions=False)


@pytest.fixture
def providers(tmp_path: Path) -> Path:
    d = tmp_path / "providers"
    d.mkdir()
    (d / "nolist.rhai").write_text(GOOD_PROVIDER)
    (tmp_path / "config.toml").write_text(
        'providers_dir = "providers"\n'
        '[model_providers.abs]\nscript = "/nonexistent/elsewhere/abs.rhai"\n'
        '[model_providers.srv]\nscript = "nolist"\nserves = ["s-one", "s-two"]\n'
    )
    return tmp_path / "config.toml"


@pytest.fixture
def request_file(tmp_path: Path) -> Path:
    path = tmp_path / "req.json"
    path.write_text(json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
    return path


# -- validate ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "message"), [("region", "cannot read"), ("provider", "cannot read")])
def test_validate_missing_file_json_is_a_validation_document(tmp_path: Path, kind: str, message: str) -> None:
    """A file that is not there is bad input (exit 2), reported in the one ``--json`` error shape."""
    missing = tmp_path / "nosuch.rhai"
    out = rhaipool("validate", str(missing), "--kind", kind, "--json")
    assert out.returncode == 2, out.stderr
    doc = json.loads(out.stdout)
    assert message in doc["error"]["message"] and "nosuch.rhai" in doc["error"]["message"]
    assert "Traceback" not in out.stderr


def test_validate_missing_file_plain_is_one_line(tmp_path: Path) -> None:
    """The real command line (a process of its own): one line on stderr, exit 2, no traceback."""
    out = rhaipool_process("validate", str(tmp_path / "nosuch.rhai"), "--kind", "region")
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "no such file" in out.stderr


# -- test SCENARIO ----------------------------------------------------------------------------------------


def test_test_missing_scenario_json_is_json(tmp_path: Path) -> None:
    out = rhaipool("test", str(tmp_path / "nosuch.json"), "--json")
    assert out.returncode == 2
    assert "cannot read scenario" in json.loads(out.stdout)["error"]["message"]


def _scenario(tmp_path: Path, steps: list[Any], budget: Any = 100) -> Path:
    (tmp_path / "r.rhai").write_text(GOOD_REGION)
    path = tmp_path / "s.json"
    path.write_text(
        json.dumps({"script": "r.rhai", "region": {"name": "b", "budget": budget}, "steps": steps})
    )
    return path


@pytest.mark.parametrize("timeout", ["0", "-1", "nan", "inf"])
def test_test_rejects_a_timeout_that_is_not_a_positive_number(tmp_path: Path, timeout: str) -> None:
    """A zero/negative/NaN deadline used to kill the worker on every hook and report fallbacks, exit 0."""
    out = rhaipool("test", str(_scenario(tmp_path, [{"render": {}}])), "--timeout", timeout)
    assert out.returncode == 2
    assert "--timeout" in out.stderr and "FALLBACK" not in out.stdout


@pytest.mark.parametrize(
    ("field", "value"),
    [("is_error", "false"), ("is_error", 1), ("tool_call_id", 5), ("tool_name", None)],
)
def test_scenario_rejects_mistyped_tool_result_fields(tmp_path: Path, field: str, value: Any) -> None:
    """docs/scripts/regions.md#renderctx: tool_call_id/tool_name are strings and is_error a bool;
    ``"is_error": "false"`` used to become true silently (``bool("false")``)."""
    write = {"content": "x", "kind": "tool_result", "tool_call_id": "c1", "tool_name": "sh", field: value}
    out = rhaipool("test", str(_scenario(tmp_path, [{"write": write}])), "--json")
    assert out.returncode == 2, out.stdout
    assert f"steps[0].write.{field}" in json.loads(out.stdout)["error"]["message"]


def test_scenario_rejects_a_non_string_thought_signature(tmp_path: Path) -> None:
    call = {"id": "c1", "name": "sh", "thought_signature": 7}
    write = {"content": "", "kind": "assistant_turn", "tool_calls": [call]}
    out = rhaipool("test", str(_scenario(tmp_path, [{"write": write}])), "--json")
    assert out.returncode == 2
    assert "steps[0].write.tool_calls[0].thought_signature" in json.loads(out.stdout)["error"]["message"]


@pytest.mark.parametrize(
    "steps_budget",
    [
        ([], 2**63),
        ([{"write": {"content": "x", "tokens": 2**64}}], 100),
        ([{"evict": {"needed_tokens": 2**70}}], 1),
    ],
)
def test_scenario_rejects_integers_a_script_cannot_hold(tmp_path: Path, steps_budget: Any) -> None:
    """Rhai's INT is i64: a larger number used to reach the worker and turn every render into a fallback."""
    steps, budget = steps_budget
    out = rhaipool("test", str(_scenario(tmp_path, steps, budget)), "--json")
    assert out.returncode == 2, out.stdout
    assert "invalid scenario" in json.loads(out.stdout)["error"]["message"]


# -- doctor -m --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("content", [None, "providers_dir = [1\n"])
def test_doctor_with_an_unreadable_config_reports_it(tmp_path: Path, content: str | None) -> None:
    """``doctor`` with a missing or broken config is bad input (exit 2), with or without ``-m``."""
    config = tmp_path / "config.toml"
    if content is not None:
        config.write_text(content)
    for args in (["-m", "x/y"], []):
        out = rhaipool("doctor", *args, "--config", str(config), "--json")
        assert out.returncode == 2
        assert "Traceback" not in out.stderr
        assert "cannot read config" in json.loads(out.stdout)["error"]["message"]
    plain = rhaipool("doctor", "-m", "x/y", "--config", str(config))
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    assert "cannot read config" in plain.stdout + plain.stderr


# -- models list / infer ----------------------------------------------------------------------------------


@pytest.mark.parametrize("content", [None, "providers_dir = [1\n", "model_providers = 5\n"])
def test_models_list_bad_config_json_is_json(tmp_path: Path, content: str | None) -> None:
    """With ``--json`` every failure is the ``{"error": {...}}`` document of docs/reference/json.md, config
    errors included."""
    config = tmp_path / "c.toml"
    if content is not None:
        config.write_text(content)
    result = invoke(models_command, "list", "--provider", "p", "--config", str(config), "--json")
    assert result.exit_code != 0
    error = json.loads(result.stdout)["error"]
    assert (
        result.exit_code == 2
        and error["class"] == "ProviderConfigError"
        and ("config" in error["message"] or "model_providers" in error["message"])
    )


def test_infer_bad_config_json_is_json(tmp_path: Path, request_file: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("request_timeout_secs = -1\n")
    args = ["--provider", "p", "--config", str(config), "--request", str(request_file), "--json"]
    result = invoke(infer_command, *args)
    assert result.exit_code != 0
    assert "request_timeout_secs" in json.loads(result.stdout)["error"]["message"]


@pytest.mark.parametrize("body", [b"not json", b"\xff\xfe", None])
def test_infer_unreadable_request_is_an_invalid_request(providers: Path, tmp_path: Path, body: Any) -> None:
    """A request file that is not JSON is as invalid as one that is not an object (exit 2), and ``--json``
    reports it as JSON."""
    request = tmp_path / "bad.json"
    if body is not None:
        request.write_bytes(body)
    args = ["--provider", "nolist", "--config", str(providers), "--request", str(request)]
    result = invoke(infer_command, *args, "--json")
    assert result.exit_code == 2
    assert "bad.json" in json.loads(result.stdout)["error"]["message"]
    result = invoke(infer_command, *args)
    assert result.exit_code == 2 and "bad.json" in result.output


def test_not_found_names_the_configured_script(providers: Path) -> None:
    """docs/scripts/providers.md#where-it-lives-and-how-it-is-named: a ``script`` override is used verbatim;
    the error must point there, not at the providers dir."""
    result = invoke(models_command, "list", "--provider", "abs", "--config", str(providers))
    assert result.exit_code != 0
    assert "no provider named 'abs'" in result.output and "/nonexistent/elsewhere/abs.rhai" in result.output


def test_not_found_for_an_escaping_name_says_so(providers: Path) -> None:
    """docs/scripts/providers.md#where-it-lives-and-how-it-is-named: a ``..`` component is refused; saying "no
    script in <dir>" hides why."""
    result = invoke(models_command, "list", "--provider", "../nolist", "--config", str(providers), "--json")
    assert result.exit_code != 0
    message = json.loads(result.stdout)["error"]["message"]
    assert "no provider named '../nolist'" in message and "escapes the providers directory" in message


def test_listed_no_models_with_serves_does_not_suggest_adding_serves(providers: Path) -> None:
    """docs/scripts/providers.md#list_modelsstate: ``serves`` never becomes rows; when it is set,
    the note should say that instead of advising it."""
    result = invoke(models_command, "list", "--provider", "srv", "--config", str(providers))
    assert result.exit_code == 0 and "loaded and listed no models" in result.output
    assert "s-one" in result.output and "can name the models" not in result.output


def test_main_group_exposes_the_commands_of_section_4() -> None:
    """docs/reference/json.md: validate, test, models list,
    infer and doctor are all reachable from ``rhaipool``."""
    for name in ("validate", "test", "models", "infer", "doctor"):
        assert name in main.commands
