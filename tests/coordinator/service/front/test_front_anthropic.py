"""``/v1/messages`` with the official ``anthropic`` SDK (sync and async, ``x-api-key`` and bearer
tokens), over the Anthropic-style example script and the OpenAI-style seed, against a real service."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest
from service_support import TOKENS, ServiceProcess

from .conftest import TIGHT_TOKEN, Upstream

PONG: list[Any] = [{"role": "user", "content": "Reply with exactly: PONG"}]
SEARCH = {
    "name": "search",
    "description": "search the web",
    "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}},
}


@pytest.fixture(scope="module")
def client(front: ServiceProcess) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=front.url, api_key=TOKENS["acme"], max_retries=0, timeout=30) as c:
        yield c


def test_a_message_through_the_anthropic_script(client: anthropic.Anthropic, upstream: Upstream) -> None:
    answer = client.messages.create(
        model="anthropic/claude-test-1",
        max_tokens=100,
        system=[{"type": "text", "text": "be terse", "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": "hello there"}],
        stop_sequences=["END"],
        extra_body={"top_k": 5},  # a field the contract has no place for: through extra
    )
    assert answer.type == "message" and answer.role == "assistant" and answer.id.startswith("msg_")
    assert answer.model == "anthropic/claude-test-1"
    assert [b.type for b in answer.content] == ["text"]
    assert answer.content[0].text == "[be terse] claude: hello there"  # type: ignore[union-attr]
    assert answer.stop_reason == "end_turn"
    assert (answer.usage.input_tokens, answer.usage.output_tokens) == (12, 5)
    assert answer.usage.cache_read_input_tokens == 3
    sent = upstream.requests_to("/anthropic/v1/messages")[-1].json()
    assert sent["model"] == "claude-test-1" and sent["max_tokens"] == 100
    assert sent["stop_sequences"] == ["END"] and sent["top_k"] == 5  # through the contract's extra


def test_the_seed_script_answers_the_anthropic_sdk(client: anthropic.Anthropic) -> None:
    answer = client.messages.create(model="groq/standin-small", max_tokens=50, messages=PONG)
    assert answer.content[0].text == "PONG" and answer.stop_reason == "end_turn"  # type: ignore[union-attr]
    assert answer.usage.output_tokens > 0


def test_a_streamed_message(client: anthropic.Anthropic) -> None:
    with client.messages.stream(
        model="anthropic/claude-test-1",
        max_tokens=100,
        messages=[{"role": "user", "content": "one two three"}],
    ) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(pieces) == "claude: one two three" and len(pieces) > 1
    assert final.stop_reason == "end_turn" and final.usage.output_tokens == 5
    assert final.content[0].text == "claude: one two three"  # type: ignore[union-attr]


def test_stream_events_are_the_apis(client: anthropic.Anthropic) -> None:
    events = list(
        client.messages.create(model="groq/standin-small", max_tokens=50, messages=PONG, stream=True)
    )
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds[1:-2] == ["content_block_start", "content_block_delta", "content_block_stop"]
    assert events[-2].delta.stop_reason == "end_turn"  # type: ignore[union-attr]


def test_tools_round_trip(client: anthropic.Anthropic, upstream: Upstream) -> None:
    ask: list[Any] = [{"role": "user", "content": "use search for rhai"}]
    first = client.messages.create(
        model="anthropic/claude-test-1", max_tokens=100, messages=ask, tools=[SEARCH]
    )
    assert first.stop_reason == "tool_use"
    use = first.content[-1]
    assert use.type == "tool_use" and use.name == "search" and use.input == {"query": "use search for rhai"}
    follow = [
        *ask,
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "a language"}],
        },
    ]
    second = client.messages.create(
        model="anthropic/claude-test-1", max_tokens=100, messages=follow, tools=[SEARCH],
        tool_choice={"type": "auto"},
    )  # fmt: skip
    assert second.content[0].text == "claude: tool said: a language"  # type: ignore[union-attr]
    sent = upstream.requests_to("/anthropic/v1/messages")[-1].json()
    assert sent["messages"][1]["content"][-1]["type"] == "tool_use"
    assert sent["tools"][0]["input_schema"] == SEARCH["input_schema"] and sent["tool_choice"] == {
        "type": "auto"
    }


def test_a_streamed_tool_call(client: anthropic.Anthropic) -> None:
    ask: list[Any] = [{"role": "user", "content": "use search x"}]
    with client.messages.stream(
        model="anthropic/claude-test-1", max_tokens=100, messages=ask, tools=[SEARCH]
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    use = final.content[-1]
    assert use.type == "tool_use" and use.id == "toolu_1" and use.input == {"query": "use search x"}


def test_the_async_client_with_a_bearer_token(front: ServiceProcess) -> None:
    async def main() -> tuple[str, str]:
        async with anthropic.AsyncAnthropic(
            base_url=front.url, auth_token=TOKENS["acme"], max_retries=0
        ) as c:
            answer = await c.messages.create(model="anthropic/claude-test-2", max_tokens=20, messages=PONG)
            async with c.messages.stream(
                model="groq/standin-small", max_tokens=20, messages=[{"role": "user", "content": "x y"}]
            ) as stream:
                text = "".join([piece async for piece in stream.text_stream])
            return answer.content[0].text, text  # type: ignore[union-attr]

    assert asyncio.run(main()) == ("PONG", "echo: x y")


def test_count_tokens(client: anthropic.Anthropic) -> None:
    counted = client.messages.count_tokens(
        model="anthropic/claude-test-1", messages=[{"role": "user", "content": "x" * 70}]
    )
    assert counted.input_tokens == 20  # the script's count_tokens: ceil(70 bytes / 3.5)


def test_models_with_the_anthropic_sdk(client: anthropic.Anthropic) -> None:
    models = {m.id: m.display_name for m in client.models.list()}
    assert models["anthropic/claude-test-1"] == "Claude Test 1" and "groq/standin-small" in models


# -- errors --------------------------------------------------------------------------------------


def test_a_wrong_key_is_401_in_anthropic_shape(front: ServiceProcess) -> None:
    with anthropic.Anthropic(base_url=front.url, api_key="nope", max_retries=0) as bad:
        with pytest.raises(anthropic.AuthenticationError) as refused:
            bad.messages.create(model="anthropic/claude-test-1", max_tokens=5, messages=PONG)
        assert refused.value.body == {
            "type": "error",
            "error": {"type": "authentication_error", "message": "unauthorized"},
        }


@pytest.mark.parametrize(
    ("body", "status", "kind", "words"),
    [
        ({"model": "nosuch/m", "messages": PONG}, 404, "not_found_error", "no provider named 'nosuch'"),
        ({"model": "claude", "messages": PONG}, 404, "not_found_error", "PROVIDER/MODEL"),
        (
            {
                "model": "anthropic/c",
                "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}],
            },
            400,
            "invalid_request_error",
            "'image' is not supported",
        ),
        (
            {
                "model": "anthropic/c",
                "messages": PONG,
                "tools": [{"type": "web_search_20250305", "name": "w"}],
            },
            400,
            "invalid_request_error",
            "server tools",
        ),
        ({"model": "anthropic/c"}, 400, "invalid_request_error", "missing field 'messages'"),
        (
            {"model": "anthropic/c", "messages": PONG, "max_tokens": "10"},
            400,
            "invalid_request_error",
            "max_tokens",
        ),
    ],
)
def test_refusals_name_the_problem(
    front: ServiceProcess, body: dict[str, Any], status: int, kind: str, words: str
) -> None:
    answer = httpx.post(
        front.url + "/v1/messages",
        json=body,
        headers={"x-api-key": TOKENS["acme"], "anthropic-version": "2023-06-01"},
    )
    assert answer.status_code == status, answer.text
    error = answer.json()
    assert error["type"] == "error" and error["error"]["type"] == kind and words in error["error"]["message"]


def test_a_script_failure_is_500_and_not_retried(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.InternalServerError) as failed:
        client.messages.create(model="thrower/m", max_tokens=5, messages=PONG)
    assert failed.value.body["error"]["type"] == "api_error"  # type: ignore[index]
    assert failed.value.response.headers["x-should-retry"] == "false"


def test_an_upstream_429_is_retried_by_the_sdk(front: ServiceProcess, upstream: Upstream) -> None:
    upstream.refuse_next, upstream.refused = 1, 0
    with anthropic.Anthropic(base_url=front.url, api_key=TOKENS["acme"], max_retries=2) as patient:
        began = time.monotonic()
        answer = patient.messages.create(model="groq/standin-small", max_tokens=5, messages=PONG)
        assert answer.content[0].text == "PONG" and upstream.refused == 1  # type: ignore[union-attr]
        assert time.monotonic() - began >= 0.9


def test_a_429_is_a_rate_limit_error(client: anthropic.Anthropic, upstream: Upstream) -> None:
    upstream.refuse_next = 1
    with pytest.raises(anthropic.RateLimitError) as limited:
        client.messages.create(model="groq/standin-small", max_tokens=5, messages=PONG)
    assert limited.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert limited.value.response.headers["retry-after"] == "1"


def test_the_gates_own_refusal_counts_an_x_api_key_and_is_shaped(
    front: ServiceProcess, upstream: Upstream
) -> None:
    """A tenant at its ``max_connections`` is refused by the gate before any route runs: the
    ``x-api-key`` names the tenant there too, and the refusal is the API's 429."""
    slow: list[Any] = [{"role": "user", "content": "SLOW please"}]
    with anthropic.Anthropic(base_url=front.url, api_key=TIGHT_TOKEN, max_retries=0) as tight:
        first = threading.Thread(
            target=lambda: tight.messages.create(model="groq/standin-small", max_tokens=5, messages=slow)
        )
        first.start()
        deadline = time.monotonic() + 20
        while not any(b"SLOW" in r.body for r in upstream.requests_to("/v1/chat/completions")):
            assert time.monotonic() < deadline, "the first request never reached the upstream"
            time.sleep(0.02)  # until the first request is in flight (the upstream holds it 1.5 s)
        try:
            with pytest.raises(anthropic.RateLimitError) as refused:
                tight.messages.create(model="groq/standin-small", max_tokens=5, messages=PONG)
        finally:
            first.join()
    assert refused.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert "max_connections" in refused.value.body["error"]["message"]  # type: ignore[index]
    assert refused.value.response.headers["retry-after"] == "1"


