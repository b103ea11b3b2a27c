"""A /v1 stream the service cuts ends with the API's error event (the SDKs raise it), not a silent
close: at the end of a drain's grace, "shutting down"; when its tenant is revoked, an authentication
error. Its own service: the last test stops it."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import openai
import pytest
from service_support import TOKENS, ServiceProcess, free_port, write_config

from coordinator._cli.demo import GROQ_SCRIPT
from coordinator.bench.standin import StandinServer

INITECH = "initech-token"
WORDS = " ".join(f"w{i}" for i in range(50))  # 50 words, 0.2 s apart: a 10 s stream


@pytest.fixture(scope="module")
def slow_upstream() -> Iterator[StandinServer]:
    with StandinServer(stream_pause=0.2) as server:
        yield server


@pytest.fixture(scope="module")
def draining(
    tmp_path_factory: pytest.TempPathFactory, slow_upstream: StandinServer
) -> Iterator[ServiceProcess]:
    port = free_port()
    tenants = {**TOKENS, "initech": INITECH}
    config = write_config(
        tmp_path_factory.mktemp("drain"), port=port, standin=slow_upstream.base_url, tenants=tenants
    )
    running = ServiceProcess.start(config, port)  # grace_secs = 3
    for tenant in ("acme", "initech"):
        with running.client(None, token=tenants[tenant]) as c:
            c.put_script("provider", "groq", GROQ_SCRIPT.read_text())
    yield running
    assert running.stop() == 0


@dataclass
class Streams:
    """One stream of each route, each past its first event: native lines, OpenAI chunks, Anthropic events."""

    native: Iterator[str]
    chat: Iterator[Any]
    message: Iterator[Any]


@contextmanager
def open_streams(service: ServiceProcess, token: str) -> Iterator[Streams]:
    ask = [{"role": "user", "content": WORDS}]
    with (
        openai.OpenAI(base_url=service.url + "/v1", api_key=token, max_retries=0) as oa,
        anthropic.Anthropic(base_url=service.url, api_key=token, max_retries=0) as an,
        httpx.Client() as http,
        http.stream(
            "POST",
            f"{service.url}/api/providers/groq/stream",
            json={"model": "standin-small", "messages": ask},
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        ) as streamed,
    ):
        native = streamed.iter_lines()
        chat = iter(oa.chat.completions.create(model="groq/standin-small", messages=ask, stream=True))  # type: ignore[arg-type]
        message = iter(
            an.messages.create(model="groq/standin-small", max_tokens=500, messages=ask, stream=True)
        )  # type: ignore[arg-type]
        assert next(native).startswith("data: ")
        assert next(chat).choices[0].delta.role == "assistant"
        assert next(message).type == "message_start"
        yield Streams(native, chat, message)


def last_event(native: Iterator[str]) -> list[str]:
    """The native stream's last event (its two lines), once it has ended."""
    return [line for line in native if line][-2:]


def test_streams_of_a_revoked_tenant_end_with_an_authentication_error_event(
    draining: ServiceProcess, slow_upstream: StandinServer
) -> None:
    """The operator drops the tenant from the config and reloads it (SIGHUP) while its streams run."""
    with open_streams(draining, INITECH) as streams:
        write_config(draining.config.parent, port=draining.port, standin=slow_upstream.base_url)
        draining.process.send_signal(signal.SIGHUP)
        last = last_event(streams.native)
        assert last[0] == "event: error" and "revoked" in last[1], last
        with pytest.raises(openai.APIError) as cut:
            for _chunk in streams.chat:
                pass
        assert "revoked" in cut.value.message and "shutting down" not in cut.value.message
        assert cut.value.code == "invalid_api_key", cut.value.body
        with pytest.raises(anthropic.APIStatusError) as ended:
            for _event in streams.message:
                pass
        assert ended.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
        assert "revoked" in ended.value.body["error"]["message"]  # type: ignore[index]


def test_streams_cut_by_a_drain_end_with_an_error_event(draining: ServiceProcess) -> None:
    with open_streams(draining, TOKENS["acme"]) as streams:
        draining.process.send_signal(signal.SIGTERM)  # in flight: they get grace_secs, then are cut
        with pytest.raises(openai.APIError) as cut:
            for _chunk in streams.chat:
                pass
        assert "shutting down" in cut.value.message
        with pytest.raises(anthropic.APIStatusError) as ended:
            for _event in streams.message:
                pass
        assert ended.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
        last = last_event(streams.native)
        assert last[0] == "event: error" and "shutting down" in last[1], last
    assert draining.process.wait(30) == 0
