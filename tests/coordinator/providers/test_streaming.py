"""Streaming end to end: SSE → worker callback → on_chunk → caller
(docs/scripts/providers.md#streamstate-request-on_chunk; PC1–PC9)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from coordinator.providers.failures import ProviderError, UnclassifiedProviderError
from coordinator.providers.response import StreamChunk
from coordinator.providers.runtime import ProviderRuntime

from .harness import Harness

REQ: dict[str, Any] = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}
INIT = 'fn initialize(config) { config }\nfn inference(state, request) { #{content: "unused"} }\n'


def stream(harness: Harness, body: str, *, inference: str | None = None) -> list[StreamChunk | ProviderError]:
    if inference is None:
        harness.write("p", INIT + f"fn stream(state, request, on_chunk) {{ {body} }}\n")
    else:
        harness.write(
            "p", f"fn initialize(config) {{ config }}\nfn inference(state, request) {{ {inference} }}\n"
        )
    harness.table("p", base_url=harness.server.url)

    async def collect(rt: ProviderRuntime) -> list[StreamChunk | ProviderError]:
        return [item async for item in rt.stream("p", REQ)]

    return harness.run(collect)


def sse_body(events: str) -> str:
    return events.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def test_pc1_native_stream(harness: Harness) -> None:
    raw = sse_body('data: {"d":"a"}\n\ndata: {"d":"b"}\n\n')
    items = stream(
        harness,
        f'stream_request(`${{state.base_url}}/sse-raw`, "{raw}", #{{}}, |c| {{'
        " let data = parse_sse(c); on_chunk.call(#{delta: data.d}); });"
        ' on_chunk.call(#{delta: "", finish_reason: "Complete", tokens: #{total_tokens: 4}});',
    )
    assert [c.delta for c in items if isinstance(c, StreamChunk)] == ["a", "b", ""]
    last = items[-1]
    assert isinstance(last, StreamChunk) and last.finish_reason == "Complete" and last.tokens is not None
    assert last.tokens.total_tokens == 4


def test_pc2_mid_stream_transport_error(harness: Harness) -> None:
    items = stream(
        harness,
        'stream_request(`${state.base_url}/sse-broken`, "{}", #{}, |c| {'
        " on_chunk.call(#{delta: parse_sse(c).d}); });",
    )
    assert isinstance(items[0], StreamChunk) and items[0].delta == "a"
    assert len(items) == 2 and isinstance(items[1], ProviderError) and items[1].transient


def test_pc3_stream_throws(harness: Harness) -> None:
    items = stream(harness, 'throw #{message:"boom", transient:false}')
    assert len(items) == 1 and type(items[0]) is UnclassifiedProviderError and items[0].message == "boom"


def test_pc4_callback_throws(harness: Harness) -> None:
    items = stream(
        harness,
        'on_chunk.call(#{delta: "x"}); stream_request(`${state.base_url}/sse-raw`,'
        ' "data: 1\\n\\n", #{}, |c| { throw "callback boom" });',
    )
    assert isinstance(items[0], StreamChunk) and items[0].delta == "x"
    assert isinstance(items[-1], ProviderError) and "callback boom" in items[-1].message


def test_pc5_collapsed_fallback(harness: Harness) -> None:
    items = stream(
        harness,
        "",
        inference='#{content: "whole", tool_calls: [#{id: "c", name: "f",'
        ' arguments: #{a: 1}}], finish_reason: "ToolCall"}',
    )
    assert len(items) == 1
    chunk = items[0]
    assert isinstance(chunk, StreamChunk) and chunk.delta == "whole" and chunk.finish_reason == "ToolCall"
    assert [(t.index, t.id, t.arguments_delta) for t in chunk.tool_calls] == [(0, "c", '{"a":1}')]


def test_pc5_throwing_inference_errors_the_stream_itself(harness: Harness) -> None:
    with pytest.raises(UnclassifiedProviderError, match="nope"):
        stream(harness, "", inference='throw "nope"')


def test_pc6_chunk_parsing_through_the_pool(harness: Harness) -> None:
    items = stream(
        harness,
        'on_chunk.call(#{tool_calls: [#{index: 2, id: "x", name: "f", arguments_delta: "{\\"a\\":"}],'
        ' tokens: #{total_tokens: 9}, finish_reason: "stop"}); on_chunk.call(#{delta: "tok"});',
    )
    first, second = items
    assert (
        isinstance(first, StreamChunk)
        and first.tool_calls[0].index == 2
        and first.finish_reason == "Complete"
    )
    assert first.tokens is not None and first.tokens.total_tokens == 9
    assert isinstance(second, StreamChunk) and second.tokens is None and second.finish_reason is None


def test_pc9_sse_framing_through_the_script(harness: Harness) -> None:
    raw = sse_body('data: {"a":1}\n\nevent: ping\n\ndata: {"b":2}\n\ndata: [DONE]\n\ndata: {"never":1}\n\n')
    items = stream(
        harness,
        f'stream_request(`${{state.base_url}}/sse-raw`, "{raw}", #{{}},'
        " |c| { on_chunk.call(#{delta: c}); });",
    )
    assert [c.delta for c in items if isinstance(c, StreamChunk)] == ['{"a":1}', '{"b":2}']


def test_http_error_thrown_before_any_callback(harness: Harness) -> None:
    items = stream(
        harness,
        'let n = 0; try { stream_request(`${state.base_url}/status/500`, "{}", #{},'
        " |c| { n += 1; }); } catch (e) { on_chunk.call(#{delta: `${n}|${e.kind}|${e.message}`}); }",
    )
    assert isinstance(items[0], StreamChunk) and items[0].delta.startswith(
        "0|api|HTTP 500 Internal Server Error"
    )


def test_chunks_arrive_as_they_are_produced(harness: Harness) -> None:
    harness.write(
        "p",
        INIT + "fn stream(state, request, on_chunk) { stream_request("
        '`${state.base_url}/sse-slow?n=5&pause=0.3`, "{}", #{}, |c| { on_chunk.call(#{delta: c}); }); }',
    )
    harness.table("p", base_url=harness.server.url)

    async def timed(rt: ProviderRuntime) -> list[float]:
        loop = asyncio.get_running_loop()
        await rt.get("p")
        start, times = loop.time(), []
        async for _ in rt.stream("p", REQ):
            times.append(loop.time() - start)
        return times

    times = harness.run(timed)
    assert len(times) == 5
    assert times[0] < 0.9 and times[-1] > 1.1  # the first chunk did not wait for the end


def test_slow_consumer_applies_backpressure(harness: Harness) -> None:
    n = 200
    harness.write(
        "p",
        INIT + f"fn stream(state, request, on_chunk) {{ stream_request("
        f'`${{state.base_url}}/sse-slow?n={n}&pause=0.0`, "{{}}", #{{}},'
        " |c| { on_chunk.call(#{delta: c}); }); }",
    )
    harness.table("p", base_url=harness.server.url)

    async def slow(rt: ProviderRuntime) -> int:
        got = 0
        async for item in rt.stream("p", REQ):
            assert isinstance(item, StreamChunk)
            got += 1
            if got < 20:
                await asyncio.sleep(0.02)
        return got

    assert harness.run(slow) == n


def test_groq_stream_reports_usage(harness: Harness) -> None:
    from .test_loading import GROQ

    harness.write("groq", GROQ)
    harness.table("groq", api_key="k", base_url=harness.server.base_url)

    async def collect(rt: ProviderRuntime) -> list[Any]:
        return [
            c
            async for c in rt.stream(
                "groq", {"model": "standin-small", "messages": [{"role": "user", "content": "one two three"}]}
            )
        ]

    items = harness.run(collect)
    assert "".join(c.delta for c in items) == "echo: one two three"
    assert items[-1].finish_reason == "Complete" and items[-1].tokens.total_tokens > 0


def test_unconvertible_chunk_is_an_error_item_and_the_stream_goes_on(harness: Harness) -> None:
    items = stream(
        harness, 'on_chunk.call(#{delta: "a"}); on_chunk.call(#{delta: |x| x}); on_chunk.call(#{delta: "b"});'
    )
    assert [type(i).__name__ for i in items] == ["StreamChunk", "InvalidResponse", "StreamChunk"]


def test_a_consumer_that_stops_early_cancels_the_script(harness: Harness) -> None:
    harness.write(
        "p", INIT + 'fn stream(state, request, on_chunk) { loop { on_chunk.call(#{delta: "x"}); } }\n'
    )
    harness.table("p", base_url=harness.server.url)

    async def take_two(rt: ProviderRuntime) -> tuple[list[str], int]:
        async with contextlib.aclosing(rt.stream("p", REQ)) as items:
            taken = []
            async for item in items:
                assert isinstance(item, StreamChunk)
                taken.append(item.delta)
                if len(taken) == 2:
                    break
        pool = rt.executor.pool  # type: ignore[attr-defined]
        for _ in range(200):
            if pool.statistics().inflight == 0:
                break
            await asyncio.sleep(0.01)
        return taken, pool.statistics().inflight

    taken, inflight = harness.run(take_two)
    assert taken == ["x", "x"] and inflight == 0
