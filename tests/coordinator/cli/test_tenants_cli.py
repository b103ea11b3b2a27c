"""``rhaipool tenants`` on the service's one source of truth for tenants (issue 21, point 3): config-file
tenants are read-only through the admin API (409 with the reason, and nothing changes), the listing says
where each tenant comes from and whether it is revoked, and ``purge`` removes a revoked tenant's data.

These need the service side of the contract (``GET /api/admin/tenants`` rows, 409, ``?purge=true``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from service_support import ADMIN, TOKENS, ServiceProcess, free_port, write_config

from coordinator._cli.main import main
from coordinator.client import Client, ServiceError

REGION = 'fn render(ctx) { "kept" }\n'


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    folder = tmp_path_factory.mktemp("tenants-contract")
    port = free_port()
    running = ServiceProcess.start(write_config(folder, port=port), port)
    yield running
    assert running.stop() == 0


def cli(service: ServiceProcess, *args: str) -> Result:
    env = {"RHAIPOOL_ADMIN_TOKEN": ADMIN, "RHAIPOOL_TOKEN": None, "RHAIPOOL_SERVER": None}
    return CliRunner().invoke(
        main, ["tenants", *args, "--server", service.url], env=env, catch_exceptions=False
    )


def scripts_of(service: ServiceProcess, token: str) -> list[str] | None:
    """The tenant's script names, or None when its token is refused."""
    with Client(service.url, token) as c:
        try:
            return [s["name"] for s in c.list_scripts()["scripts"]]
        except ServiceError as exc:
            assert exc.status == 401, exc
            return None


def rows(service: ServiceProcess) -> dict[str, dict[str, object]]:
    doc = json.loads(cli(service, "list", "--json").stdout)
    return {row["id"]: row for row in doc["tenants"]}


def test_the_listing_says_where_each_tenant_comes_from(service: ServiceProcess) -> None:
    assert cli(service, "add", "listed").exit_code == 0
    listed = rows(service)
    assert listed["acme"] == {"id": "acme", "source": "config", "revoked": False}
    assert listed["listed"] == {"id": "listed", "source": "api", "revoked": False}
    text = cli(service, "list").stdout.splitlines()
    assert "acme  config" in text and "listed  api" in text


@pytest.mark.parametrize("args", [("rotate", "acme"), ("revoke", "acme"), ("purge", "acme", "--yes")])
def test_config_file_tenants_are_refused_with_the_reason_and_keep_working(
    service: ServiceProcess, args: tuple[str, ...]
) -> None:
    refused = cli(service, *args, "--json")
    assert refused.exit_code == 1, refused.output
    error = json.loads(refused.stdout)["error"]
    assert error["status"] == 409 and "config" in error["message"]
    assert "token" not in json.loads(refused.stdout)
    assert scripts_of(service, TOKENS["acme"]) is not None
    assert rows(service)["acme"]["revoked"] is False


def test_add_of_a_config_tenant_names_the_config_file(service: ServiceProcess) -> None:
    taken = cli(service, "add", "globex")
    assert taken.exit_code == 1 and "config file" in taken.stderr
    assert scripts_of(service, TOKENS["globex"]) is not None


def test_revoke_keeps_the_data_and_purge_removes_it(service: ServiceProcess, tmp_path: Path) -> None:
    token = cli(service, "add", "leaving").stdout.strip()
    with Client(service.url, token) as c:
        c.put_script("region_hook", "mine", REGION)
    assert cli(service, "revoke", "leaving").exit_code == 0
    assert scripts_of(service, token) is None
    assert rows(service)["leaving"]["revoked"] is True
    purged = cli(service, "purge", "leaving", "--yes", "--json")
    assert purged.exit_code == 0 and json.loads(purged.stdout) == {"tenant": "leaving", "purged": True}
    assert "leaving" not in rows(service)
    again = cli(service, "add", "leaving").stdout.strip()
    assert scripts_of(service, again) == [], "purge left the tenant's scripts behind"
    assert scripts_of(service, token) is None


def test_a_token_rotated_by_the_cli_survives_a_reload(service: ServiceProcess) -> None:
    token = cli(service, "add", "durable").stdout.strip()
    with Client(service.url, ADMIN) as c:
        c.reload()
    assert scripts_of(service, token) == []
