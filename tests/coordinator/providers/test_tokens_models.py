"""count_tokens, list_models, the window guard (docs/scripts/providers.md#count_tokensstate-text-model,
docs/scripts/providers.md#list_modelsstate; PD1–PD8) and the seed's groq script."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.providers.failures import InvalidResponse, TokenLimitExceeded, UnclassifiedProviderError
from coordinator.providers.runtime import ProviderRuntime
from coordinator.providers.tokens import count_by_model

from .harness import Harness
from .test_loading import GROQ

BASE = 'fn initialize(config) { config }\nfn inference(state, request) { #{content: "sent"} }\n'


def count(harness: Harness, extra: str, text: str, model: str) -> int:
    harness.write("p", BASE + extra)

    async def body(rt: ProviderRuntime) -> int:
        return await rt.count_tokens(await rt.get("p"), text, model)

    return harness.run(body)


def test_pd1_heuristic_without_script_fn(harness: Harness) -> None:
    assert count(harness, "", "abcd", "llama") == 1
    assert count_by_model("abcdefgh", "gpt-4") > 0
    assert count_by_model("hello world", "gpt-4o") >= 1
    assert count_by_model("abcdefgh", "claude-3") == 3
    assert count_by_model("abcdefgh", "gemini-2") == 2
    assert count_by_model("", "o3-mini") == 0


def test_pd2_script_count(harness: Harness) -> None:
    assert (
        count(harness, 'fn count_tokens(s, t, m) { count_tokens_heuristic(t, "general") + 100 }', "abcd", "x")
        == 101
    )


@pytest.mark.parametrize("body", ['"not an int"', 'throw "no"', "2.0", "loop {}"])
def test_pd3_fallback_on_non_int_or_throw(harness: Harness, body: str) -> None:
    assert count(harness, f"fn count_tokens(s, t, m) {{ {body} }}", "abcdefgh", "llama") == 2


def test_negative_count_clamps(harness: Harness) -> None:
    assert count(harness, "fn count_tokens(s, t, m) { -5 }", "abcdefgh", "llama") == 0


def models(harness: Harness, extra: str) -> Any:
    harness.write("p", BASE + extra)

    async def body(rt: ProviderRuntime) -> Any:
        return await rt.list_models(await rt.get("p"))

    return harness.run(body)


def test_pd5_list_models(harness: Harness) -> None:
    assert models(harness, "") == []
    rows = models(
        harness,
        'fn list_models(s) { [#{id:"m1", display_name:"Model One", max_context_tokens:1000,'
        " max_output_tokens:256}, #{nope:1}, #{id: 5}] }",
    )
    assert len(rows) == 1
    assert (
        rows[0].id,
        rows[0].provider,
        rows[0].display_name,
        rows[0].max_context_tokens,
        rows[0].max_output_tokens,
    ) == ("m1", "p", "Model One", 1000, 256)
    assert models(harness, 'fn list_models(s) { #{id: "m"} }') == []
    assert models(harness, "fn list_models(s) { [|x| x] }") == []
    defaults = models(harness, 'fn list_models(s) { [#{id: "d", max_context_tokens: 1.5}] }')[0]
    assert (defaults.max_context_tokens, defaults.max_output_tokens) == (8192, 4096)


def test_list_models_error_propagates(harness: Harness) -> None:
    with pytest.raises(UnclassifiedProviderError, match="down"):
        models(harness, 'fn list_models(s) { throw "down" }')


def test_a_thrown_invalid_response_from_list_models_propagates(harness: Harness) -> None:
    """Only an answer with no JSON form counts as no rows; a script's own error is an error."""
    with pytest.raises(InvalidResponse, match="catalog garbled"):
        models(harness, 'fn list_models(s) { throw #{kind: "invalid_response", message: "catalog garbled"} }')


def guard_run(
    harness: Harness, counter: str, request: dict[str, Any], *, exact: bool = False
) -> tuple[Any, int]:
    harness.write("p", "// @max_context_tokens 10000\n" + BASE + counter)
    harness.table("p", base_url=harness.server.url)
    if exact:
        harness.data["limits"] = {"exact_token_counting": True}
    before = len(harness.server.requests)

    async def body(rt: ProviderRuntime) -> Any:
        try:
            return await rt.inference("p", request)
        except TokenLimitExceeded as exc:
            return exc

    result = harness.run(body)
    return result, len(harness.server.requests) - before


