"""``/metrics`` parses as Prometheus text and moves with calls, failures and restarts; ``status --json``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from service_support import ADMIN, TOKENS, ServiceProcess

from coordinator.client import ServiceError

BOUNDED_LABELS = frozenset(
    {"kind", "tenant", "outcome", "state", "reason", "le", "provider", "status", "cause", "budget"}
)
"""Every label a series may carry: bounded sets only, never a call id or a script hash."""


def _samples(service: ServiceProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(service.url + "/metrics", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_parse_and_move_with_calls_and_failures(service: ServiceProcess) -> None:
    with service.client("acme") as c:
        c.put_script("region_hook", "m", "fn render(ctx) { `m` }")
        c.create_region("metered", script="m", budget=100)
        before = _samples(service)
        for _ in range(3):
            c.render("metered")
        with pytest.raises(ServiceError):
            c.render("nosuch")
    after = _samples(service)
    ok = {"kind": "render", "tenant": "acme", "outcome": "ok"}
    bad = {"kind": "render", "tenant": "acme", "outcome": "client_error"}
    assert _value(after, "rhaipool_calls_total", **ok) - _value(before, "rhaipool_calls_total", **ok) == 3
    assert _value(after, "rhaipool_calls_total", **bad) - _value(before, "rhaipool_calls_total", **bad) == 1
    count = "rhaipool_call_duration_seconds_count"
    assert _value(after, count, kind="render") - _value(before, count, kind="render") == 4
    assert _value(after, "rhaipool_workers", state="active") >= 1
    assert _value(after, "rhaipool_worker_memory_bytes") > 0
    names = {name for name, _ in after}
    assert {"rhaipool_queue_depth", "rhaipool_worker_restarts_total", "rhaipool_inflight_calls"} <= names
    for name, labels in after:  # bounded labels only: never a call id or a script hash
        assert {k for k, _ in labels} <= BOUNDED_LABELS, name


def test_a_killed_worker_is_replaced_within_a_second_and_counted(service: ServiceProcess) -> None:
    with service.client(None) as admin:
        workers = admin.status()["workers"]
        before = _value(_samples(service), "rhaipool_worker_restarts_total", reason="crash")
        victim = next(w for w in workers if w["state"] == "active")
        os.kill(victim["pid"], signal.SIGKILL)
        killed = time.monotonic()
        while True:
            now = admin.status()["workers"]
            pids = {w["pid"] for w in now}
            if victim["pid"] not in pids and len(
                [w for w in now if w["state"] in ("active", "spare")]
            ) >= len(workers):
                break
            assert time.monotonic() - killed < 1.0, now
            time.sleep(0.02)
    assert _value(_samples(service), "rhaipool_worker_restarts_total", reason="crash") == before + 1
    env = {**os.environ, "RHAIPOOL_ADMIN_TOKEN": ADMIN}
    out = subprocess.run(
        [sys.executable, "-m", "coordinator", "status", "--json", "--server", service.url],
        capture_output=True, text=True, env=env, timeout=60, check=True,
    )  # fmt: skip
    doc = json.loads(out.stdout)
    assert victim["pid"] not in {w["pid"] for w in doc["workers"]}
    assert all(isinstance(w["memory_bytes"], int) and "sandbox" in w for w in doc["workers"])
    text = subprocess.run(
        [sys.executable, "-m", "coordinator", "status", "--server", service.url],
        capture_output=True, text=True, env=env, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert "workers (" in text and "tenants: acme (1 regions), globex (0 regions)" in text


def test_a_tenant_sees_only_itself_in_status(service: ServiceProcess) -> None:
    with service.client("globex") as c:
        assert [t["id"] for t in c.status()["tenants"]] == ["globex"]
    r = httpx.get(service.url + "/api/status", headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401
    assert TOKENS  # the tenants of the fixture


def test_health_and_openapi(service: ServiceProcess) -> None:
    assert httpx.get(service.url + "/healthz").json() == {"status": "ok"}
    assert httpx.get(service.url + "/readyz").json() == {"ready": True}
    doc = httpx.get(service.url + "/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    for path in ("/api/scripts", "/api/scripts/{kind}/{name}", "/api/scripts/validate",
                 "/api/providers/{name}/inference", "/healthz", "/readyz", "/metrics"):  # fmt: skip
        assert path in doc["paths"], path


def test_the_openapi_document_lists_exactly_the_routes() -> None:
    from starlette.routing import Route

    from coordinator.service import front, routes_ops, routes_providers, routes_regions, routes_scripts

    doc = json.loads((Path(routes_ops.__file__).parent / "openapi.json").read_text())
    served = {
        (r.path.replace(":path", ""), m.lower())
        for module in (routes_ops, routes_providers, routes_regions, routes_scripts, front)
        for r in module.ROUTES
        if isinstance(r, Route)
        for m in (r.methods or ()) - {"HEAD"}
    }
    documented = {(path, method) for path, ops in doc["paths"].items() for method in ops}
    assert served == documented


def test_running_calls_are_counted_per_tenant(service: ServiceProcess) -> None:
    """A tenant's script call held by a worker shows under its own tenant label, and goes when it ends."""
    with service.client("acme") as c:
        c.put_script(
            "provider",
            "slow",
            "fn initialize(c) { #{} }\nfn inference(s, r) { sleep(1.5); #{ content: `z` } }",
        )
        c.inference("slow", {"model": "m", "messages": [{"role": "user", "content": "warm"}]})
        done: list[object] = []
        caller = threading.Thread(
            target=lambda: done.append(
                c.inference("slow", {"model": "m", "messages": [{"role": "user", "content": "x"}]})
            )
        )
        caller.start()
        try:
            deadline = time.monotonic() + 10
            while _value(_samples(service), "rhaipool_tenant_running_calls", tenant="acme") != 1:
                assert time.monotonic() < deadline, "acme's running call never showed"
                time.sleep(0.05)
            assert _value(_samples(service), "rhaipool_tenant_running_calls", tenant="globex") == 0
        finally:
            caller.join()
    assert done and _value(_samples(service), "rhaipool_tenant_running_calls", tenant="acme") == 0
