"""Each of the service's per-event series moves when its event happens, and script output is logged
capped, escaped and tagged. One real service (one worker, region calls one at a time, two calls in
flight per tenant) started through ``coordinator.service.server.serve`` with those pool options."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from service_support import ADMIN, ServiceProcess, free_port, write_config

from coordinator._cli.demo import GROQ_SCRIPT
from coordinator.bench.standin import Reply, StandinServer
from coordinator.client import ServiceError
from coordinator.service.observer import MAX_LINE_CHARS, MAX_LINES

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

_LAUNCH = (
    "import asyncio, json, sys\n"
    "from pathlib import Path\n"
    "from coordinator.service.config import load_service_config\n"
    "from coordinator.service.logs import configure\n"
    "from coordinator.service.server import serve\n"
    "configure(as_json=True)\n"
    "asyncio.run(serve(load_service_config(Path(sys.argv[1])), pool_options=json.loads(sys.argv[2])))\n"
)
POOL = {"workers": 1, "spares": 0, "region_pipeline": 1}
PONG = {"model": "standin-small", "messages": [{"role": "user", "content": "Reply with exactly: PONG"}]}
SLOW = "fn render(ctx) { sleep(1.0); `slow` }"
TALKER = """
fn render(ctx) {
    print("plain line");
    print("escape \\x1b[31m red");
    let s = "y"; while s.len < 2000 { s += s; }
    print(s);
    for i in 0..30 { print(`line ${i}`); }
    `talked`
}
"""


@pytest.fixture(scope="module")
def busy(tmp_path_factory: pytest.TempPathFactory, standin: StandinServer) -> Iterator[ServiceProcess]:
    standin.route("POST", "/limited/", lambda r: Reply(429, {"Retry-After": "0"}, b"slow down"))
    folder = tmp_path_factory.mktemp("busy")
    port = free_port()
    config = write_config(folder, port=port, standin=standin.base_url, workers=1)
    config.write_text(config.read_text().replace('providers = ["groq"]', 'providers = ["groq", "limited"]'))
    with config.open("a", encoding="utf-8") as f:
        f.write(
            "[serve.tenant_defaults]\nmax_calls = 2\n"
            "[model_providers.limited]\n"
            f'api_key = "k"\nbase_url = "{standin.url}/limited/v1"\negress_allow = ["127.0.0.1"]\n'
            "[model_providers.limited.rate_limit]\n"
            "requests_per_minute = 100000\ntokens_per_minute = 100000000\n"
        )
    with (folder / "service.log").open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-c", _LAUNCH, str(config), json.dumps(POOL)],
            stdout=log, stderr=log, cwd=folder,
        )  # fmt: skip
    service = ServiceProcess(config, port, process)
    service.wait_ready(60)
    yield service
    assert service.stop() == 0


BOUNDED_LABELS = frozenset(
    {"kind", "tenant", "outcome", "state", "reason", "le", "provider", "status", "cause", "budget"}
)
"""Every label a series may carry: bounded sets only, never a call id or a script hash."""


def _samples(service: ServiceProcess) -> Samples:
    text = httpx.get(service.url + "/metrics", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def _render(service: ServiceProcess, region: str) -> dict[str, object]:
    with service.client("acme") as c:
        report: dict[str, object] = c.render(region)
        return report


def _slow_waits(samples: Samples) -> float:
    """Queue waits of acme's region calls longer than 0.1 s."""
    name = "rhaipool_queue_wait_seconds"
    everything = _value(samples, name + "_count", tenant="acme", kind="region")
    return everything - _value(samples, name + "_bucket", tenant="acme", kind="region", le="0.1")


