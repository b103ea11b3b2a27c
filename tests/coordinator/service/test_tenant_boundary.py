"""The service as a boundary between tenants, against a real ``rhaipool serve`` and a real upstream.

Secrets: a tenant's script never sees the operator's API key (granted or not), the upstream does, and
neither the database file nor the log holds it. Credentials: config-file tenants are read-only over the
admin API, API tenants are revoked and purged, a token outside the current set is refused. Quotas set in
serve.toml are enforced and changed by SIGHUP. ``/metrics`` needs the admin or the metrics token, and a
tenant's ``/api/status`` shows only its own tenant.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from service_support import ADMIN, TOKENS, ServiceProcess, free_port, sha, write_config

from coordinator.bench.standin import StandinServer
from coordinator.client import ServiceError
from coordinator.egress import PLACEHOLDER_PREFIX
from coordinator.service.config import ServiceConfigError, load_service_config

SECRET = "operator-secret-key-4f1e9c"
ENV_SECRET = "operator-env-secret-9a7c2e"
WIDE_SECRET = "operator-wide-secret-51d0b3"
METRICS_TOKEN = "metrics-reader-token"
LEAK = """
fn initialize(config) {
    let key = config.api_key ?? env_var("GROQ_API_KEY");
    #{ base_url: config.base_url ?? "http://127.0.0.1:9/v1", api_key: key, seen: `${config}` }
}
fn inference(state, request) {
    let r = http_post(`${state.base_url}/chat/completions`,
        to_json(#{ model: "m", messages: [#{ role: "user", content: "hi" }] }),
        #{ "Authorization": `Bearer ${state.api_key}`, "Content-Type": "application/json" });
    #{ content: `${state.api_key}|${state.seen}`, tool_calls: [], tokens_used: 1, finish_reason: "Complete" }
}
"""
HOOK = "fn render(ctx) { `${ctx.entries.len()}` }"
#: What a script can see of its table and the environment, returned without a request.
PEEK = """
fn initialize(config) {
    #{ seen: `${config}`, key: config.api_key, env: env_var("GROQ_API_KEY"), home: env_var("HOME"),
       path: env_var("PATH") }
}
fn inference(state, request) {
    #{ content: to_json(state), tool_calls: [], tokens_used: 1, finish_reason: "Complete" }
}
"""
#: LEAK's inference, its initialize moving base_url to a host the table does not name (the same server).
INVENTED = """
fn initialize(config) {
    let url = config.base_url;
    url.replace("127.0.0.1", "localhost");
    #{ base_url: url, api_key: config.api_key, seen: "" }
}
""" + LEAK[LEAK.index("fn inference") :]
PLACEHOLDER = re.compile(re.escape(PLACEHOLDER_PREFIX) + "[0-9a-f]{32}")
ASK = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _config(folder: Path, port: int, standin: str, *, extra_tenant: str = "") -> Path:
    path = write_config(
        folder, port=port, standin=standin, extra=f'metrics_token_sha256 = "{sha(METRICS_TOKEN)}"'
    )
    text = path.read_text().replace('api_key = "test-key"', f'api_key = "{SECRET}"')
    text += f'[model_providers.groq.env]\nGROQ_API_KEY = "{ENV_SECRET}"\n'
    # "wide" may reach any host (allowed_hosts = ["*"]), but its key may go only to its base_url's
    text += (
        f'[model_providers.wide]\napi_key = "{WIDE_SECRET}"\nbase_url = "{standin}"\n'
        'allowed_hosts = ["*"]\negress_allow = ["127.0.0.1", "::1"]\n'
    )
    acme = f'[tenants.acme]\ntoken_sha256 = "{sha(TOKENS["acme"])}"\nproviders = ["groq"'
    text = text.replace(acme + "]", acme + ', "wide"]')
    # acme is granted the operator's groq and wide tables; globex neither
    text = text.replace(
        f'[tenants.globex]\ntoken_sha256 = "{sha(TOKENS["globex"])}"\nproviders = ["groq"]',
        f'[tenants.globex]\ntoken_sha256 = "{sha(TOKENS["globex"])}"\n'
        f"max_regions = 2\nmax_connections = 2\n{extra_tenant}",
    )
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def upstream() -> Iterator[StandinServer]:
    with StandinServer() as server:
        yield server


@pytest.fixture(scope="module")
def boundary(tmp_path_factory: pytest.TempPathFactory, upstream: StandinServer) -> Iterator[ServiceProcess]:
    folder = tmp_path_factory.mktemp("boundary")
    port = free_port()
    running = ServiceProcess.start(_config(folder, port, upstream.base_url), port)
    yield running
    assert running.stop() == 0


def _db_bytes(service: ServiceProcess) -> bytes:
    db = service.config.parent / "state" / "rhaipool.db"
    return b"".join(Path(f"{db}{s}").read_bytes() for s in ("", "-wal") if Path(f"{db}{s}").exists())


def test_a_granted_tenant_never_sees_the_operator_key_but_the_upstream_does(
    boundary: ServiceProcess, upstream: StandinServer
) -> None:
    with boundary.client("acme") as c:
        c.put_script("provider", "groq", LEAK)
        answer = c.inference("groq", {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert SECRET not in json.dumps(answer)
    assert answer["content"].split("|")[0]  # a placeholder stood in for the key
    seen = [r for r in upstream.requests if r.path.endswith("/chat/completions")]
    assert seen and seen[-1].headers["authorization"] == f"Bearer {SECRET}"
    assert SECRET.encode() not in _db_bytes(boundary)
    assert SECRET not in boundary.log()


REFERENCE_GROQ = (Path(__file__).parent / "reference_providers" / "groq.rhai").read_text()
"""The reference runtime's example provider, byte for byte: Leviath's ``docs/examples/groq.rhai``
(github.com/GEMISIS/leviath at 64b6d6d4, MIT licence)."""


def test_the_reference_runtimes_groq_provider_runs_unmodified(
    boundary: ServiceProcess, upstream: StandinServer
) -> None:
    """Inference, stream and models through the service: the script holds a placeholder, its requests
    reach the upstream with the operator's real key, and no answer carries it."""
    before = len(upstream.requests)
    ask = {"model": "standin-small", "messages": [{"role": "user", "content": "hi"}]}
    with boundary.client("acme") as c:
        c.put_script("provider", "groq", REFERENCE_GROQ)
        answer = c.inference("groq", ask)
        chunks = list(c.stream("groq", ask))
        models = c.list_models("groq")
    assert answer["content"] == "echo: hi", answer
    assert "".join(chunk.get("delta", "") for chunk in chunks) == "echo: hi", chunks
    assert "standin-small" in json.dumps(models), models
    sent = upstream.requests[before:]
    assert len(sent) == 3 and {r.headers["authorization"] for r in sent} == {f"Bearer {SECRET}"}
    assert SECRET not in json.dumps([answer, chunks, models])


def test_a_tenant_without_the_grant_gets_no_operator_table(boundary: ServiceProcess) -> None:
    with boundary.client("globex") as c:
        c.put_script("provider", "groq", LEAK)
        with pytest.raises(ServiceError) as failed:
            c.inference("groq", {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert SECRET not in str(failed.value.error)


def test_a_placeholder_sent_in_a_body_is_refused(boundary: ServiceProcess, upstream: StandinServer) -> None:
    script = LEAK.replace('model: "m"', "model: state.api_key")
    before = len(upstream.requests)
    with boundary.client("acme") as c:
        c.put_script("provider", "groq", script)
        with pytest.raises(ServiceError) as refused:
            c.inference("groq", {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert "placeholder" in str(refused.value.error).lower(), refused.value.error
    assert all(SECRET.encode() not in r.body for r in upstream.requests[before:])


def test_the_table_env_and_env_var_reach_a_script_as_placeholders(boundary: ServiceProcess) -> None:
    """What ``initialize`` sees of an operator's table and of ``env_var``: placeholders for its secrets,
    nothing of the host's environment (tenant mode reads only the table's env)."""
    with boundary.client("acme") as c:
        c.put_script("provider", "groq", PEEK)
        seen = json.loads(c.inference("groq", ASK)["content"])
    text = json.dumps(seen)
    assert SECRET not in text and ENV_SECRET not in text, text
    assert PLACEHOLDER.fullmatch(seen["key"]) and PLACEHOLDER.fullmatch(seen["env"]), seen
    assert seen["key"] in seen["seen"] and seen["env"] != seen["key"]
    assert seen.get("home") is None and seen.get("path") is None  # the host's variables stay out
    assert ENV_SECRET.encode() not in _db_bytes(boundary) and ENV_SECRET not in boundary.log()


def test_a_host_that_initialize_invents_is_not_reached(
    boundary: ServiceProcess, upstream: StandinServer
) -> None:
    """The table names 127.0.0.1; a base_url of localhost (the same server) from initialize is refused."""
    before = len(upstream.requests)
    with boundary.client("acme") as c:
        c.put_script("provider", "groq", INVENTED)
        with pytest.raises(ServiceError) as refused:
            c.inference("groq", ASK)
    assert "localhost" in str(refused.value.error) and "not allowed" in str(refused.value.error)
    assert len(upstream.requests) == before


def test_a_placeholder_sent_to_another_host_is_refused(
    boundary: ServiceProcess, upstream: StandinServer
) -> None:
    """ "wide" may reach any host, but its key only its base_url's: the same request to localhost with
    the placeholder is refused before it is sent, and without it, it goes."""
    before = len(upstream.requests)
    with boundary.client("acme") as c:
        c.put_script("provider", "wide", INVENTED)
        with pytest.raises(ServiceError) as refused:
            c.inference("wide", ASK)
        assert "own hosts" in str(refused.value.error), refused.value.error
        assert len(upstream.requests) == before
        c.put_script("provider", "wide", INVENTED.replace("api_key: config.api_key", 'api_key: "none"'))
        assert c.inference("wide", ASK)["content"].startswith("none|")
    sent = upstream.requests[before:]
    assert [r.headers["authorization"] for r in sent] == ["Bearer none"]
    assert all(WIDE_SECRET.encode() not in r.body for r in upstream.requests)


def test_config_tenants_are_read_only_through_the_admin_api(boundary: ServiceProcess) -> None:
    with boundary.client(None, token=ADMIN) as admin:
        calls: list[Callable[[], object]] = [
            lambda: admin.put_tenant("acme", sha("stolen")),
            lambda: admin.delete_tenant("acme"),
        ]
        for call in calls:
            with pytest.raises(ServiceError) as refused:
                call()
            assert refused.value.status == 409 and "config file" in str(refused.value.error)
        rows = {r["id"]: r for r in admin.list_tenants()["tenants"]}
    assert rows["acme"]["source"] == "config"
    with boundary.client(None, token="stolen") as thief, pytest.raises(ServiceError) as denied:
        thief.list_regions()
    assert denied.value.status == 401


def test_an_api_tenant_is_revoked_then_purged(boundary: ServiceProcess) -> None:
    token = "initech-token"
    with boundary.client(None, token=ADMIN) as admin:
        admin.put_tenant("initech", sha(token))
        with boundary.client(None, token=token) as t:
            t.put_script("region_hook", "log", HOOK)
            t.create_region("notes", script="log", budget=100, persistent=True)
            t.write("notes", "kept", tokens=1)
        admin.delete_tenant("initech")
        with boundary.client(None, token=token) as t, pytest.raises(ServiceError) as denied:
            t.list_regions()
        assert denied.value.status == 401
        assert b"kept" in _db_bytes(boundary)  # revoked: data kept for the retention
        admin.put_tenant("initech", sha(token))  # reinstated: its regions come back
        with boundary.client(None, token=token) as t:
            assert [r["name"] for r in t.list_regions()["regions"]] == ["notes"]
        admin.delete_tenant("initech", purge=True)
        assert "initech" not in {r["id"] for r in admin.list_tenants()["tenants"]}


def test_a_revoked_tenant_is_purged_when_its_retention_runs_out_while_the_service_runs(
    tmp_path: Path,
) -> None:
    """tenant_retention_days of about 1.7 s: the revoked tenant's data is gone a moment later, without a
    restart (a service that runs for months still honours its retention)."""
    port = free_port()
    config = write_config(tmp_path, port=port, extra="tenant_retention_days = 0.00002")
    service = ServiceProcess.start(config, port)
    token = "initech-token"
    try:
        with service.client(None, token=ADMIN) as admin:
            admin.put_tenant("initech", sha(token))
            with service.client(None, token=token) as t:
                t.put_script("region_hook", "log", HOOK)
                t.create_region("notes", script="log", budget=100, persistent=True)
            admin.delete_tenant("initech")
            assert "initech" in {r["id"] for r in admin.list_tenants()["tenants"]}  # revoked, kept
            deadline = time.monotonic() + 15
            while "initech" in {r["id"] for r in admin.list_tenants()["tenants"]}:
                assert time.monotonic() < deadline, "the revoked tenant outlived its retention"
                time.sleep(0.2)
            admin.put_tenant("initech", sha(token))  # the id again: a new tenant, nothing of the old one
            with service.client(None, token=token) as t:
                assert t.list_regions()["regions"] == [] and t.list_scripts()["scripts"] == []
        assert "initech" in service.log() and "purged" in service.log()
    finally:
        assert service.stop() == 0


def test_a_revoked_tenants_id_in_the_config_file_does_not_inherit_its_data(tmp_path: Path) -> None:
    """A revoked API tenant's data waits for its purge; a config-file tenant given the same id (a new
    token, maybe someone else) is refused until that purge, then starts with nothing."""
    port = free_port()
    config = write_config(tmp_path, port=port)
    service = ServiceProcess.start(config, port)
    try:
        with service.client(None, token=ADMIN) as admin:
            admin.put_tenant("hooli", sha("old-token"))
            with service.client(None, token="old-token") as old:
                old.put_script("region_hook", "plan", HOOK)
            admin.delete_tenant("hooli")
            config.write_text(config.read_text() + f'[tenants.hooli]\ntoken_sha256 = "{sha("new-token")}"\n')
            service.process.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 10
            while "revoked over the admin API" not in service.log():
                assert time.monotonic() < deadline, "the reload was not refused"
                time.sleep(0.1)
            with service.client(None, token="new-token") as new, pytest.raises(ServiceError) as denied:
                new.list_scripts()
            assert denied.value.status == 401
            admin.delete_tenant("hooli", purge=True)
            admin.reload()
        with service.client(None, token="new-token") as new:
            assert new.list_scripts()["scripts"] == []
    finally:
        assert service.stop() == 0


def test_metrics_need_the_admin_or_the_metrics_token(boundary: ServiceProcess) -> None:
    assert httpx.get(f"{boundary.url}/metrics").status_code == 401
    assert (
        httpx.get(
            f"{boundary.url}/metrics", headers={"Authorization": f"Bearer {TOKENS['acme']}"}
        ).status_code
        == 401
    )
    for token in (ADMIN, METRICS_TOKEN):
        answer = httpx.get(f"{boundary.url}/metrics", headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 200 and "rhaipool_" in answer.text
    # the metrics token reads metrics only
    assert (
        httpx.get(
            f"{boundary.url}/api/admin/tenants", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}
        ).status_code
        == 401
    )


def test_a_tenant_status_shows_only_its_own_tenant(boundary: ServiceProcess) -> None:
    with boundary.client("globex") as c:
        status = c.status()
    assert "workers" not in status
    assert [t["id"] for t in status["tenants"]] == ["globex"]
    quotas = status["tenants"][0]["quotas"]
    assert quotas["max_regions"]["limit"] == 2
    # egress's and the pool's placement limits are the tenant's too
    assert quotas["egress_max_inflight"] == {"limit": 128} and quotas["egress_max_bytes"] == {
        "limit": 64 << 20
    }
    assert quotas["dedicated_workers"] == {"limit": 0}
    with boundary.client(None, token=ADMIN) as admin:
        full = admin.status()
    assert full["workers"] and {t["id"] for t in full["tenants"]} >= {"acme", "globex"}


def test_quotas_from_the_config_are_enforced_and_changed_by_sighup(boundary: ServiceProcess) -> None:
    with boundary.client("globex") as c:
        c.put_script("region_hook", "log", HOOK)
        c.create_region("a", script="log", budget=10)
        c.create_region("b", script="log", budget=10)
        with pytest.raises(ServiceError) as refused:
            c.create_region("c", script="log", budget=10)
        assert refused.value.status == 429 and "max_regions" in str(refused.value.error)
        text = boundary.config.read_text().replace("max_regions = 2", "max_regions = 3")
        boundary.config.write_text(text)
        boundary.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while True:
            try:
                c.create_region("c", script="log", budget=10)
                break
            except ServiceError:
                assert time.monotonic() < deadline, "SIGHUP did not raise max_regions"
                time.sleep(0.1)
        with pytest.raises(ServiceError) as too_big:
            c.create_region("d", script="log", budget=10**12)
        assert too_big.value.status in (422, 429) and "max_region" in str(too_big.value.error)


BURN = "fn render(ctx) { let x = 0; for i in 0..20000 { x += i; } `${x}` }"
NAP = 'fn render(ctx) { sleep(2.0); "nap" }'


def _warnings(answer: httpx.Response) -> str:
    assert answer.status_code == 200, answer.text
    return " ".join(answer.json()["warnings"])


def test_pool_quotas_from_the_config_are_enforced_and_changed_by_sighup(
    tmp_path: Path, upstream: StandinServer
) -> None:
    """The pool's own quotas (CPU-seconds per minute, calls at workers and queued), set in serve.toml for
    one tenant: a render past one is refused by it (the region's fallback names the key); a SIGHUP
    raising it lets the next one through."""
    port = free_port()
    config = _config(tmp_path, port, upstream.base_url)
    limits = "cpu_seconds_per_minute = 0.01\nmax_inflight = 1\nmax_queued = 1\n"
    acme = f'[tenants.acme]\ntoken_sha256 = "{sha(TOKENS["acme"])}"\n'
    config.write_text(config.read_text().replace(acme, acme + limits))
    service = ServiceProcess.start(config, port)
    try:
        with service.client("acme") as c:
            c.put_script("region_hook", "burn", BURN)
            c.put_script("region_hook", "nap", NAP)
            c.create_region("burn", script="burn", budget=10)
            for region in ("n1", "n2", "n3", "n4"):
                c.create_region(region, script="nap", budget=10)
        with concurrent.futures.ThreadPoolExecutor(4) as pool:  # one at a worker, one queued, two refused
            naps = list(pool.map(lambda r: _render(service.url, TOKENS["acme"], r), ("n1", "n2", "n3", "n4")))
        assert any("max_queued" in _warnings(a) for a in naps), [a.text for a in naps]
        for _ in range(200):  # 20 000 additions cost a few ms of CPU each: 0.01 s goes in a few renders
            if "cpu_seconds_per_minute" in (
                warnings := _warnings(_render(service.url, TOKENS["acme"], "burn"))
            ):
                break
            assert not warnings, warnings
        else:
            raise AssertionError("cpu_seconds_per_minute never refused a render")
        config.write_text(
            config.read_text().replace("cpu_seconds_per_minute = 0.01", "cpu_seconds_per_minute = 1000")
        )
        service.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while _warnings(_render(service.url, TOKENS["acme"], "burn")):
            assert time.monotonic() < deadline, "SIGHUP did not raise cpu_seconds_per_minute"
            time.sleep(0.1)
        with service.client("acme") as c:
            pool_quotas = c.status()["tenants"][0]["pool"]["quotas"]
        assert (pool_quotas["cpu_seconds_per_minute"], pool_quotas["max_queued"]) == (1000, 1)
    finally:
        assert service.stop() == 0


def test_a_removed_config_tenant_token_is_refused(tmp_path: Path, upstream: StandinServer) -> None:
    port = free_port()
    config = _config(tmp_path, port, upstream.base_url)
    service = ServiceProcess.start(config, port)
    try:
        with service.client("globex") as c:
            c.list_regions()
        text = config.read_text()
        start = text.index("[tenants.globex]")
        config.write_text(text[:start])
        service.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while True:
            answer = httpx.get(
                f"{service.url}/api/regions", headers={"Authorization": f"Bearer {TOKENS['globex']}"}
            )
            if answer.status_code == 401:
                break
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        assert service.stop() == 0


def test_the_database_is_private_whatever_the_umask(boundary: ServiceProcess) -> None:
    db = boundary.config.parent / "state" / "rhaipool.db"
    for path in (db, Path(f"{db}-wal")):
        if path.exists():
            assert os.stat(path).st_mode & 0o777 == 0o600, path


def test_the_secrets_key_seals_tenant_tables_and_rotates(tmp_path: Path, upstream: StandinServer) -> None:
    from cryptography.fernet import Fernet

    key = tmp_path / "secrets.key"
    old_key, new_key = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    key.write_text(old_key)
    port = free_port()
    config = write_config(tmp_path, port=port, extra=f'secrets_key_file = "{key}"')
    own = "tenant-own-key-77aa"
    url = f"http://127.0.0.1:{port}/api/providers/mine/config"
    auth = {"Authorization": f"Bearer {TOKENS['acme']}"}
    seen: dict[str, dict[str, str]] = {}
    service = ServiceProcess.start(config, port)
    try:
        answer = httpx.put(url, json={"api_key": own, "base_url": upstream.base_url}, headers=auth)
        assert answer.status_code == 200, answer.text
        assert own not in answer.text
        got = httpx.get(url, headers=auth)
        assert own not in got.text and "********" in got.text
        # the owner's script gets a placeholder; another tenant's script of that name, no table at all
        for tenant in ("acme", "globex"):
            with service.client(tenant) as c:
                c.put_script("provider", "mine", PEEK)
                seen[tenant] = json.loads(c.inference("mine", ASK)["content"])
        assert PLACEHOLDER.fullmatch(seen["acme"]["key"]) and own not in json.dumps(seen)
        assert seen["globex"].get("key") is None and upstream.base_url not in seen["globex"]["seen"]
        assert own.encode() not in _db_bytes(service) and own not in service.log()
    finally:
        assert service.stop() == 0
    for keys in (f"{new_key}\n{old_key}\n", f"{new_key}\n"):  # new key first, then the old one gone
        key.write_text(keys)
        service = ServiceProcess.start(config, port)
        try:
            got = httpx.get(url, headers=auth)
            assert got.status_code == 200 and got.json()["base_url"] == upstream.base_url, got.text
            assert "set aside" not in service.log()
        finally:
            assert service.stop() == 0


def test_without_a_secrets_key_a_secret_table_is_refused(
    boundary: ServiceProcess, upstream: StandinServer
) -> None:
    url = f"{boundary.url}/api/providers/mine/config"
    auth = {"Authorization": f"Bearer {TOKENS['acme']}"}
    refused = httpx.put(url, json={"api_key": "k", "base_url": upstream.base_url}, headers=auth)
    assert refused.status_code == 409 and "secrets_key_file" in refused.text
    plain = httpx.put(url, json={"base_url": upstream.base_url}, headers=auth)
    assert plain.status_code == 200, plain.text
    granted = httpx.put(
        f"{boundary.url}/api/providers/groq/config", json={"base_url": upstream.base_url}, headers=auth
    )
    assert granted.status_code == 409
    operator_only = httpx.put(url, json={"egress_allow": ["10.0.0.0/8"]}, headers=auth)
    assert operator_only.status_code in (400, 422) and "egress_allow" in operator_only.text


SLOW = 'fn render(ctx) { sleep(1.5); "slow" }'


def _render(url: str, token: str, region: str) -> httpx.Response:
    return httpx.post(
        f"{url}/api/regions/{region}/render",
        json={},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )


def test_a_tenant_over_its_connections_is_answered_429_and_others_are_not(boundary: ServiceProcess) -> None:
    with boundary.client("globex") as c:
        c.put_script("region_hook", "slow", SLOW)
        with contextlib.suppress(ServiceError):
            c.delete_region("a")
        c.create_region("a", script="slow", budget=10)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: _render(boundary.url, TOKENS["globex"], "a"), range(4)))
        with boundary.client("acme") as c:
            c.list_regions()  # another tenant is served meanwhile
    codes = sorted(a.status_code for a in answers)
    assert codes.count(200) >= 1 and 429 in codes, codes
    refused = next(a for a in answers if a.status_code == 429)
    assert "max_connections" in refused.text and refused.headers["retry-after"]


def test_a_revoked_tenant_calls_in_flight_stop_within_a_second(boundary: ServiceProcess) -> None:
    token = "hooli-token"
    with boundary.client(None, token=ADMIN) as admin:
        admin.put_tenant("hooli", sha(token))
        with boundary.client(None, token=token) as t:
            t.put_script("region_hook", "slow", SLOW.replace("1.5", "5.0"))
            t.create_region("r", script="slow", budget=10)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            running = pool.submit(_render, boundary.url, token, "r")
            time.sleep(0.5)
            begun = time.monotonic()
            admin.delete_tenant("hooli")
            answer = running.result()
            took = time.monotonic() - begun
        assert answer.status_code == 401, answer.text
        assert took < 1.5, took
        admin.delete_tenant("hooli", purge=True)


def test_the_operator_egress_policy_applies_to_every_tenant(tmp_path: Path, upstream: StandinServer) -> None:
    port = free_port()
    config = _config(tmp_path, port, upstream.base_url)
    config.write_text(config.read_text() + '[serve.egress]\ndenied_hosts = ["127.0.0.*"]\n')
    service = ServiceProcess.start(config, port)
    try:
        with service.client("acme") as c:
            c.put_script("provider", "groq", LEAK)
            with pytest.raises(ServiceError) as refused:
                c.inference("groq", {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        assert "denied_hosts" in str(refused.value.error)
    finally:
        assert service.stop() == 0
    config.write_text(config.read_text() + "[serve.egress.typo]\n")
    with pytest.raises(ServiceConfigError, match="unknown key"):
        load_service_config(config)
