"""Provider operations through the service, against the stand-in API on 127.0.0.1."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from service_support import ADMIN, TOKENS, ServiceProcess, free_port, write_config

from coordinator._cli.demo import GROQ_SCRIPT
from coordinator.client import ServiceError

PONG = {"model": "standin-small", "messages": [{"role": "user", "content": "Reply with exactly: PONG"}]}


@pytest.fixture(scope="module")
def acme(service: ServiceProcess) -> object:
    with service.client("acme") as c:
        c.put_script("provider", "groq", GROQ_SCRIPT.read_text())
        c.put_script("provider", "thrower", 'fn initialize(c) { #{} }\nfn inference(s, r) { throw "boom" }')
        c.put_script("provider", "noinference", "fn initialize(c) { #{} }")
        yield c


def test_inference_answers_what_infer_json_prints(acme: object) -> None:
    answer = acme.inference("groq", PONG)
    assert answer["content"] == "PONG" and answer["finish_reason"] == "Complete"
    assert set(answer) >= {"content", "tool_calls", "tokens_used", "finish_reason", "parts"}
    assert answer["tokens_used"]["total_tokens"] > 0


@pytest.mark.parametrize(
    ("provider", "request_body", "status", "klass"),
    [
        ("thrower", PONG, 502, "Other"),
        ("nosuch", PONG, 404, "Other"),
        ("noinference", PONG, 422, "Other"),
        ("groq", {"messages": "not a list"}, 400, "Other"),
    ],
)
def test_inference_errors_are_error_objects(
    acme: object, provider: str, request_body: dict[str, object], status: int, klass: str
) -> None:
    with pytest.raises(ServiceError) as failed:
        acme.inference(provider, request_body)
    assert failed.value.status == status
    assert failed.value.error["class"] == klass and isinstance(failed.value.error["transient"], bool)


def test_malformed_inference_body_is_400_error_object(service: ServiceProcess, acme: object) -> None:
    r = httpx.post(
        service.url + "/api/providers/groq/inference", content=b"{oops",
        headers={"Authorization": f"Bearer {TOKENS['acme']}"},
    )  # fmt: skip
    assert r.status_code == 400 and "not JSON" in r.json()["error"]["message"]


def test_stream_with_a_slow_reader_gets_every_chunk(acme: object) -> None:
    words = " ".join(f"w{i}" for i in range(40))
    ask = {"model": "standin-small", "messages": [{"role": "user", "content": words}]}
    deltas = []
    for item in acme.stream("groq", ask):
        assert "error" not in item, item
        deltas.append(item.get("delta") or "")
        if len(deltas) < 4:
            time.sleep(0.2)  # a slow reader: the stream waits for it
    assert "".join(deltas).split() == ["echo:", *words.split()]


def test_stream_of_a_failing_provider_sends_an_error_event(acme: object) -> None:
    items = list(acme.stream("thrower", PONG))
    assert items and items[-1]["error"]["class"] == "Other"


def test_count_tokens_and_models(acme: object) -> None:
    assert acme.count_tokens("groq", "hello world", "standin-small")["tokens"] > 0
    models = acme.list_models("groq")
    assert models["provider"] == "groq"
    assert [m["id"] for m in models["models"]] == ["standin-small", "standin-large"]


def test_another_tenant_cannot_run_a_tenants_provider(service: ServiceProcess, acme: object) -> None:
    with service.client("globex") as globex:
        for call in (
            lambda: globex.inference("groq", PONG),
            lambda: globex.count_tokens("groq", "x"),
            lambda: globex.list_models("groq"),
            lambda: list(globex.stream("groq", PONG)),
        ):
            with pytest.raises(ServiceError) as refused:
                call()
            assert refused.value.status == 404


def test_provider_state_from_initialize_is_stored(service: ServiceProcess, acme: object) -> None:
    acme.inference("groq", PONG)
    database = service.config.parent / "state" / "rhaipool.db"
    with sqlite3.connect(database) as db:
        (state,) = db.execute(
            "SELECT state FROM provider_state WHERE tenant = 'acme' AND name = 'groq'"
        ).fetchone()
    assert json.loads(state)["model"] == "llama-3.3-70b-versatile"


def test_calls_are_logged_as_json_lines_with_tenant_script_and_hash(
    service: ServiceProcess, acme: object
) -> None:
    acme.inference("groq", PONG)
    calls = []
    for line in service.log().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("msg") == "call" and record.get("op") == "inference":
                calls.append(record)
    assert calls, service.log()[-2000:]
    last = calls[-1]
    assert last["tenant"] == "acme" and last["script"] == "groq" and len(last["sha256"]) == 64
    assert last["status"] == 200 and last["duration_ms"] > 0


def test_every_provider_call_runs_as_the_calling_tenant(service: ServiceProcess, acme: object) -> None:
    """The provider's load and ``initialize`` too: none of them falls back to the default tenant."""
    acme.inference("groq", PONG)
    acme.count_tokens("groq", "hello", "standin-small")
    acme.list_models("groq")
    text = httpx.get(service.url + "/metrics", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10).text
    tenants = {
        s.labels["tenant"]
        for family in text_string_to_metric_families(text)
        if family.name == "rhaipool_queue_wait_seconds"
        for s in family.samples
    }
    assert "acme" in tenants and "default" not in tenants


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b'{"model": "m", "mesages": []}', "unknown field 'mesages': did you mean 'messages'?"),
        (b'{"model": "m", "temperature": Infinity}', "finite"),
        (b'{"model": "m", "messages": [{"role": "user", "content": [1]}]}', "messages[0].content"),
        (b'{"model": "m", "messages": [{"role": "user", "content": "\\udc00"}]}', "surrogate"),
        (b'{"model": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deep"),
    ],
)
def test_bad_inference_bodies_are_400_error_objects(
    service: ServiceProcess, acme: object, body: bytes, why: str
) -> None:
    for operation in ("inference", "stream"):
        r = httpx.post(
            f"{service.url}/api/providers/groq/{operation}", content=body,
            headers={"Authorization": f"Bearer {TOKENS['acme']}"}, timeout=30,
        )  # fmt: skip
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["class"] == "Other" and error["transient"] is False and why in error["message"]