def test_a_queued_call_and_a_quota_refusal_move_their_series(busy: ServiceProcess) -> None:
    with busy.client("acme") as c:
        c.put_script("region_hook", "slow", SLOW)
        for n in range(3):
            c.create_region(f"slow{n}", script="slow", budget=100)
        before = _samples(busy)
        with ThreadPoolExecutor(3) as threads:  # one worker: the 2nd waits; 2 in flight: the 3rd is refused
            reports = list(threads.map(lambda n: _render(busy, f"slow{n}"), range(3)))
    after = _samples(busy)
    assert sum(1 for r in reports if r["fallback"]) >= 1, reports  # a refused hook falls back
    assert _slow_waits(after) - _slow_waits(before) >= 1
    refused = "rhaipool_quota_refusals_total"
    labels = {"tenant": "acme", "reason": "calls_in_flight"}
    assert _value(after, refused, **labels) - _value(before, refused, **labels) >= 1
    ran, mine = "rhaipool_script_execution_seconds_count", {"tenant": "acme", "kind": "region"}
    assert _value(after, ran, **mine) > _value(before, ran, **mine)


def test_egress_requests_by_provider_and_status_and_a_429_wait(busy: ServiceProcess) -> None:
    with busy.client("globex") as c:
        c.put_script("provider", "groq", GROQ_SCRIPT.read_text())
        c.put_script("provider", "limited", GROQ_SCRIPT.read_text())
        before = _samples(busy)
        assert c.inference("groq", PONG)["content"] == "PONG"
        with pytest.raises(ServiceError) as limited:
            c.inference("limited", PONG)
    assert limited.value.error["class"] == "RateLimitExceeded"
    after = _samples(busy)
    sent = "rhaipool_egress_requests_total"
    for provider, status in (("groq", "2xx"), ("limited", "4xx")):
        moved = _value(after, sent, provider=provider, status=status) - _value(
            before, sent, provider=provider, status=status
        )
        assert moved >= 1, (provider, status)
    waits = "rhaipool_rate_limit_waits_total"
    labels = {"tenant": "globex", "provider": "limited", "cause": "429"}
    assert _value(after, waits, **labels) - _value(before, waits, **labels) >= 1
    assert ("rhaipool_rate_limit_wait_seconds_total", tuple(sorted(labels.items()))) in after
    names = {name for name, _ in after}
    assert {"rhaipool_egress_inflight_requests", "rhaipool_egress_held_bytes"} <= names
    for name, labels_seen in after:  # bounded labels only: never a call id or a script hash
        assert {k for k, _ in labels_seen} <= BOUNDED_LABELS, name


def test_script_output_is_logged_capped_escaped_and_tagged(busy: ServiceProcess) -> None:
    with busy.client("acme") as c:
        c.put_script("region_hook", "talker", TALKER)
        c.create_region("talky", script="talker", budget=100)
        assert c.render("talky")["fallback"] is False
    log = Path(busy.config.parent / "service.log").read_text(encoding="utf-8")
    assert "\x1b" not in log and "plain line" in log
    records = [json.loads(line) for line in log.splitlines() if "plain line" in line]
    assert len(records) == 1  # one JSON record, never the raw lines
    record = records[0]
    assert record["msg"] == "script output" and record["tenant"] == "acme" and record["script"] == "talker"
    assert record["function"] == "render" and isinstance(record["call_id"], int)
    output = record["output"]
    assert output[0] == "plain line" and output[1] == "escape \\u001b[31m red"
    assert len(output[2]) == MAX_LINE_CHARS and len(output) == MAX_LINES
    assert record["truncated"] is True and record["output_lines"] == 33
    deadline = time.monotonic() + 10  # the call's own line is written once its reply has gone
    while not any(c["request"] == record["request"] and c["tenant"] == "acme" for c in _render_calls(busy)):
        assert time.monotonic() < deadline, "no call log line for the request that printed"
        time.sleep(0.05)


def _render_calls(service: ServiceProcess) -> list[dict[str, object]]:
    log = Path(service.config.parent / "service.log").read_text(encoding="utf-8")
    return [json.loads(line) for line in log.splitlines() if '"op": "render"' in line]
