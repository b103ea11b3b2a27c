"""A request for a tenant another live coordinator owns is forwarded to that owner: two ``rhaipool
serve`` processes over one real PostgreSQL and the stand-in API on 127.0.0.1.

The tenant's owner answers what reaches the other coordinator: a write, a render, a provider's stream
and the /v1 fronts' streams (OpenAI and Anthropic SDKs, the latter with ``x-api-key``); a retried
write with the same ``Idempotency-Key`` applies once across the forward; a bad token is refused by
the coordinator it reached; a request that was forwarded once already is refused rather than forwarded
again (503, ``Retry-After``); an owner that dies in the middle of a forwarded stream ends the client's
connection, and one that cannot be reached is a 503 with ``Retry-After``, never an answer of the
coordinator that forwarded.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from postgres_server import PostgresServer
from service_support import TOKENS, ServiceProcess, free_port, write_config

from coordinator._cli.demo import GROQ_SCRIPT
from coordinator.bench.standin import StandinServer
from coordinator.service.config import ServiceConfigError, parse_service_config
from coordinator.service.forward import advertised

HOOK = 'fn render(ctx) { ctx.entries.map(|e| e.content).reduce(|a, b| a + "|" + b, "") }'
AUTH = {"Authorization": f"Bearer {TOKENS['acme']}"}
WORDS = " ".join(f"w{i}" for i in range(30))
ASK = {"model": "standin-small", "messages": [{"role": "user", "content": WORDS}]}


def _start(folder: Path, url: str, upstream: str, *, lease: float) -> ServiceProcess:
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = write_config(folder, port=port, workers=1, standin=upstream, extra=f"lease_secs = {lease}")
    config.write_text(config.read_text().replace('database = "state/rhaipool.db"', f'database = "{url}"'))
    return ServiceProcess.start(config, port)


def _served_by(reply: httpx.Response, service: ServiceProcess) -> bool:
    """Whether the reply says the coordinator ``service`` answered it (its id holds its pid)."""
    return f"/{service.process.pid}/" in reply.headers.get("rhaipool-served-by", "")


@pytest.fixture(scope="module")
def upstream() -> Iterator[StandinServer]:
    with StandinServer(stream_pause=0.05) as server:
        yield server


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory, postgres: PostgresServer, upstream: StandinServer
) -> Iterator[tuple[ServiceProcess, ServiceProcess]]:
    """Coordinator a owns acme (its first request went there); b is the other one."""
    folder = tmp_path_factory.mktemp("forwarding")
    url = postgres.fresh()
    a = _start(folder / "a", url, upstream.base_url, lease=30.0)
    b = _start(folder / "b", url, upstream.base_url, lease=30.0)
    try:
        with a.client("acme") as c:
            c.put_script("region_hook", "log", HOOK)
            c.put_script("provider", "groq", GROQ_SCRIPT.read_text())
            c.create_region("log", script="log", budget=10_000, persistent=True)
            c.write("log", "by a", tokens=1)
        yield a, b
    finally:
        a.stop()
        b.stop()


def test_a_write_and_a_render_sent_to_the_other_coordinator_are_answered_by_the_owner(
    pair: tuple[ServiceProcess, ServiceProcess],
) -> None:
    a, b = pair
    wrote = httpx.post(
        f"{b.url}/api/regions/log/write", json={"content": "via b", "tokens": 1}, headers=AUTH, timeout=30
    )
    assert wrote.status_code == 200, wrote.text
    assert _served_by(wrote, a)
    assert len(wrote.headers.get_list("date")) == len(wrote.headers.get_list("server")) == 1
    rendered = httpx.post(f"{b.url}/api/regions/log/render", json={}, headers=AUTH, timeout=30)
    assert rendered.status_code == 200, rendered.text
    assert _served_by(rendered, a)
    direct = httpx.post(f"{a.url}/api/regions/log/render", json={}, headers=AUTH, timeout=30)
    assert rendered.json() == direct.json()
    assert "by a|via b" in rendered.text
    assert "rhaipool-served-by" not in direct.headers  # served where it arrived: nothing forwarded
    with b.client("acme") as c:  # the client library, through b
        assert [e["content"] for e in c.get_region("log")["entries"]][:2] == ["by a", "via b"]
    queried = httpx.get(f"{b.url}/api/scripts?agent=x", headers=AUTH, timeout=30)  # the query travels
    assert queried.status_code == 400 and "agent" in queried.text and _served_by(queried, a)
    bad = httpx.get(f"{b.url}/api/regions/log", headers={"Authorization": "Bearer wrong"}, timeout=30)
    assert bad.status_code == 401 and "rhaipool-served-by" not in bad.headers  # refused where it arrived


def test_an_idempotency_key_holds_across_the_forward(pair: tuple[ServiceProcess, ServiceProcess]) -> None:
    a, b = pair
    key = {"Idempotency-Key": str(uuid.uuid4()), **AUTH}
    body = {"content": "once", "tokens": 1}
    first = httpx.post(f"{b.url}/api/regions/log/write", json=body, headers=key, timeout=30)
    again = httpx.post(f"{b.url}/api/regions/log/write", json=body, headers=key, timeout=30)
    direct = httpx.post(f"{a.url}/api/regions/log/write", json=body, headers=key, timeout=30)
    assert first.status_code == again.status_code == direct.status_code == 200, first.text
    assert "idempotent-replayed" not in first.headers
    assert again.headers["idempotent-replayed"] == direct.headers["idempotent-replayed"] == "true"
    assert again.content == first.content
    with a.client("acme") as c:
        contents = [e["content"] for e in c.get_region("log")["entries"]]
    assert contents.count("once") == 1


def test_streams_are_relayed_as_they_come(pair: tuple[ServiceProcess, ServiceProcess]) -> None:
    a, b = pair
    with httpx.stream(
        "POST", f"{b.url}/api/providers/groq/stream", json=ASK, headers=AUTH, timeout=30
    ) as reply:
        assert reply.status_code == 200 and _served_by(reply, a)
        assert reply.headers["content-type"].startswith("text/event-stream")
        begun = time.monotonic()
        arrivals = []
        text = ""
        for chunk in reply.iter_text():
            arrivals.append(time.monotonic() - begun)
            text += chunk
    assert "event: done" in text
    assert text.count("event: delta") >= 30 or text.count("data:") >= 30, text[:500]
    assert len(arrivals) > 5 and arrivals[-1] - arrivals[0] > 0.5  # chunk by chunk, not one body at the end
    ask = [{"role": "user", "content": WORDS}]
    with openai.OpenAI(base_url=b.url + "/v1", api_key=TOKENS["acme"], max_retries=0) as oa:
        chunks = list(oa.chat.completions.create(model="groq/standin-small", messages=ask, stream=True))  # type: ignore[arg-type]
    said = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert said.split() == ["echo:", *WORDS.split()]
    with anthropic.Anthropic(base_url=b.url, api_key=TOKENS["acme"], max_retries=0) as an:  # x-api-key
        events = list(
            an.messages.create(model="groq/standin-small", max_tokens=500, messages=ask, stream=True)  # type: ignore[arg-type]
        )
    assert events[0].type == "message_start" and events[-1].type == "message_stop"


def test_a_forwarded_request_is_never_forwarded_again(pair: tuple[ServiceProcess, ServiceProcess]) -> None:
    a, b = pair
    hop = {"rhaipool-forwarded-by": "some/other/coordinator", **AUTH}
    refused = httpx.post(
        f"{b.url}/api/regions/log/write", json={"content": "looped", "tokens": 1}, headers=hop, timeout=30
    )
    assert refused.status_code == 503, refused.text
    assert refused.headers["retry-after"]
    assert "served by another coordinator" in refused.text and "forwarded here already" in refused.text
    served = httpx.get(f"{a.url}/api/regions/log", headers=hop, timeout=30)  # the owner serves it
    assert served.status_code == 200 and "looped" not in served.text


def test_an_owner_that_dies_mid_forward_ends_the_call_with_an_error(
    tmp_path: Path, postgres: PostgresServer
) -> None:
    url = postgres.fresh()
    with StandinServer(stream_pause=0.2) as slow:
        a = _start(tmp_path / "a", url, slow.base_url, lease=30.0)
        b = _start(tmp_path / "b", url, slow.base_url, lease=30.0)
        try:
            with a.client("acme") as c:
                c.put_script("provider", "groq", GROQ_SCRIPT.read_text())
            with httpx.stream(
                "POST", f"{b.url}/api/providers/groq/stream", json=ASK, headers=AUTH, timeout=30
            ) as reply:
                assert reply.status_code == 200 and _served_by(reply, a)
                chunks = reply.iter_raw()
                assert next(chunks)
                a.kill9()
                begun = time.monotonic()
                with pytest.raises(httpx.RemoteProtocolError):
                    for _chunk in chunks:
                        pass
                cut = time.monotonic() - begun
                assert cut < 5.0, cut
                print(f"the forwarded stream ended {cut:.2f} s after kill -9 of the owner")
            gone = httpx.post(f"{b.url}/api/providers/groq/inference", json=ASK, headers=AUTH, timeout=30)
            assert gone.status_code == 503 and gone.headers["retry-after"], gone.text
            assert "cannot be reached" in gone.text and "served by another coordinator" in gone.text
            assert b.process.poll() is None
        finally:
            a.stop()
            b.stop()


def test_a_forward_to_a_paused_owner_ends_once_its_lease_moves(
    tmp_path: Path, postgres: PostgresServer
) -> None:
    """A paused owner (SIGSTOP: a frozen VM) accepts the connection but never answers; the forward
    ends with a 503 when its lease runs out and the coordinator that forwarded takes the tenant, and
    the next request is served there (or, when the pause caught the owner inside a transaction, the
    request itself, once the server ended that transaction and the lease ran out)."""
    url = postgres.fresh()
    with StandinServer() as upstream:
        a = _start(tmp_path / "a", url, upstream.base_url, lease=2.0)
        b = _start(tmp_path / "b", url, upstream.base_url, lease=2.0)
        try:
            with a.client("acme") as c:
                c.put_script("region_hook", "log", HOOK)
                c.create_region("log", script="log", budget=10_000, persistent=True)
                c.write("log", "by a", tokens=1)
            a.process.send_signal(signal.SIGSTOP)
            try:
                begun = time.monotonic()
                stuck = httpx.post(
                    f"{b.url}/api/regions/log/write",
                    json={"content": "x", "tokens": 1},
                    headers=AUTH,
                    timeout=30,
                )
                waited = time.monotonic() - begun
                assert waited < 2.0 + 3.0, waited
                if stuck.status_code == 200:
                    # The pause caught a inside a renewal's transaction, its lease row locked: b's take
                    # waited for the server to end that transaction (idle longer than a lease), found
                    # the lease run out and served the write itself; nothing was forwarded.
                    assert "rhaipool-served-by" not in stuck.headers
                    written = ["by a", "x"]
                else:
                    assert stuck.status_code == 503 and stuck.headers["retry-after"], stuck.text
                    assert (
                        "stopped answering and lost its lease" in stuck.text
                        and "may have been applied" in stuck.text
                    )
                    written = ["by a"]  # a's write, if it ever runs, is fenced
                served = httpx.get(f"{b.url}/api/regions/log", headers=AUTH, timeout=30)
                assert served.status_code == 200 and "rhaipool-served-by" not in served.headers
                assert [e["content"] for e in served.json()["entries"]] == written
            finally:
                a.process.send_signal(signal.SIGCONT)
            print(f"a forward to a paused owner ended after {waited:.2f} s (lease 2 s)")
        finally:
            a.stop()
            b.stop()


@pytest.mark.parametrize(
    ("serve", "expected"),
    [
        ({"listen": "10.0.0.5:9000"}, "http://10.0.0.5:9000"),
        ({"listen": "[fd00::5]:9000"}, "http://[fd00::5]:9000"),
        (
            {"listen": "0.0.0.0:9000", "advertise_url": "https://coordinator-1.internal:9443/"},
            "https://coordinator-1.internal:9443",
        ),
    ],
)
def test_the_advertised_address_defaults_to_listen(serve: dict[str, str], expected: str) -> None:
    config = parse_service_config({"serve": serve}, Path("."))
    assert advertised(config) == expected


def test_listening_on_every_interface_advertises_the_address_that_reaches_the_database() -> None:
    config = parse_service_config(
        {"serve": {"listen": "0.0.0.0:9000", "database": "postgresql://u@127.0.0.1:5432/x"}}, Path(".")
    )
    assert config.advertise_url is None and advertised(config) == "http://127.0.0.1:9000"


@pytest.mark.parametrize(
    "bad",
    ["coordinator-1:8765", "ftp://coordinator-1", "http://c:99999", "http://c:1/api", "http://u@c:1", 8765],
)
def test_a_bad_advertise_url_is_refused_naming_the_key(bad: object) -> None:
    with pytest.raises(ServiceConfigError, match=r"\[serve\] advertise_url must be"):
        parse_service_config({"serve": {"advertise_url": bad}}, Path("."))
