"""Audit of the worker's engines against docs/scripts/errors.md#limits: typed helper signatures, error shapes,
budgets."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pool_support import run as run_async

from coordinator._core.pool import Pool
from proto import BROKERED, BROKERED_FUNCTIONS
from worker.engine import Engines, ScriptFailure
from worker.host_bridge import HOST_FUNCTIONS, WAITS


@pytest.fixture(scope="module")
def engines() -> Engines:
    return Engines(HOST_FUNCTIONS, WAITS)


def run(engines: Engines, kind: str, body: str, *args: Any) -> Any:
    params = ", ".join(f"a{i}" for i in range(len(args)))
    compiled = engines.compile(kind, f"fn t({params}) {{ {body} }}", "t.rhai")
    return engines.run(compiled, "t", list(args), 5.0, None).value


def caught(engines: Engines, kind: str, call: str) -> Any:
    """What a script's ``catch (e)`` sees for ``call``."""
    return run(engines, kind, f"let r = (); try {{ {call} }} catch (e) {{ r = e }} r")


# -- docs/scripts/regions.md#helpers-a-hook-can-call, docs/scripts/errors.md#errors-a-script-can-catch:
# provider helpers are typed `&str` functions in the reference


@pytest.mark.parametrize(
    "call",
    [
        "parse_sse(5)",
        "encode_uri(5)",
        "encode_base64(#{})",
        "decode_base64(1)",
        'count_tokens_heuristic(1, "general")',
        'count_tokens_heuristic("abc", 2)',
        "parse_sse(['d'])",
    ],
)
def test_provider_helper_with_wrong_types_is_a_catchable_function_not_found(
    engines: Engines, call: str
) -> None:
    """The reference registers these with `&str` parameters: other types never reach them, and the
    script can catch the "function not found" like any other runtime error
    (docs/scripts/errors.md#errors-a-script-can-catch)."""
    with pytest.raises(ScriptFailure) as info:
        run(engines, "provider", call)
    assert (info.value.cls, info.value.kind) == ("ScriptError", "FunctionNotFound")
    err = caught(engines, "provider", call)
    assert isinstance(err, dict) and err["message"].startswith("Function not found: "), err


def test_provider_helpers_still_work_with_strings_and_as_methods(engines: Engines) -> None:
    assert run(engines, "provider", 'parse_sse("data: 5")') == 5
    assert run(engines, "provider", '"a b".encode_uri()') == "a%20b"
    assert run(engines, "provider", 'encode_base64("hi").decode_base64()') == "hi"
    assert run(engines, "provider", 'count_tokens_heuristic("abcd", "general")') == 1
    assert run(engines, "provider", "parse_sse(a0)", '{"a":1}') == {"a": 1}


# -- docs/scripts/host-functions.md via docs/scripts/errors.md#errors-a-script-can-catch: brokered host
# functions keep the reference's typed signatures


@pytest.mark.parametrize(
    "call",
    [
        'http_post("http://x", #{a: 1})',
        'http_post("http://x", "b", "h")',
        "http_get(5)",
        'http_get("http://x", "h")',
        "env_var(5)",
        'stream_request("http://x", "{}", "h", |p| p)',
        'stream_request("http://x", #{}, #{}, |p| p)',
    ],
)
def test_host_function_with_wrong_types_is_function_not_found_in_the_worker(
    engines: Engines, call: str
) -> None:
    """docs/scripts/host-functions.md: "passing a map [as http_post's body] → function-not-found error". In
    the reference that is Rhai's own error (caught as a map with ``message``), raised before any request is
    made."""
    with pytest.raises(ScriptFailure) as info:
        run(engines, "provider", call)
    assert (info.value.cls, info.value.kind) == ("ScriptError", "FunctionNotFound")
    err = caught(engines, "provider", call)
    assert isinstance(err, dict) and err["message"].startswith("Function not found: "), err


@pytest.mark.parametrize(
    "call",
    [
        'http_get("http://x")',
        'http_get("http://x", #{a: 1})',
        'http_post("http://x", "{}")',
        'http_post("http://x", "{}", #{a: ()})',
        'env_var("HOME")',
        'stream_request("http://x", "{}", #{}, |p| p)',
    ],
)
def test_host_function_with_the_reference_types_reaches_the_channel(engines: Engines, call: str) -> None:
    with pytest.raises(ScriptFailure) as info:
        run(engines, "provider", call)
    assert info.value.value == "provider host channel closed"


