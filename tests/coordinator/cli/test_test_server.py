"""``rhaipool test SCENARIO --server URL`` passes and fails like the local run, against a real service:
the same ``--json`` document, the same text, the same exit codes, and nothing left behind on the service."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from service_support import TOKENS, ServiceProcess, free_port, write_config

from coordinator._cli.main import main

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "regions"
SCRIPT = 'fn render(ctx) { ctx.entries.map(|e| e.content).reduce(|a, b| a + "|" + b, "") }\n'


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    folder = tmp_path_factory.mktemp("test-server")
    port = free_port()
    running = ServiceProcess.start(write_config(folder, port=port), port)
    yield running
    assert running.stop() == 0


def _test(*args: str, server: str | None = None, token: str | None = TOKENS["acme"]) -> Result:
    extra = ["--server", server] if server else []
    env = {"RHAIPOOL_TOKEN": token} if token is not None else {}
    return CliRunner().invoke(main, ["test", *args, *extra], env=env, catch_exceptions=False)


def _scenario(folder: Path, steps: list[Any], script: str = SCRIPT, name: str = "s.scenario.json") -> Path:
    (folder / "r.rhai").write_text(script)
    path = folder / name
    path.write_text(json.dumps({"script": "r.rhai", "region": {"name": "b", "budget": 100}, "steps": steps}))
    return path


def _nothing_left(service: ServiceProcess) -> None:
    with service.client("acme") as c:
        assert c.list_regions()["regions"] == []
        assert [s for s in c.list_scripts()["scripts"] if s["kind"] == "region_hook"] == []


@pytest.mark.parametrize("scenario", sorted(EXAMPLES.glob("*.scenario.json")), ids=lambda p: p.stem)
def test_each_example_gives_the_same_json_and_exit_code(service: ServiceProcess, scenario: Path) -> None:
    local = _test(str(scenario), "--json")
    remote = _test(str(scenario), "--json", server=service.url)
    assert remote.exit_code == local.exit_code, remote.output
    assert json.loads(remote.stdout) == json.loads(local.stdout)
    _nothing_left(service)


def test_the_text_output_is_the_same(service: ServiceProcess) -> None:
    scenario = EXAMPLES / "brain.scenario.json"
    local, remote = _test(str(scenario)), _test(str(scenario), server=service.url)
    assert remote.exit_code == local.exit_code == 0
    assert remote.stdout == local.stdout and "what the model would see" in remote.stdout


def test_a_failed_expectation_fails_alike(service: ServiceProcess, tmp_path: Path) -> None:
    steps = [
        {"write": {"content": "a", "tokens": 3, "expect": {"entries": 2, "tokens": 3}}},
        {"render": {"expect": {"equals": "b", "fallback": True}}},
    ]
    path = _scenario(tmp_path, steps)
    local, remote = _test(str(path), "--json"), _test(str(path), "--json", server=service.url)
    assert local.exit_code == remote.exit_code == 1
    doc = json.loads(remote.stdout)
    assert doc == json.loads(local.stdout) and doc["passed"] is False
    assert [(f["step"], f["key"]) for f in doc["failures"]] == [
        (1, "entries"),
        (2, "equals"),
        (2, "fallback"),
    ]
    text = _test(str(path), server=service.url)
    assert text.exit_code == 1 and "FAILED step [2] render: expect.equals" in text.stdout
    _nothing_left(service)


def test_a_directory_runs_every_scenario_and_reports_the_worst(
    service: ServiceProcess, tmp_path: Path
) -> None:
    _scenario(tmp_path, [{"render": {"expect": {"fallback": False}}}], name="a.scenario.json")
    _scenario(tmp_path, [{"render": {"expect": {"contains": "nope"}}}], name="b.scenario.json")
    local, remote = _test(str(tmp_path), "--json"), _test(str(tmp_path), "--json", server=service.url)
    assert local.exit_code == remote.exit_code == 1
    assert json.loads(remote.stdout) == json.loads(local.stdout)
    assert [d["passed"] for d in json.loads(remote.stdout)["scenarios"]] == [True, False]


def test_an_invalid_scenario_exits_2_and_a_script_that_does_not_compile_exits_1(
    service: ServiceProcess, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.scenario.json"
    bad.write_text(json.dumps({"script": "r.rhai", "region": {"name": "b", "budget": -1}}))
    local, remote = _test(str(bad), "--json"), _test(str(bad), "--json", server=service.url)
    assert local.exit_code == remote.exit_code == 2
    assert json.loads(remote.stdout) == json.loads(local.stdout)
    broken = _scenario(tmp_path, [{"render": {}}], script="fn render(ctx) { let }")
    local, remote = _test(str(broken), "--json"), _test(str(broken), "--json", server=service.url)
    assert local.exit_code == remote.exit_code == 1
    error = json.loads(remote.stdout)["error"]
    assert error["class"] == json.loads(local.stdout)["error"]["class"] == "RegionLoadError"
    assert error["file"] == str(broken.parent / "r.rhai")
    _nothing_left(service)


def test_a_missing_token_or_an_existing_region_is_an_error_and_changes_nothing(
    service: ServiceProcess, tmp_path: Path
) -> None:
    path = _scenario(tmp_path, [{"render": {}}])
    refused = _test(str(path), "--json", server=service.url, token=None)
    assert refused.exit_code == 1
    assert json.loads(refused.stdout)["error"] == {
        "class": "ServiceError",
        "message": "unauthorized",
        "status": 401,
    }
    with service.client("acme") as c:
        c.put_script("region_hook", "mine", SCRIPT)
        c.create_region("b", script="mine", budget=10)
        c.write("b", "kept", 2)
        taken = _test(str(path), "--json", server=service.url)
        assert taken.exit_code == 1 and "already has a region named 'b'" in taken.stdout
        assert [e["content"] for e in c.get_region("b")["entries"]] == ["kept"]
        assert {s["name"] for s in c.list_scripts()["scripts"]} == {"mine"}
        c.delete_region("b")
        c.delete_script("region_hook", "mine")