def test_a_stream_failing_after_its_start_ends_with_an_error_event(client: anthropic.Anthropic) -> None:
    texts = []
    with (
        pytest.raises(anthropic.APIStatusError) as broke,
        client.messages.stream(model="halfway/m", max_tokens=5, messages=PONG) as stream,
    ):
        texts.extend(stream.text_stream)
    assert texts == ["partial "] and "broke mid-stream" in str(broke.value)


# -- what the reference runtime sends --------------------------------------------------------------


def test_the_reference_runtimes_anthropic_provider_body(front: ServiceProcess, upstream: Upstream) -> None:
    """Exactly what GEMISIS/leviath's ``anthropic`` provider sends with ``anthropic_base_url``: system
    blocks and the last block of a message marked ``cache_control``, the contract's own ``tool_use`` /
    ``tool_result`` blocks, the widened temperature, the stage's extra parameters merged at the top
    level, and its token count at ``/messages/count_tokens`` (no ``max_tokens``)."""
    headers = {
        "x-api-key": TOKENS["acme"],
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "extended-cache-ttl-2025-04-11",
        "content-type": "application/json",
    }
    cache = {"type": "ephemeral", "ttl": "1h"}
    body = {
        "model": "anthropic/claude-test-1",
        "max_tokens": 4096,
        "temperature": 0.699999988079071,
        "system": [
            {"type": "text", "text": "You are terse.", "cache_control": cache},
            {"type": "text", "text": "Region two."},
        ],
        "messages": [
            {"role": "user", "content": "use search for rhai"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_9", "name": "search", "input": {"query": "rhai"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_9", "content": "a language",
                     "is_error": False, "cache_control": cache},
                ],
            },
        ],
        "tools": [{"name": "search", "description": "search", "input_schema": SEARCH["input_schema"]}],
        "top_p": 0.9,
    }  # fmt: skip
    with httpx.Client(base_url=front.url + "/v1", headers=headers, timeout=30) as http:
        plain = http.post("/messages", json=body)
        assert plain.status_code == 200, plain.text
        assert plain.json()["content"] == [
            {"type": "text", "text": "[You are terse. Region two.] claude: tool said: a language"}
        ]
        sent = upstream.requests_to("/anthropic/v1/messages")[-1].json()
        assert sent["messages"][1]["content"][0]["input"] == {"query": "rhai"} and sent["top_p"] == 0.9
        with http.stream("POST", "/messages", json={**body, "stream": True}) as streamed:
            assert streamed.status_code == 200
            kinds = [line[7:] for line in streamed.iter_lines() if line.startswith("event: ")]
        assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
        ask = {"model": "anthropic/claude-test-1", "messages": [{"role": "user", "content": "x" * 35}]}
        counted = http.post("/messages/count_tokens", json=ask)
        assert counted.status_code == 200 and counted.json() == {"input_tokens": 10}
