"""``rhaipool scripts put|get|list|rm`` and ``rhaipool status --config`` against a real ``rhaipool serve``:
what the CLI stores is what the API serves, each tenant sees only its own, refusals keep the exit codes
(400: 2, any other refusal or an unreachable service: 1) and ``--json`` prints one document."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from service_support import ADMIN, TOKENS, ServiceProcess, free_port, write_config

from coordinator._cli.main import main
from coordinator._cli.service_access import listen_url

REGION = 'fn render(ctx) { "rendered" }\n'
PROVIDER = 'fn initialize(c) { #{} }\nfn inference(s, r) { #{content: "hi"} }\n'


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    folder = tmp_path_factory.mktemp("scripts-cli")
    port = free_port()
    running = ServiceProcess.start(write_config(folder, port=port), port)
    yield running
    assert running.stop() == 0


def cli(*args: str, token: str | None = TOKENS["acme"], admin: str | None = None, stdin: str = "") -> Result:
    env = {"RHAIPOOL_TOKEN": token, "RHAIPOOL_ADMIN_TOKEN": admin, "RHAIPOOL_SERVER": None}
    return CliRunner().invoke(main, list(args), env=env, input=stdin, catch_exceptions=False)


def test_put_get_list_rm_round_trip_through_the_api(service: ServiceProcess, tmp_path: Path) -> None:
    path = tmp_path / "brain.rhai"
    path.write_text(REGION)
    put = cli("scripts", "put", "region_hook", "brain", str(path), "--server", service.url, "--json")
    assert put.exit_code == 0, put.output
    stored = json.loads(put.stdout)
    assert stored["path"] == "region_hook/brain" and stored["compiles"] is True
    with service.client("acme") as c:
        assert c.get_script("region_hook", "brain")["content"] == REGION
        assert c.get_script("region_hook", "brain")["sha256"] == stored["sha256"]
    got = cli("scripts", "get", "region_hook", "brain", "--server", service.url)
    assert got.exit_code == 0 and got.stdout == REGION
    doc = json.loads(
        cli("scripts", "get", "region_hook", "brain.rhai", "--server", service.url, "--json").stdout
    )
    assert doc["content"] == REGION and doc["compiles"] is True
    listed = cli("scripts", "list", "--server", service.url)
    assert listed.exit_code == 0
    assert listed.stdout.splitlines() == [f"region_hook/brain  {stored['sha256'][:12]}  compiles"]
    removed = cli("scripts", "rm", "region_hook", "brain", "--server", service.url, "--json")
    assert removed.exit_code == 0 and json.loads(removed.stdout) == {"removed": "region_hook/brain"}
    with service.client("acme") as c:
        assert c.list_scripts()["scripts"] == []


def test_put_reads_stdin_and_list_filters_by_kind(service: ServiceProcess, tmp_path: Path) -> None:
    assert cli("scripts", "put", "provider", "p", "-", "--server", service.url, stdin=PROVIDER).exit_code == 0
    (tmp_path / "r.rhai").write_text(REGION)
    assert (
        cli("scripts", "put", "region_hook", "r", str(tmp_path / "r.rhai"), "--server", service.url).exit_code
        == 0
    )
    try:
        doc = json.loads(
            cli("scripts", "list", "--kind", "provider", "--server", service.url, "--json").stdout
        )
        assert [(s["kind"], s["name"]) for s in doc["scripts"]] == [("provider", "p")]
        with service.client("acme") as c:
            assert c.get_script("provider", "p")["content"] == PROVIDER
    finally:
        with service.client("acme") as c:
            c.delete_script("provider", "p")
            c.delete_script("region_hook", "r")


def test_a_script_that_does_not_compile_is_stored_and_exits_1(
    service: ServiceProcess, tmp_path: Path
) -> None:
    path = tmp_path / "wip.rhai"
    path.write_text("fn render(ctx) { let }")
    text = cli("scripts", "put", "region_hook", "wip", str(path), "--server", service.url)
    assert text.exit_code == 1 and "does NOT compile" in text.stdout
    doc = json.loads(
        cli("scripts", "put", "region_hook", "wip", str(path), "--server", service.url, "--json").stdout
    )
    assert doc["compiles"] is False and doc["error"]
    with service.client("acme") as c:
        assert c.get_script("region_hook", "wip")["content"] == "fn render(ctx) { let }"
        c.delete_script("region_hook", "wip")


def test_each_tenant_sees_only_its_own_scripts(service: ServiceProcess, tmp_path: Path) -> None:
    path = tmp_path / "mine.rhai"
    path.write_text(REGION)
    assert cli("scripts", "put", "region_hook", "mine", str(path), "--server", service.url).exit_code == 0
    try:
        other = cli(
            "scripts", "get", "region_hook", "mine", "--server", service.url, "--json", token=TOKENS["globex"]
        )
        assert other.exit_code == 1
        assert json.loads(other.stdout)["error"]["status"] == 404
        listed = cli("scripts", "list", "--server", service.url, "--json", token=TOKENS["globex"])
        assert json.loads(listed.stdout)["scripts"] == []
    finally:
        assert cli("scripts", "rm", "region_hook", "mine", "--server", service.url).exit_code == 0


def test_refusals_keep_the_exit_codes_and_the_error_shape(service: ServiceProcess, tmp_path: Path) -> None:
    missing = cli("scripts", "rm", "region_hook", "nothing", "--server", service.url, "--json")
    assert missing.exit_code == 1
    error = json.loads(missing.stdout)["error"]
    assert error["class"] == "ServiceError" and error["status"] == 404 and "nothing" in error["message"]
    bad_name = cli("scripts", "get", "region_hook", "no spaces!", "--server", service.url, "--json")
    assert bad_name.exit_code == 2 and json.loads(bad_name.stdout)["error"]["status"] == 400
    unauthorized = cli("scripts", "list", "--server", service.url, "--json", token="wrong")
    assert unauthorized.exit_code == 1 and json.loads(unauthorized.stdout)["error"]["status"] == 401
    text = cli("scripts", "get", "region_hook", "nothing", "--server", service.url)
    assert text.exit_code == 1 and text.stdout == "" and text.stderr.startswith("error: ")
    unreadable = cli(
        "scripts", "put", "region_hook", "x", str(tmp_path / "absent.rhai"), "--server", service.url
    )
    assert unreadable.exit_code == 2 and "cannot read" in unreadable.stderr
    wrong_kind = cli("scripts", "list", "--kind", "nope", "--json")
    assert wrong_kind.exit_code == 2 and json.loads(wrong_kind.stdout)["error"]["class"] == "UsageError"
    with service.client("acme") as c:
        assert c.list_scripts()["scripts"] == []


def test_an_unreachable_service_exits_1(tmp_path: Path) -> None:
    gone = cli("scripts", "list", "--server", f"http://127.0.0.1:{free_port()}", "--json")
    assert gone.exit_code == 1 and "cannot reach" in json.loads(gone.stdout)["error"]["message"]


def test_status_and_scripts_take_the_address_from_the_service_config(service: ServiceProcess) -> None:
    status = cli("status", "--config", str(service.config), "--json", admin=ADMIN)
    assert status.exit_code == 0, status.output
    assert {"uptime_secs", "queue", "tenants"} <= set(json.loads(status.stdout))
    listed = cli("scripts", "list", "--config", str(service.config), "--json")
    assert listed.exit_code == 0 and json.loads(listed.stdout) == {"scripts": []}
    both = cli("status", "--config", str(service.config), "--server", service.url, "--json", admin=ADMIN)
    assert both.exit_code == 2 and json.loads(both.stdout)["error"]["class"] == "UsageError"


def test_status_from_a_config_it_cannot_read_exits_2(tmp_path: Path) -> None:
    absent = cli("status", "--config", str(tmp_path / "absent.toml"), "--json")
    assert absent.exit_code == 2 and "cannot read config" in json.loads(absent.stdout)["error"]["message"]
    (tmp_path / "bad.toml").write_text('[serve]\nlisten = "no-port"\n')
    bad = cli("status", "--config", str(tmp_path / "bad.toml"))
    assert bad.exit_code == 2 and "[serve] listen" in bad.stderr


@pytest.mark.parametrize(
    ("serve", "url"),
    [
        ('listen = "0.0.0.0:9000"', "http://127.0.0.1:9000"),
        ('listen = "[::]:9000"', "http://[::1]:9000"),
        ('listen = "10.0.0.5:9000"\ntls_cert = "c.pem"\ntls_key = "k.pem"', "https://10.0.0.5:9000"),
        ("workers = 1", "http://127.0.0.1:8765"),
    ],
)
def test_the_listen_address_becomes_the_url_a_local_client_reaches(
    tmp_path: Path, serve: str, url: str
) -> None:
    path = tmp_path / "serve.toml"
    path.write_text(f"[serve]\n{serve}\n")
    assert listen_url(path) == url


def test_status_with_a_tenant_token_shows_its_own_quotas_and_no_worker(service: ServiceProcess) -> None:
    shown = cli("status", "--server", service.url)
    assert shown.exit_code == 0, shown.output
    assert "max_scripts: 0 of" in shown.stdout and "acme" in shown.stdout
    assert "pid" not in shown.stdout and "globex" not in shown.stdout
    admin = cli("status", "--server", service.url, admin=ADMIN)
    assert admin.exit_code == 0 and "workers (" in admin.stdout and "globex" in admin.stdout


def test_status_with_a_tenant_token_shows_its_pool_quotas_and_use(service: ServiceProcess) -> None:
    """The pool's quotas (calls, CPU, loaded scripts) are the tenant's too: each with its use, or none."""
    shown = cli("status", "--server", service.url)
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    assert "  max_calls: 0 (no limit)" in lines and "  max_queued: 0 (no limit)" in lines, lines
    assert "  cpu_seconds_per_minute: (no limit)" in lines, lines
    assert any(line.startswith("  max_loaded_scripts: ") and " of 256" in line for line in lines), lines
