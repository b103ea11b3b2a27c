"""``rhaipool tenants list|add|rotate|revoke`` of API tenants against a real ``rhaipool serve``: the token
is made by the CLI, printed once and never sent (only its sha256 is), it signs in at once, a rotated
token stops working, a revoked tenant's token gets 401, and nothing is changed without the admin token.
The semantics the service is being given now (409 for config-file tenants, purge) are in
``test_tenants_cli.py``."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator

import pytest
from click.testing import CliRunner, Result
from service_support import ADMIN, TOKENS, ServiceProcess, free_port, write_config

from coordinator._cli.main import main
from coordinator._cli.tenants import TOKEN_BYTES, new_token, tenant_rows
from coordinator.client import Client, ServiceError


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    folder = tmp_path_factory.mktemp("tenants-cli")
    port = free_port()
    running = ServiceProcess.start(write_config(folder, port=port), port)
    yield running
    assert running.stop() == 0


def cli(service: ServiceProcess, *args: str, admin: str | None = ADMIN) -> Result:
    env = {"RHAIPOOL_ADMIN_TOKEN": admin, "RHAIPOOL_TOKEN": None, "RHAIPOOL_SERVER": None}
    return CliRunner().invoke(
        main, ["tenants", *args, "--server", service.url], env=env, catch_exceptions=False
    )


def signs_in(service: ServiceProcess, token: str) -> bool:
    with Client(service.url, token) as c:
        try:
            c.list_scripts()
        except ServiceError as exc:
            assert exc.status == 401, exc
            return False
    return True


def ids(service: ServiceProcess) -> set[str]:
    with service.client(None) as c:
        return {row["id"] for row in tenant_rows(c.list_tenants())}


def test_add_prints_a_fresh_token_once_that_signs_in(service: ServiceProcess) -> None:
    added = cli(service, "add", "newco")
    assert added.exit_code == 0, added.output
    token = added.stdout.strip()
    assert added.stdout == token + "\n" and len(token) >= 43 and "store it now" in added.stderr
    assert signs_in(service, token) and "newco" in ids(service)
    assert token not in service.log(), "the token itself must never reach the service"
    with service.client(None) as c:
        listed = cli(service, "list", "--json")
        assert json.loads(listed.stdout) == c.list_tenants()
    text = cli(service, "list")
    assert text.exit_code == 0 and {line.split()[0] for line in text.stdout.splitlines()} == ids(service)


def test_rotate_replaces_the_token_and_revoke_ends_it(service: ServiceProcess) -> None:
    first = json.loads(cli(service, "add", "rotco", "--json").stdout)
    assert first["tenant"] == "rotco"
    assert first["token_sha256"] == hashlib.sha256(first["token"].encode()).hexdigest()
    rotated = json.loads(cli(service, "rotate", "rotco", "--json").stdout)
    assert rotated["token"] != first["token"]
    assert signs_in(service, rotated["token"]) and not signs_in(service, first["token"])
    revoked = cli(service, "revoke", "rotco")
    assert revoked.exit_code == 0 and "revoked" in revoked.stdout
    assert not signs_in(service, rotated["token"])


def test_add_of_an_existing_tenant_and_rotate_of_a_missing_one_change_nothing(
    service: ServiceProcess,
) -> None:
    taken = cli(service, "add", "acme", "--json")
    assert taken.exit_code == 1
    error = json.loads(taken.stdout)["error"]
    assert (
        error["class"] == "TenantStateError"
        and "exists" in error["message"]
        and "token" not in json.loads(taken.stdout)
    )
    assert signs_in(service, TOKENS["acme"])
    missing = cli(service, "rotate", "nobody")
    assert missing.exit_code == 1 and "no such tenant" in missing.stderr and missing.stdout == ""
    assert "nobody" not in ids(service)


def test_revoke_of_an_unknown_tenant_and_a_bad_id_are_refused(service: ServiceProcess) -> None:
    unknown = cli(service, "revoke", "nobody", "--json")
    assert unknown.exit_code == 1 and json.loads(unknown.stdout)["error"]["status"] == 404
    bad = cli(service, "add", "no spaces!", "--json")
    assert bad.exit_code == 2 and json.loads(bad.stdout)["error"]["status"] == 400
    assert "no spaces!" not in ids(service)


def test_without_the_admin_token_nothing_changes(service: ServiceProcess) -> None:
    for args in (("list",), ("add", "intruder"), ("revoke", "acme")):
        refused = cli(service, *args, "--json", admin=TOKENS["acme"])
        assert refused.exit_code == 1 and json.loads(refused.stdout)["error"]["status"] == 401, args
    assert "intruder" not in ids(service) and signs_in(service, TOKENS["acme"])


def test_purge_asks_first(service: ServiceProcess) -> None:
    token = cli(service, "add", "keepme").stdout.strip()
    refused = cli(service, "purge", "keepme", "--json")
    assert refused.exit_code == 2 and "--yes" in json.loads(refused.stdout)["error"]["message"]
    assert signs_in(service, token)


def test_generated_tokens_are_long_and_distinct() -> None:
    made = {new_token() for _ in range(200)}
    assert len(made) == 200
    for token, sha in made:
        assert len(token) >= (TOKEN_BYTES * 4) // 3 and sha == hashlib.sha256(token.encode()).hexdigest()


def test_a_listing_of_bare_ids_or_rows_reads_the_same() -> None:
    rows = tenant_rows({"tenants": [{"id": "a", "source": "config", "revoked": False}, "b"]})
    assert rows == [
        {"id": "a", "source": "config", "revoked": False},
        {"id": "b", "source": None, "revoked": False},
    ]


def test_rotate_of_a_revoked_tenant_says_it_reinstates_it(service: ServiceProcess) -> None:
    """The service reinstates a revoked tenant given a token (its data comes back): rotate says so."""
    cli(service, "add", "backco")
    assert cli(service, "revoke", "backco").exit_code == 0
    again = json.loads(cli(service, "rotate", "backco", "--json").stdout)
    assert again["reinstated"] is True and signs_in(service, again["token"])
    plain = cli(service, "rotate", "backco", "--json")
    assert json.loads(plain.stdout)["reinstated"] is False
    cli(service, "revoke", "backco")
    shown = cli(service, "rotate", "backco")
    assert shown.exit_code == 0 and "reinstated" in shown.stderr, shown.output
