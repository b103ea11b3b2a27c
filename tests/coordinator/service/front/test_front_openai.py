"""``/v1/chat/completions`` and ``/v1/models`` with the official ``openai`` SDK (sync and async), and
with exactly what the reference runtime's own ``openai`` provider sends, against a real service."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import anthropic as anthropic_sdk
import httpx
import openai
import pytest
from service_support import TOKENS, ServiceProcess

from .conftest import Upstream

PONG = [{"role": "user", "content": "Reply with exactly: PONG"}]
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "search the web",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    },
}


@pytest.fixture(scope="module")
def client(front: ServiceProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=front.url + "/v1", api_key=TOKENS["acme"], max_retries=0, timeout=30) as c:
        yield c


def test_a_completion_through_the_seed_script(client: openai.OpenAI, upstream: Upstream) -> None:
    answer = client.chat.completions.create(
        model="groq/standin-small",
        messages=[{"role": "system", "content": "Be brief."}, *PONG],
        max_completion_tokens=64,
        temperature=0.2,
    )
    assert answer.object == "chat.completion" and answer.id.startswith("chatcmpl-")
    assert answer.model == "groq/standin-small"
    choice = answer.choices[0]
    assert choice.message.role == "assistant" and choice.message.content == "PONG"
    assert choice.finish_reason == "stop"
    assert answer.usage is not None and answer.usage.total_tokens > 0
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + answer.usage.completion_tokens
    sent = upstream.requests_to("/v1/chat/completions")[-1].json()  # what the script sent upstream
    assert sent["model"] == "standin-small" and sent["max_tokens"] == 64 and sent["temperature"] == 0.2
    assert sent["messages"][0]["role"] == "system"  # the seed joins system blocks after a "\n\n"
    assert sent["messages"][0]["content"].strip() == "Be brief."


def test_a_streamed_completion_with_usage(client: openai.OpenAI) -> None:
    words = " ".join(f"w{i}" for i in range(12))
    chunks = list(
        client.chat.completions.create(
            model="groq/standin-small",
            messages=[{"role": "user", "content": words}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.split() == ["echo:", *words.split()]
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0


def test_tools_round_trip(client: openai.OpenAI, upstream: Upstream) -> None:
    ask: list[Any] = [{"role": "user", "content": "please use search for rhai"}]
    first = client.chat.completions.create(model="groq/standin-small", messages=ask, tools=[SEARCH])
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    call = choice.message.tool_calls[0]  # type: ignore[index]
    assert call.type == "function" and call.function.name == "search"
    assert json.loads(call.function.arguments) == {"query": "please use search for rhai"}
    follow = [
        *ask,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "rhai is a scripting language"},
    ]
    second = client.chat.completions.create(
        model="groq/standin-small", messages=follow, tools=[SEARCH], tool_choice="auto"
    )
    assert second.choices[0].finish_reason == "stop"
    sent = upstream.requests_to("/v1/chat/completions")[-1].json()
    # the seed script forwards the contract's blocks: the call and its result, as tool_use / tool_result
    assert sent["messages"][1]["content"][0] == {
        "type": "tool_use", "id": call.id, "name": "search", "input": {"query": "please use search for rhai"},
    }  # fmt: skip
    assert sent["messages"][2]["content"][0]["tool_use_id"] == call.id


def test_streamed_tool_call_deltas(client: openai.OpenAI) -> None:
    """The Anthropic-style script streams text, then its tool call in pieces under the API's block
    index 1; the OpenAI deltas number the call 0 and carry its id and name first."""
    ask: Any = [{"role": "user", "content": "explain, then use search now"}]
    chunks = list(
        client.chat.completions.create(
            model="anthropic/claude-test-1", messages=ask, tools=[SEARCH], stream=True
        )
    )
    deltas = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or []]
    assert [d.index for d in deltas] == [0, 0, 0]
    assert (deltas[0].id, deltas[0].type, deltas[0].function.name) == ("toolu_1", "function", "search")  # type: ignore[union-attr]
    assert all(d.id is None and d.function.name is None for d in deltas[1:])  # type: ignore[union-attr]
    with client.chat.completions.stream(
        model="anthropic/claude-test-1",
        messages=ask,
        tools=[SEARCH],  # type: ignore[list-item]
    ) as stream:
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Let me look. "
    call = choice.message.tool_calls[0]  # type: ignore[index]
    assert (call.id, call.function.name) == ("toolu_1", "search")
    assert json.loads(call.function.arguments) == {"query": "explain, then use search now"}


def test_the_async_client(front: ServiceProcess) -> None:
    async def main() -> tuple[str, str]:
        async with openai.AsyncOpenAI(base_url=front.url + "/v1", api_key=TOKENS["acme"], max_retries=0) as c:
            answer = await c.chat.completions.create(model="anthropic/claude-test-2", messages=PONG)
            stream = await c.chat.completions.create(
                model="anthropic/claude-test-2", messages=[{"role": "user", "content": "a b c"}], stream=True
            )
            text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])
            return answer.choices[0].message.content or "", text

    pong, text = asyncio.run(main())
    assert pong == "PONG" and text == "claude: a b c"


def test_models_lists_every_provider_and_is_cached(client: openai.OpenAI, upstream: Upstream) -> None:
    before = len(upstream.requests_to("/v1/models"))
    ids = [m.id for m in client.models.list()]
    assert {"groq/standin-small", "groq/standin-large", "anthropic/claude-test-1"} <= set(ids)
    assert all(m.owned_by == m.id.split("/")[0] for m in client.models.list())
    assert len(upstream.requests_to("/v1/models")) <= before + 1  # models_cache_secs: listed once


def test_a_tenant_sees_only_its_providers(front: ServiceProcess) -> None:
    with openai.OpenAI(base_url=front.url + "/v1", api_key=TOKENS["globex"], max_retries=0) as other:
        assert [m.id for m in other.models.list()] == []
        with pytest.raises(openai.NotFoundError) as missing:
            other.chat.completions.create(model="groq/standin-small", messages=PONG)
        assert missing.value.code == "model_not_found" and "groq" in missing.value.message


# -- errors --------------------------------------------------------------------------------------


def test_a_wrong_token_is_401_in_openai_shape(front: ServiceProcess) -> None:
    with openai.OpenAI(base_url=front.url + "/v1", api_key="nope", max_retries=0) as bad:
        with pytest.raises(openai.AuthenticationError) as refused:
            bad.chat.completions.create(model="groq/standin-small", messages=PONG)
        assert refused.value.body == {
            "message": "unauthorized",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }


@pytest.mark.parametrize(
    ("model", "messages", "status", "words"),
    [
        ("standin-small", PONG, 404, "PROVIDER/MODEL"),
        ("nosuch/m", PONG, 404, "no provider named 'nosuch'"),
        (
            "groq/standin-small",
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
            400,
            "'image_url' is not supported",
        ),
        (
            "groq/standin-small",
            [{"role": "function", "name": "f", "content": "x"}],
            400,
            "'function' is not supported",
        ),
        ("groq/standin-small", [{"role": "wizard", "content": "x"}], 400, "messages[0].role"),
    ],
)
def test_refusals_name_the_problem(
    client: openai.OpenAI, model: str, messages: Any, status: int, words: str
) -> None:
    with pytest.raises(openai.APIStatusError) as refused:
        client.chat.completions.create(model=model, messages=messages)
    assert refused.value.status_code == status and words in refused.value.message
    assert isinstance(refused.value.body, dict) and set(refused.value.body) == {
        "message",
        "type",
        "param",
        "code",
    }


def test_a_body_over_the_limit_is_413(client: openai.OpenAI) -> None:
    with pytest.raises(openai.APIStatusError) as refused:
        client.chat.completions.create(model="groq/m", messages=[{"role": "user", "content": "x" * 300_000}])
    assert refused.value.status_code == 413 and "larger than" in refused.value.message


def test_a_script_failure_is_500_not_retried(front: ServiceProcess, client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as failed:
        client.chat.completions.create(model="thrower/m", messages=PONG)
    assert "boom" in failed.value.message and failed.value.type == "server_error"
    assert failed.value.response.headers["x-should-retry"] == "false"


def test_an_upstream_429_is_retried_by_the_sdk(front: ServiceProcess, upstream: Upstream) -> None:
    upstream.refuse_next, upstream.refused = 1, 0
    with openai.OpenAI(base_url=front.url + "/v1", api_key=TOKENS["acme"], max_retries=2) as patient:
        began = time.monotonic()
        answer = patient.chat.completions.create(model="groq/standin-small", messages=PONG)
        assert answer.choices[0].message.content == "PONG" and upstream.refused == 1
        assert time.monotonic() - began >= 0.9  # it waited the Retry-After the service passed on


def test_a_429_without_retries_left_is_a_rate_limit_error(client: openai.OpenAI, upstream: Upstream) -> None:
    upstream.refuse_next = 1
    with pytest.raises(openai.RateLimitError) as limited:
        client.chat.completions.create(model="groq/standin-small", messages=PONG)
    assert (
        limited.value.code == "rate_limit_exceeded" and limited.value.response.headers["retry-after"] == "1"
    )


def test_a_stream_failing_after_its_start_ends_with_an_error_event(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(model="halfway/m", messages=PONG, stream=True)
    seen = []
    with pytest.raises(openai.APIError) as broke:
        for chunk in stream:
            seen.append(chunk.choices[0].delta.content if chunk.choices else None)
    assert "partial " in seen and "broke mid-stream" in broke.value.message


def test_a_stream_failing_before_its_start_is_an_ordinary_error(client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as failed:
        client.chat.completions.create(model="thrower/m", messages=PONG, stream=True)
    assert "boom" in failed.value.message


# -- what the reference runtime sends --------------------------------------------------------------


def test_the_reference_runtimes_openai_provider_body(front: ServiceProcess) -> None:
    """Exactly what GEMISIS/leviath's ``openai`` provider sends with ``openai_base_url``: one system
    message, an assistant turn with only ``tool_calls`` (and Gemini's ``extra_content``), ``tool``
    results, ``max_completion_tokens``, the stage's extra parameters merged at the top level,
    ``stream_options.include_usage``; ``GET {base}/models`` with the same bearer token."""
    headers = {"Authorization": f"Bearer {TOKENS['acme']}", "Content-Type": "application/json"}
    body = {
        "model": "groq/standin-small",
        "temperature": 0.699999988079071,
        "messages": [
            {"role": "system", "content": "You are terse.\n\nRegion two."},
            {"role": "user", "content": "please use search for rhai"},
            {"role": "assistant", "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "search", "arguments": "{\"query\":\"rhai\"}"},
                "extra_content": {"google": {"thought_signature": "sig"}},
            }]},
            {"role": "tool", "tool_call_id": "call_1", "content": "found it"},
            {"role": "user", "content": "Reply with exactly: PONG"},
        ],
        "max_completion_tokens": 100,
        "tools": [SEARCH],
        "top_p": 0.9,
        "seed": 7,
        "reasoning_effort": "none",
    }  # fmt: skip
    with httpx.Client(base_url=front.url + "/v1", headers=headers, timeout=30) as http:
        plain = http.post("/chat/completions", json=body)
        assert plain.status_code == 200, plain.text
        assert plain.json()["choices"][0]["message"]["content"] == "PONG"
        with http.stream(
            "POST",
            "/chat/completions",
            json={**body, "stream": True, "stream_options": {"include_usage": True}},
        ) as streamed:
            assert streamed.status_code == 200
            events = [line for line in streamed.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "data: [DONE]"
        usage = json.loads(events[-2][6:])
        assert usage["choices"] == [] and usage["usage"]["total_tokens"] > 0
        models = http.get("/models")
        assert models.status_code == 200 and "groq/standin-small" in [m["id"] for m in models.json()["data"]]


def test_one_model(client: openai.OpenAI, front: ServiceProcess) -> None:
    model = client.models.retrieve("groq/standin-large")
    assert (model.id, model.owned_by) == ("groq/standin-large", "groq")
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("groq/no-such-model")
    assert missing.value.code == "model_not_found"
    with anthropic_sdk.Anthropic(base_url=front.url, api_key=TOKENS["acme"], max_retries=0) as other:
        assert other.models.retrieve("anthropic/claude-test-2").display_name == "Claude Test 2"