def test_brokered_signatures_cover_the_brokered_table() -> None:
    for kind, table in BROKERED.items():
        for name, arities in table.items():
            assert {len(s) for s in BROKERED_FUNCTIONS[kind][name].signatures} == set(arities), (kind, name)


class _Recorder:
    """A host handler that records every host call it is asked to make."""

    sent = True

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[Any]]] = []

    def begin_attempt(self, spawn: object) -> None:
        pass

    async def call(self, name: str, args: list[Any]) -> Any:
        self.calls.append((name, args))
        return "sent"

    async def stream(self, name: str, args: list[Any]) -> AsyncIterator[Any]:
        self.calls.append((name, args))
        if False:  # pragma: no cover - an async generator that yields nothing
            yield None


def test_map_body_never_leaves_the_worker_and_is_caught_as_rhai_error() -> None:
    """Through a real pool: the wrongly typed call is refused in the worker (no HOST_CALL), and the script's
    ``catch`` sees Rhai's error map, as in the reference."""
    source = (
        "fn post(url) { let r = (); try { http_post(url, #{a: 1}) } catch (e) { r = e } r }\n"
        'fn ok(url) { http_post(url, "{}") }'
    )

    async def scenario() -> None:
        async with Pool(workers=1, spares=0) as pool:
            handle = await pool.load(source, name="p.rhai", kind="provider")
            host = _Recorder()
            err = await pool.call(handle, "post", "http://x", host=host)
            assert host.calls == []
            assert isinstance(err, dict) and err["message"].startswith("Function not found: http_post")
            assert await pool.call(handle, "ok", "http://x", host=host) == "sent"
            assert host.calls == [("http_post", ["http://x", "{}"])]

    run_async(asyncio.wait_for(scenario(), 60))


# -- docs/scripts/errors.md#limits: the reference sets no variable or function-count limits ------------------


@pytest.mark.parametrize("kind", ["region", "provider"])
def test_more_than_a_thousand_functions_compile(engines: Engines, kind: str) -> None:
    """The table of docs/scripts/errors.md#limits (deadline, memory and CPU included) is the whole list of
    limits; Rhai's function cap is not in it, so a generated script with many functions must load as it does
    in the reference."""
    source = "\n".join(f"fn f{i}() {{ {i} }}" for i in range(1500)) + "\nfn t() { f1499() }"
    compiled = engines.compile(kind, source, "many.rhai")
    assert engines.run(compiled, "t", [], 5.0, None).value == 1499


@pytest.mark.parametrize("kind", ["region", "provider"])
def test_more_than_ten_thousand_variables_in_scope(engines: Engines, kind: str) -> None:
    """The reference does not cap scope length either; only the operation budget bounds it."""
    body = " ".join(f"let v{i} = {i};" for i in range(12_000)) + " v11999"
    assert run(engines, kind, body) == 11_999


# -- docs/scripts/host-functions.md: the "openai" hint counts like the reference's
# `encode_with_special_tokens`


@pytest.mark.parametrize(
    ("text", "tokens"),
    [("<|endoftext|>", 1), ("a<|endoftext|>b", 3), ("<|fim_prefix|><|fim_suffix|>", 2)],
)
def test_openai_heuristic_counts_special_tokens_instead_of_failing(
    engines: Engines, text: str, tokens: int
) -> None:
    """Leviath counts with tiktoken's ``encode_with_special_tokens``: text that merely mentions a special
    token (a transcript about tokenizers) is counted, each special token as one; it is no error."""
    assert run(engines, "provider", 'count_tokens_heuristic(a0, "openai")', text) == tokens


# -- docs/scripts/host-functions.md parse_sse: "trim" is Rust's `str::trim` (Unicode White_Space), not
# Python's `str.strip`


@pytest.mark.parametrize("chunk", ["\x1c5", "data:\x1f5", "5\x1e", "\x1ddata: 5"])
def test_parse_sse_does_not_trim_information_separators(engines: Engines, chunk: str) -> None:
    """U+001C..U+001F are whitespace to Python but not to Rust: the reference keeps them, so the payload is
    not JSON and ``parse_sse`` answers ``()``."""
    assert run(engines, "provider", "parse_sse(a0)", chunk) is None


def test_parse_sse_trims_unicode_white_space(engines: Engines) -> None:
    assert run(engines, "provider", "parse_sse(a0)", "\u3000data:\u00a05\u2029") == 5