COUNTING = "fn count_tokens(s, t, m) { http_get(`${s.base_url}/echo`); 9000 }"


def test_pd8_half_window_guard(harness: Harness) -> None:
    small = {
        "model": "m",
        "messages": [{"role": "user", "content": "x" * 4000}],
        "max_tokens": 2000,
    }  # 1000 + 2000
    result, counted = guard_run(harness, COUNTING, small)
    assert counted == 0 and result.content == "sent"
    big = {
        "model": "m",
        "messages": [{"role": "user", "content": "x" * 12000}],
        "max_tokens": 3000,
    }  # 3000 + 3000
    result, counted = guard_run(
        harness, "fn count_tokens(s, t, m) { http_get(`${s.base_url}/echo`); 10 }", big
    )
    assert counted == 1 and result.content == "sent"
    refused = {"model": "m", "messages": [{"role": "user", "content": "x" * 12000}], "max_tokens": 2000}
    result, _ = guard_run(harness, COUNTING, refused)
    assert isinstance(result, TokenLimitExceeded) and not result.transient
    for figure in ("9000", "2000", "10000"):
        assert figure in result.message


def test_pd7_exact_guard(harness: Harness) -> None:
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100}
    harness.write("p", "// @max_context_tokens 8192\n" + BASE + "fn count_tokens(s, t, m) { 9000 }")
    harness.data["limits"] = {"exact_token_counting": True}

    async def body(rt: ProviderRuntime) -> Any:
        with pytest.raises(TokenLimitExceeded) as info:
            await rt.inference("p", request)
        return str(info.value)

    assert harness.run(body) == "Token limit exceeded: 9000 > 8192"


def test_guard_uses_model_capabilities_override(harness: Harness) -> None:
    harness.data["model_capabilities"] = {"tiny": {"max_context_tokens": 100}}
    request = {"model": "tiny", "messages": [{"role": "user", "content": "x" * 800}], "max_tokens": 10}
    harness.write("p", BASE)

    async def body(rt: ProviderRuntime) -> Any:
        with pytest.raises(TokenLimitExceeded):
            await rt.inference("p", request)

    harness.run(body)


def test_groq_script_unmodified_against_the_local_server(harness: Harness) -> None:
    harness.write("groq", GROQ)
    harness.table("groq", api_key="test-key", base_url=harness.server.base_url)
    before = len(harness.server.requests)

    async def body(rt: ProviderRuntime) -> Any:
        provider = await rt.get("groq")
        plain = await rt.inference(
            "groq",
            {
                "model": "standin-small",
                "system": [{"text": "be brief"}],
                "messages": [{"role": "user", "content": "Reply with exactly: PONG"}],
            },
        )
        tools = await rt.inference(
            "groq",
            {
                "model": "standin-small",
                "messages": [{"role": "user", "content": "please use lookup"}],
                "tools": [{"name": "lookup", "description": "find", "parameters": {"type": "object"}}],
            },
        )
        listed = await rt.list_models(provider)
        counted = await rt.count_tokens(provider, "hello world", "standin-small")
        return plain, tools, listed, counted

    plain, tools, listed, counted = harness.run(body)
    assert (
        plain.content == "PONG" and plain.finish_reason == "Complete" and plain.tokens_used.total_tokens > 0
    )
    assert tools.finish_reason == "ToolCall"
    assert tools.tool_calls[0].name == "lookup" and tools.tool_calls[0].arguments == {
        "query": "please use lookup"
    }
    assert [m.id for m in listed] == ["standin-small", "standin-large"]
    assert listed[1].max_context_tokens == 131072
    assert counted >= 1  # exact cl100k figures: test_cl100k_counts_offline
    sent = harness.server.requests[before:]
    assert {r.headers.get("authorization") for r in sent} == {"Bearer test-key"}


def test_cl100k_counts_offline() -> None:
    """tiktoken without any download: the ranks are embedded in tiktoken-rs, compiled into the binding."""
    assert count_by_model("hello world", "gpt-4o") == 2
    assert count_by_model("Hello, world! How are you today?", "o3-mini") == 9
    assert count_by_model("日本語のテキスト", "gpt-4") == 8  # same as the tiktoken package
