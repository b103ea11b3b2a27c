"""The fronts' translation on its own: each API's body into the provider contract's request, and each
provider failure onto the status, kind and retry advice both SDKs act on (the tables of
docs/use-from-any-runtime.md). The requests built here are also checked by the contract's own
builder, so a translation cannot produce what a script would never be given."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.providers import InvalidProviderRequest
from coordinator.providers.errors import (
    ApiError,
    InvalidResponse,
    ProviderCallTimeout,
    RateLimitExceeded,
    RequestFailed,
    TokenLimitExceeded,
    Unavailable,
    UnclassifiedProviderError,
)
from coordinator.providers.models import Capabilities
from coordinator.providers.request import build_request
from coordinator.service.errors import LimitReached, RouteError
from coordinator.service.front.anthropic import messages_request
from coordinator.service.front.common import Refusal, failure
from coordinator.service.front.openai import chat_request

CAPS = Capabilities(max_context_tokens=8192, max_output_tokens=1024)


def _refusal(call: Any, *args: Any) -> Refusal:
    with pytest.raises(RouteError) as refused:
        call(*args)
    assert isinstance(refused.value.error, Refusal)
    return refused.value.error


def test_an_openai_conversation_becomes_the_contracts_request() -> None:
    provider, request = chat_request(
        {
            "model": "groq/meta-llama/llama-4",
            "messages": [
                {"role": "system", "content": "one"},
                {"role": "developer", "content": [{"type": "text", "text": "two"}]},
                {"role": "user", "content": "ask", "name": "ignored"},
                {"role": "assistant", "content": "calling", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'},
                     "extra_content": {"google": {"thought_signature": "sig"}}},
                    {"id": "c2", "type": "function", "function": {"name": "g", "arguments": ""}},
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": "r1"},
                {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "r2"}]},
            ],
            "max_tokens": 10,
            "max_completion_tokens": 20,
            "stop": "END",
            "tool_choice": {"type": "function", "function": {"name": "f"}},
            "seed": 7,
            "user": None,
        }
    )  # fmt: skip
    assert provider == "groq"
    assert request["model"] == "meta-llama/llama-4"  # the provider is the part before the first '/'
    assert request["system"] == [{"text": "one"}, {"text": "two"}]
    assert request["max_tokens"] == 20  # max_completion_tokens wins
    assert request["extra"] == {
        "seed": 7,
        "stop": ["END"],
        "tool_choice": {"type": "function", "function": {"name": "f"}},
    }
    assert request["messages"] == [
        {"role": "user", "content": "ask"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "calling"},
            {"type": "tool_use", "id": "c1", "name": "f", "input": {"a": 1}, "thought_signature": "sig"},
            {"type": "tool_use", "id": "c2", "name": "g", "input": {}},
        ]},
        {"role": "user", "content": [  # consecutive results: one user turn
            {"type": "tool_result", "tool_use_id": "c1", "content": "r1", "is_error": False},
            {"type": "tool_result", "tool_use_id": "c2", "content": "r2", "is_error": False},
        ]},
    ]  # fmt: skip
    full = build_request(request, CAPS)
    assert full["temperature"] == 0.7 and full["tools"] == []


@pytest.mark.parametrize(
    ("body", "words", "param"),
    [
        ({"model": "p/m", "messages": [], "n": 2}, "n = 1", "n"),
        (
            {
                "model": "p/m",
                "messages": [
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{oops"}}
                        ],
                    }
                ],
            },
            "arguments is not JSON",
            "messages[0].tool_calls[0]",
        ),
        (
            {
                "model": "p/m",
                "messages": [
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "id": "c",
                                "type": "function",
                                "function": {"name": "f", "arguments": '{"a": 99999999999999999999}'},
                            },
                        ],
                    }
                ],
            },
            "64 bits",
            "messages[0].tool_calls[0].function.arguments",
        ),
        (
            {
                "model": "p/m",
                "messages": [
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "id": "c",
                                "type": "function",
                                "function": {"name": "f", "arguments": "[" * 5000 + "]" * 5000},
                            },
                        ],
                    }
                ],
            },
            "arguments is not JSON",
            "messages[0].tool_calls[0]",
        ),
        (
            {"model": "p/m", "messages": [{"role": "tool", "content": "x"}]},
            "tool_call_id",
            "messages[0].tool_call_id",
        ),
        (
            {"model": "p/m", "messages": [], "tools": [{"type": "custom", "custom": {"name": "x"}}]},
            "only function tools",
            "tools[0]",
        ),
        (
            {"model": "p/m", "messages": [{"role": "user", "content": [{"type": "input_audio"}]}]},
            "'input_audio' is not supported",
            "messages[0].content",
        ),
    ],
)
def test_what_openai_bodies_cannot_be_translated(body: Any, words: str, param: str) -> None:
    refusal = _refusal(chat_request, body)
    assert refusal.status == 400 and words in refusal.message and refusal.param == param


def test_an_anthropic_conversation_becomes_the_contracts_request() -> None:
    provider, request = messages_request(
        {
            "model": "claude-proxy/claude-sonnet-4-5",
            "system": "be brief",
            "max_tokens": 50,
            "stop_sequences": ["X"],
            "top_k": 4,
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "q", "cache_control": {"type": "ephemeral"}},
                ]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hm", "signature": "s"},
                    {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "is_error": True,
                     "content": [{"type": "text", "text": "done"}]},
                ]},
            ],
            "tools": [{"name": "f", "input_schema": {"type": "object"}}],
        }
    )  # fmt: skip
    assert provider == "claude-proxy"
    assert request["system"] == [{"text": "be brief"}] and request["max_tokens"] == 50
    assert request["extra"] == {"top_k": 4, "stop": ["X"]}
    assert request["tools"] == [{"name": "f", "description": "", "parameters": {"type": "object"}}]
    assert request["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "q"}], "cache_breakpoint": True},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "done", "is_error": True},
        ]},
    ]  # fmt: skip
    assert build_request(request, CAPS)["messages"][0]["cache_breakpoint"] is True


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"model": "p/m", "messages": [{"role": "user", "content": [{"type": "document"}]}]}, "'document'"),
        (
            {"model": "p/m", "messages": [{"role": "user", "content": [{"type": "tool_use", "id": "x"}]}]},
            "lacks its required fields",
        ),
        (
            {"model": "p/m", "messages": [], "tools": [{"type": "bash_20250124", "name": "bash"}]},
            "server tools",
        ),
        ({"model": "p/m", "messages": [], "system": [{"type": "image"}]}, "system[0]"),
        ({"model": "nomodel", "messages": []}, "PROVIDER/MODEL"),
        ({"model": "p/", "messages": []}, "PROVIDER/MODEL"),
    ],
)
def test_what_anthropic_bodies_cannot_be_translated(body: Any, words: str) -> None:
    refusal = _refusal(messages_request, body)
    assert refusal.status in (400, 404) and words in refusal.message


@pytest.mark.parametrize(
    ("exc", "status", "kind", "retry", "retry_after"),
    [
        (RateLimitExceeded("slow down", retry_after=2.5), 429, "rate_limit", True, 3),
        (RateLimitExceeded("slow down"), 429, "rate_limit", True, 1),
        (TokenLimitExceeded("Token limit exceeded: 9 > 8"), 400, "invalid_request", False, None),
        (ProviderCallTimeout("call took too long"), 504, "timeout", True, None),
        (RequestFailed("[timeout] no answer - raise request_timeout_secs"), 504, "timeout", True, None),
        (RequestFailed("[connection-refused] nothing there"), 502, "upstream", True, None),
        (Unavailable("HTTP 401 Unauthorized: bad key", reason="auth-failed"), 503, "overloaded", False, None),
        (ApiError("HTTP 404 Not Found: no such model"), 404, "not_found", False, None),
        (ApiError("HTTP 400 Bad Request: bad field"), 400, "invalid_request", False, None),
        (ApiError("HTTP 503 Service Unavailable: busy", transient=True), 503, "upstream", True, None),
        (ApiError("HTTP 429 Too Many Requests", transient=True, capacity=True), 429, "rate_limit", True, 1),
        (ApiError("HTTP 529 overloaded", transient=True, capacity=True), 503, "overloaded", True, 1),
        (ApiError("HTTP 418 I'm a teapot"), 502, "upstream", False, None),
        (InvalidResponse("not a map"), 502, "upstream", False, None),
        (UnclassifiedProviderError("boom"), 500, "server", False, None),
        (
            UnclassifiedProviderError("inference exceeded the 900s job timeout (request_timeout_secs)"),
            504,
            "timeout",
            False,
            None,
        ),
        (InvalidProviderRequest("request.messages must be an array"), 400, "invalid_request", None, None),
        (LimitReached("max_streams", "the tenant already has 1 streams open"), 429, "rate_limit", None, 1),
    ],
)
def test_failures_by_status(
    exc: Exception, status: int, kind: str, retry: bool | None, retry_after: int | None
) -> None:
    refusal = failure(exc)
    assert (refusal.status, refusal.kind, refusal.retry, refusal.retry_after) == (
        status,
        kind,
        retry,
        retry_after,
    )
    headers = refusal.headers()
    assert headers.get("x-should-retry") == (None if retry is None else str(retry).lower())
    assert headers.get("Retry-After") == (None if retry_after is None else str(retry_after))


# -- anything a body may hold ----------------------------------------------------------------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)
_KEYS = st.sampled_from(
    ["type", "text", "id", "name", "input", "content", "function", "arguments", "tool_use_id", "is_error",
     "extra_content", "google", "thought_signature", "cache_control", "input_schema", "parameters"]
)  # fmt: skip
_PART = st.dictionaries(_KEYS, _JSON | st.sampled_from(["text", "tool_use", "tool_result", "function", "{}"]))
_CONTENT = st.none() | st.text(max_size=8) | st.lists(_PART, max_size=3)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {"role": st.sampled_from(["system", "developer", "user", "assistant", "tool", "function"])},
            optional={"content": _CONTENT, "tool_calls": st.none() | st.lists(_PART, max_size=2),
                      "tool_call_id": st.text(max_size=4)},
        ),
        max_size=4,
    ),
    st.none() | st.lists(_PART, max_size=2),
)  # fmt: skip
def test_an_openai_body_translates_or_is_refused(messages: Any, tools: Any) -> None:
    """Whatever a schema-valid body holds, the translation answers a request the contract's builder
    takes, or a refusal naming the problem; nothing else escapes (no 500 from a body)."""
    body: Any = {"model": "p/m", "messages": messages, "tools": tools}
    try:
        _provider, request = chat_request(body)
    except RouteError as exc:
        assert isinstance(exc.error, Refusal) and exc.error.status == 400 and exc.error.message
        return
    build_request(request, CAPS)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "assistant"]),
             "content": st.text(max_size=8) | st.lists(_PART, max_size=3)}
        ),
        max_size=4,
    ),
    st.none() | st.text(max_size=8) | st.lists(_PART, max_size=2),
    st.none() | st.lists(_PART, max_size=2),
)  # fmt: skip
def test_an_anthropic_body_translates_or_is_refused(messages: Any, system: Any, tools: Any) -> None:
    body: Any = {"model": "p/m", "messages": messages, "system": system, "tools": tools}
    try:
        _provider, request = messages_request(body)
    except RouteError as exc:
        assert isinstance(exc.error, Refusal) and exc.error.status == 400 and exc.error.message
        return
    build_request(request, CAPS)
