"""Inference through the pool against the loopback server (docs/scripts/providers.md#inferencestate-request,
docs/scripts/host-functions.md, docs/scripts/errors.md#rate-limits; PB1–PB15, PE9)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from coordinator.egress import EgressLimits
from coordinator.providers.clock import ManualClock
from coordinator.providers.failures import (
    ApiError,
    InvalidResponse,
    ProviderError,
    RateLimitExceeded,
    RequestFailed,
    Unavailable,
    UnclassifiedProviderError,
)
from coordinator.providers.runtime import ProviderRuntime

from .harness import Harness

REQ: dict[str, Any] = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}
INIT = "fn initialize(config) { config }\n"


def infer(harness: Harness, body: str, request: dict[str, Any] | None = None, **kw: Any) -> Any:
    harness.write("p", INIT + f"fn inference(state, request) {{ {body} }}\n")
    return harness.run(lambda rt: rt.inference("p", request or REQ), **kw)


def infer_error(harness: Harness, body: str, **kw: Any) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        infer(harness, body, **kw)
    return info.value


def test_pb1_no_http_response(harness: Harness) -> None:
    before = len(harness.server.requests)
    r = infer(
        harness,
        '#{content:"hello", tokens_used:#{prompt_tokens:3, completion_tokens:2, total_tokens:5},'
        ' finish_reason:"Complete"}',
    )
    assert (r.content, r.tokens_used.total_tokens, r.finish_reason) == ("hello", 5, "Complete")
    assert len(harness.server.requests) == before


def test_pb2_http_post_with_headers(harness: Harness) -> None:
    url = harness.server.url + "/typed?ct=application/json&body=" + '{"text":"hi","n":7}'.replace('"', "%22")
    harness.table("p", base_url=url)
    before = len(harness.server.requests)
    r = infer(
        harness,
        "let out = parse_json(http_post(state.base_url, to_json(#{model: request.model}),"
        ' #{Authorization: "Bearer k"}));\n #{content: out.text, tokens_used: #{total_tokens: out.n}}',
    )
    assert (r.content, r.tokens_used.total_tokens) == ("hi", 7)
    sent = harness.server.requests[before:]
    assert len(sent) == 1
    assert sent[0].method == "POST" and sent[0].path == "/typed"
    assert sent[0].headers["authorization"] == "Bearer k"
    assert json.loads(sent[0].body) == {"model": "m1"}


def test_pb3_short_overloads(harness: Harness) -> None:
    harness.table("p", base_url=harness.server.url)
    r = infer(
        harness,
        'let a = parse_json(http_get(`${state.base_url}/echo`, #{H: "v", N: 5, U: ()}));\n'
        'let b = parse_json(http_post(`${state.base_url}/echo`, "body!"));\n'
        '#{content: `${if a.headers.h == "v" {1} else {0}}${if b.body == "body!" {2} else {0}}`,'
        ' tokens_used: #{prompt_tokens: if a.headers.n == "5" && a.headers.u == "" {1} else {0}}}',
    )
    assert r.content == "12" and r.tokens_used.prompt_tokens == 1


@pytest.mark.parametrize("limited", [False, True])
def test_pb4_429_maps_to_rate_limit(harness: Harness, limited: bool) -> None:
    extra = {"rate_limit": {"requests_per_minute": 1000, "tokens_per_minute": 10**9}} if limited else {}
    harness.table("p", base_url=harness.server.url, **extra)
    harness.data["limits"] = {"inference_retry_attempts": 1}
    err = infer_error(
        harness, "http_get(`${state.base_url}/status/429?retry_after=0`); #{}", clock=ManualClock()
    )
    assert type(err) is RateLimitExceeded and err.transient


def test_script_sees_rate_limited_map(harness: Harness) -> None:
    harness.table("p", base_url=harness.server.url)
    r = infer(
        harness,
        "let r = (); try { http_get(`${state.base_url}/status/429?retry_after=9`) }"
        " catch (e) { r = e } #{content: `${r.kind}|${r.message}|${r.retry_after}`}",
    )
    assert r.content == "rate_limited|rate limit exceeded|9"


def test_broker_sleeps_on_429_when_a_limiter_exists(harness: Harness) -> None:
    harness.table(
        "p", base_url=harness.server.url, rate_limit={"requests_per_minute": 1000, "tokens_per_minute": 10**9}
    )
    clock = ManualClock()
    infer(
        harness,
        "for i in 0..3 { try { http_get(`${state.base_url}/status/429`) } catch {} }\n"
        "try { http_get(`${state.base_url}/status/429?retry_after=7`) } catch {}\n"
        "http_get(`${state.base_url}/echo`);\n"
        "try { http_get(`${state.base_url}/status/429`) } catch {} #{}",
        clock=clock,
    )
    assert clock.sleeps == [1.0, 2.0, 4.0, 7.0, 1.0]


def test_pb5_api_error_not_transient(harness: Harness) -> None:
    harness.table("p", base_url=harness.server.url)
    err = infer_error(harness, "http_get(`${state.base_url}/status/400?body=bad`); #{}")
    assert type(err) is ApiError and not err.transient
    assert err.message == "HTTP 400 Bad Request: bad"  # the reference's text, no decoration


def test_pb6_transient_throw_is_retried(harness: Harness) -> None:
    harness.data["limits"] = {"inference_retry_attempts": 3, "inference_retry_base_ms": 1}
    clock = ManualClock()
    err = infer_error(harness, 'throw #{message:"upstream down", transient:true}', clock=clock)
    assert type(err) is RequestFailed and err.message == "upstream down" and err.transient
    assert clock.sleeps == [0.001, 0.002]


def test_pb7_non_map_return(harness: Harness) -> None:
    assert type(infer_error(harness, "[1,2,3]")) is InvalidResponse
    assert type(infer_error(harness, "|x| x")) is InvalidResponse


def test_pb8_empty_map(harness: Harness) -> None:
    r = infer(harness, "#{}")
    assert (r.content, r.tool_calls, r.tokens_used.total_tokens, r.finish_reason) == ("", [], 0, "Complete")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('"stop"', "Complete"),
        ("()", "Complete"),
        ('"tool_use"', "ToolCall"),
        ('"max_tokens"', "TokenLimit"),
        ('"stop_sequence"', "Stop"),
    ],
)
def test_pb9_finish_mapping(harness: Harness, raw: str, expected: str) -> None:
    assert infer(harness, f"#{{finish_reason: {raw}}}").finish_reason == expected


def test_pb11_unavailable_and_pb12_plain_throw(harness: Harness) -> None:
    err = infer_error(harness, 'throw #{kind:"api", message:"HTTP 402 Payment Required: ..."}')
    assert type(err) is Unavailable and err.reason == "credits-exhausted"
    err = infer_error(harness, 'throw "oops"')
    assert type(err) is UnclassifiedProviderError and err.message == "oops"


def test_runtime_errors_and_limits_are_other(harness: Harness) -> None:
    err = infer_error(harness, "let x = 1; x.no_such_method()")
    assert type(err) is UnclassifiedProviderError and "no_such_method" in err.message
    err = infer_error(harness, "loop {}")
    assert type(err) is UnclassifiedProviderError and "operations" in err.message


def test_pb13_system_block_facts(harness: Harness) -> None:
    request = {
        **REQ,
        "system": [
            {"text": "task", "volatility": "stable", "region": "task"},
            {"text": "f", "volatility": "grows", "region": "findings"},
        ],
    }
    r = infer(
        harness,
        'request.system.map(|b| `${b.region}:${b.volatility}`).reduce(|a, b| if a == "" { b }'
        ' else { a + "," + b }, "").to_string(); #{content: request.system.map(|b|'
        ' `${b.region}:${b.volatility}`).reduce(|a, b| if a == "" { b } else { a + "," + b }, "")}',
        request,
    )
    assert r.content == "task:stable,findings:grows"


def test_request_map_shape(harness: Harness) -> None:
    request = {
        "model": "m1",
        "messages": [
            {"role": "user", "content": "q", "cache_breakpoint": False},
            {"role": "assistant", "content": "a", "cache_breakpoint": True},
        ],
        "temperature": 0.7,
        "max_tokens": 100,
        "system": [{"text": "s"}],
    }
    r = infer(harness, "#{content: to_json(request)}", request)
    seen = json.loads(r.content)
    assert seen["temperature"] == 0.7  # not widened
    assert "cache_breakpoint" not in seen["messages"][0] and seen["messages"][1]["cache_breakpoint"] is True
    assert seen["extra"] is None and seen["request_timeout_secs"] is None and seen["tools"] == []
    assert seen["system"] == [
        {"cache_hint": "UntilChanged", "region": "", "text": "s", "volatility": "rewritten"}
    ]


def test_pb15_tool_calls_through_a_script(harness: Harness) -> None:
    r = infer(
        harness,
        '#{tool_calls: [#{id:"t1", name:"a", arguments:"{\\"x\\":1}", thought_signature:"sig"},'
        ' #{id:"t2", name:"b", arguments:#{y:2}}], finish_reason:"ToolCall"}',
    )
    assert [(t.id, t.arguments, t.thought_signature) for t in r.tool_calls] == [
        ("t1", '{"x":1}', "sig"),
        ("t2", {"y": 2}, None),
    ]


def test_parts_from_a_blob(harness: Harness) -> None:
    r = infer(
        harness,
        "let b = blob(4, 0); b[0] = 137; b[1] = 80; b[2] = 78; b[3] = 71;"
        ' #{parts: [#{bytes: b, mime_type: "image/png", name: "hero.png"}, #{data: encode_base64("hi")}]}',
    )
    assert [(p.mime_type, p.name, p.data) for p in r.parts] == [
        ("image/png", "hero.png", b"\x89PNG"),
        ("application/octet-stream", None, b"hi"),
    ]


def test_pe9_unreadable_content_type(harness: Harness) -> None:
    harness.table("p", base_url=harness.server.url)
    r = infer(
        harness,
        "let r = (); try { http_get(`${state.base_url}/typed?ct=application/octet-stream`) }"
        " catch (e) { r = e } #{content: `${r.kind}|${r.message}`}",
    )
    assert r.content.startswith("api|unreadable body: the response is application/octet-stream, not text - ")


def test_http_post_with_a_map_body_is_function_not_found(harness: Harness) -> None:
    harness.table("p", base_url=harness.server.url)
    err = infer_error(harness, "http_post(`${state.base_url}/echo`, #{a: 1}); #{}")
    assert type(err) is UnclassifiedProviderError and "http_post" in err.message


def test_transient_server_errors_are_retried_then_succeed(harness: Harness) -> None:
    counter = {"n": 0}

    def flaky(_request: Any) -> Any:
        from coordinator.bench.standin import Reply

        counter["n"] += 1
        return Reply.json({"ok": counter["n"]}, 503 if counter["n"] < 3 else 200)

    harness.server.route("GET", "/flaky", flaky)
    harness.table("p", base_url=harness.server.url)
    clock = ManualClock()
    r = infer(
        harness, "let r = parse_json(http_get(`${state.base_url}/flaky`)); #{content: `${r.ok}`}", clock=clock
    )
    assert r.content == "3" and clock.sleeps == [1.0, 2.0]


def test_job_timeout_bounds_the_whole_inference(harness: Harness) -> None:
    harness.table("p", base_url=harness.server.url)
    request = {**REQ, "request_timeout_secs": 1}
    err = None
    try:
        infer(harness, "http_get(`${state.base_url}/slow/3`); #{}", request)
    except ProviderError as exc:
        err = exc
    assert err is not None and not err.transient
    assert "timed out" in err.message or "job timeout" in err.message


def test_tokens_per_minute_enforced_across_calls(harness: Harness) -> None:
    harness.table("p", rate_limit={"requests_per_minute": 1000, "tokens_per_minute": 100})
    harness.write("p", INIT + "fn inference(s, r) { #{tokens_used: #{total_tokens: 150}} }")
    clock = ManualClock(start=0.0)

    async def body(rt: ProviderRuntime) -> list[float]:
        times = []
        for _ in range(3):
            await rt.inference("p", REQ)
            times.append(clock.now())
        return times

    assert harness.run(body, clock=clock) == [0.0, pytest.approx(60.05), pytest.approx(120.1)]


@pytest.mark.parametrize("allow", [None, ["10.0.0.0/8"]])
def test_egress_refusals_reach_the_script(harness: Harness, allow: list[str] | None) -> None:
    harness.table("p", base_url=harness.server.base_url, egress_allow=allow or [])
    before = len(harness.server.requests)
    r = infer(
        harness,
        "let r = (); try { http_get(`${state.base_url}/models`) } catch (e) { r = e }"
        " #{content: `${r.kind}|${r.message}`}",
    )
    assert r.content.startswith("egress_denied|egress refused:")
    assert "127.0.0.1" in r.content
    assert len(harness.server.requests) == before


def test_metadata_address_refused_even_by_name(harness: Harness) -> None:
    harness.table("p", base_url="http://169.254.169.254/latest", egress_allow=[])
    err = infer_error(harness, "http_get(`${state.base_url}/meta-data`); #{}")
    assert type(err) is UnclassifiedProviderError and "egress refused" in err.message


def test_other_hosts_refused(harness: Harness) -> None:
    harness.table("p", base_url=harness.server.base_url)
    r = infer(
        harness,
        'let r = (); try { http_get("https://example.com/") } catch (e) { r = e } #{content: r.message}',
    )
    assert "not allowed for provider 'p'" in r.content


def test_many_concurrent_inferences_on_few_workers(harness: Harness) -> None:
    harness.server.route("GET", "/pause", lambda _r: (__import__("time").sleep(0.3), _ok())[1])
    harness.table("p", base_url=harness.server.url)
    harness.write("p", INIT + "fn inference(s, r) { #{content: http_get(`${s.base_url}/pause`)} }")

    async def body(rt: ProviderRuntime) -> tuple[int, float]:
        loop = asyncio.get_running_loop()
        await rt.get("p")
        start = loop.time()
        results = await asyncio.gather(*(rt.inference("p", REQ) for _ in range(128)))
        return sum(r.content == "ok" for r in results), loop.time() - start

    done, elapsed = harness.run(body, workers=2)
    assert done == 128
    assert elapsed < 6.0  # serially this would take 128 × 0.3 s


def _ok() -> Any:
    from coordinator.bench.standin import Reply

    return Reply(200, {"Content-Type": "text/plain"}, b"ok")


def test_worker_death_after_a_request_was_sent_is_rerun_without_sending_it_again(harness: Harness) -> None:
    """The re-run is served the request in flight from the call's journal: it succeeds, sent once."""
    import os
    import signal

    harness.table("p", base_url=harness.server.url)
    harness.write("p", INIT + 'fn inference(s, r) { http_get(`${s.base_url}/slow/1.5`); #{content: "done"} }')

    async def body(rt: ProviderRuntime) -> tuple[ProviderError | str, int]:
        await rt.get("p")
        before = sum(r.path.startswith("/slow/") for r in harness.server.requests)
        task = asyncio.ensure_future(rt.inference("p", REQ))
        while sum(r.path.startswith("/slow/") for r in harness.server.requests) == before:
            await asyncio.sleep(0.01)
        for worker in rt.executor.pool.workers():
            if worker.inflight:
                os.kill(worker.pid, signal.SIGKILL)
        try:
            outcome: ProviderError | str = (await task).content
        except ProviderError as exc:
            outcome = exc
        await asyncio.sleep(1.8)  # a re-run that sent its request again would have done so by now
        return outcome, sum(r.path.startswith("/slow/") for r in harness.server.requests) - before

    outcome, sent = harness.run(body, workers=1)
    assert outcome == "done"
    assert sent == 1