def test_count_tokens_body_is_checked(service: ServiceProcess, acme: object) -> None:
    r = httpx.post(
        f"{service.url}/api/providers/groq/count_tokens", json={"txt": "x"},
        headers={"Authorization": f"Bearer {TOKENS['acme']}"}, timeout=30,
    )  # fmt: skip
    assert r.status_code == 400 and "did you mean 'text'" in r.json()["error"]["message"]


def test_provider_names_follow_the_name_rule(service: ServiceProcess) -> None:
    r = httpx.post(
        f"{service.url}/api/providers/{'x' * 65}/inference", json=PONG,
        headers={"Authorization": f"Bearer {TOKENS['acme']}"}, timeout=30,
    )  # fmt: skip
    assert r.status_code == 400 and "Invalid provider name" in r.json()["error"]


@pytest.fixture(scope="module")
def narrow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    """A service whose tenants may hold one stream each."""
    folder = tmp_path_factory.mktemp("narrow")
    port = free_port()
    config = write_config(folder, port=port, extra="[serve.tenant_defaults]\nmax_streams = 1")
    running = ServiceProcess.start(config, port)
    with running.client("acme") as c:
        slow = 'fn initialize(c) { #{} }\nfn inference(s, r) { sleep(1.0); #{ content: "z" } }'
        c.put_script("provider", "slow", slow)
    yield running
    assert running.stop() == 0


def _stream(service: ServiceProcess, **kw: Any) -> Any:
    return httpx.stream(
        "POST", f"{service.url}/api/providers/slow/stream", json=PONG,
        headers={"Authorization": f"Bearer {TOKENS['acme']}"}, timeout=30, **kw,
    )  # fmt: skip


def test_a_stream_holds_one_of_max_streams_until_it_ends(narrow: ServiceProcess) -> None:
    with _stream(narrow) as held:
        assert held.status_code == 200
        refused = httpx.post(
            f"{narrow.url}/api/providers/slow/stream", json=PONG,
            headers={"Authorization": f"Bearer {TOKENS['acme']}"}, timeout=30,
        )  # fmt: skip
        assert refused.status_code == 429 and "max_streams" in refused.json()["error"]
        other = httpx.post(
            f"{narrow.url}/api/providers/slow/stream", json=PONG,
            headers={"Authorization": f"Bearer {TOKENS['globex']}"}, timeout=30,
        )  # fmt: skip
        assert other.status_code == 404  # globex has no such script, but its own stream quota is free
        assert "event: done" in held.read().decode()
    with _stream(narrow) as again:  # released at the end of the first
        assert again.status_code == 200 and "event: done" in again.read().decode()


def test_a_reader_that_leaves_early_frees_its_stream(narrow: ServiceProcess) -> None:
    with _stream(narrow) as left:
        assert left.status_code == 200
    deadline = time.monotonic() + 20
    while True:
        with _stream(narrow) as next_one:
            if next_one.status_code == 200:
                assert "event: done" in next_one.read().decode()
                break
        assert time.monotonic() < deadline, "the stream slot was never freed"
        time.sleep(0.2)