def test_256_concurrent_inferences_on_4_workers(harness: Harness) -> None:
    import threading
    import time

    state = {"now": 0, "peak": 0}
    arrived = threading.Condition()

    def hold(_request: Any) -> Any:
        """A barrier: answer once all 256 requests are in flight together (or after 20 s)."""
        with arrived:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
            arrived.notify_all()
            arrived.wait_for(lambda: state["peak"] >= 256, timeout=20)
        time.sleep(0.05)
        with arrived:
            state["now"] -= 1
        return _ok()

    harness.server.route("POST", "/hold", hold)
    harness.table("p", base_url=harness.server.url)
    harness.write("p", INIT + 'fn inference(s, r) { #{content: http_post(`${s.base_url}/hold`, "{}")} }')

    async def body(rt: ProviderRuntime) -> int:
        await rt.get("p")
        results = await asyncio.gather(*(rt.inference("p", REQ) for _ in range(256)))
        return sum(r.content == "ok" for r in results)

    # the tenant's egress cap (128 requests in flight by default) raised, or half would wait their turn
    assert harness.run(body, workers=4, egress_limits=EgressLimits(tenant_requests=256)) == 256
    assert state["peak"] == 256  # all 256 were waiting on their HTTP reply at the same time


def test_max_concurrent_inferences_by_provider(harness: Harness) -> None:
    import threading
    import time

    state = {"now": 0, "peak": 0}
    lock = threading.Lock()

    def slow(_request: Any) -> Any:
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(0.2)
        with lock:
            state["now"] -= 1
        return _ok()

    harness.server.route("GET", "/gate", slow)
    harness.table("p", base_url=harness.server.url)
    harness.data["limits"] = {"max_concurrent_inferences_by_provider": {"p": 2}}
    harness.write("p", INIT + "fn inference(s, r) { #{content: http_get(`${s.base_url}/gate`)} }")

    async def body(rt: ProviderRuntime) -> int:
        results = await asyncio.gather(*(rt.inference("p", REQ) for _ in range(6)))
        return sum(r.content == "ok" for r in results)

    assert harness.run(body) == 6
    assert state["peak"] == 2


def test_warm_models_is_called_and_its_errors_ignored(harness: Harness) -> None:
    harness.table("p", base_url=harness.server.url)
    harness.write(
        "p",
        INIT + "fn inference(s, r) { #{} }\n"
        'fn warm_models(s, models) { http_post(`${s.base_url}/echo`, models[0]); throw "ignored" }',
    )
    before = len(harness.server.requests)

    async def body(rt: ProviderRuntime) -> None:
        await rt.warm_models(await rt.get("p"), ["m-warm"])

    harness.run(body)
    assert [r.body for r in harness.server.requests[before:]] == [b"m-warm"]
