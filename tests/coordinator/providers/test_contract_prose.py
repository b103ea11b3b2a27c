"""Audit of the provider contract's prose (docs/scripts/host-functions.md#values-between-json-and-rhai,
docs/scripts/providers.md#metadata, docs/scripts/providers.md#count_tokensstate-text-model) beyond the
catalogue cases.

Each test pins one place where the implementation used to differ from the prose; scripts run in real
workers against the real pool, so the values checked are the ones a script really sees or returns.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import rhai
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.providers.failures import ProviderError, TokenLimitExceeded
from coordinator.providers.metadata import parse_metadata
from coordinator.providers.response import (
    Response,
    ResponseToolCall,
    StreamChunk,
    collapse,
    parse_chunk,
    parse_response,
    to_json_text,
)
from coordinator.providers.runtime import ProviderRuntime
from coordinator.providers.tokens import count_by_model

from .harness import Harness

REQ: dict[str, Any] = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}
INIT = "fn initialize(config) { config }\n"


def _stream(harness: Harness, body: str) -> list[StreamChunk | ProviderError]:
    harness.write(
        "p", INIT + "fn inference(s, r) { #{} }\nfn stream(state, request, on_chunk) { " + body + " }"
    )

    async def collect(rt: ProviderRuntime) -> list[StreamChunk | ProviderError]:
        return [item async for item in rt.stream("p", REQ)]

    return harness.run(collect)


# -- docs/scripts/providers.md#the-functions entry points: "initialize with 1 param and inference with 2
# params"


def test_overloaded_entry_points_are_accepted(harness: Harness) -> None:
    """Rhai overloads by arity: a right-arity definition anywhere satisfies the check (reference has_fn)."""
    harness.write(
        "p",
        'fn initialize() { #{} }\nfn initialize(config) { #{tag: "one"} }\n'
        'fn inference(state) { #{content: "wrong"} }\n'
        "fn inference(state, request) { #{content: state.tag} }\n",
    )
    response = harness.run(lambda rt: rt.inference("p", REQ))
    assert response.content == "one"


# -- docs/scripts/providers.md#streamstate-request-on_chunk chunks: only an *unconvertible* chunk is an error
# item


def test_convertible_non_map_chunk_is_an_empty_chunk(harness: Harness) -> None:
    """A string passed to on_chunk converts to JSON fine; its fields read as defaults, no error item."""
    items = _stream(harness, 'on_chunk.call("just text"); on_chunk.call(#{delta: "a"});')
    assert all(isinstance(i, StreamChunk) for i in items), items
    assert [i.delta for i in items if isinstance(i, StreamChunk)] == ["", "a"]
    assert parse_chunk(5) == StreamChunk()


def test_chunk_tool_call_index_is_unsigned(harness: Harness) -> None:
    """docs/scripts/host-functions.md#values-between-json-and-rhai: negative integers (and floats) fail every
    u64 field, so the index reads as its default 0."""
    items = _stream(
        harness,
        'on_chunk.call(#{tool_calls: [#{index: -3, arguments_delta: "x"}, #{index: 2.0}, #{index: 4}]});',
    )
    (chunk,) = items
    assert isinstance(chunk, StreamChunk)
    assert [d.index for d in chunk.tool_calls] == [0, 0, 4]


# -- docs/scripts/providers.md#inferencestate-request request: temperature is 0.0 when the model's
# capabilities say no temperature


def test_temperature_zero_when_model_takes_none(harness: Harness) -> None:
    harness.write("p", INIT + "fn inference(state, request) { #{content: to_json(request.temperature)} }")
    harness.data["model_capabilities"] = {"fixed": {"supports_temperature": False}}

    async def body(rt: ProviderRuntime) -> tuple[str, str, str]:
        fixed = await rt.inference("p", {**REQ, "model": "fixed", "temperature": 0.9})
        default = await rt.inference("p", {**REQ, "model": "fixed"})
        other = await rt.inference("p", {**REQ, "temperature": 0.9})
        return fixed.content, default.content, other.content

    assert harness.run(body) == ("0.0", "0.0", "0.9")


# -- docs/scripts/providers.md#count_tokensstate-text-model guard text: "each tool's name, description and
# schema JSON" (serde_json: compact, raw UTF-8) --


def test_guard_counts_compact_schema_json(harness: Harness) -> None:
    harness.write(
        "p",
        "// @max_context_tokens 10\n" + INIT + "fn inference(s, r) { #{} }\n"
        "fn count_tokens(state, text, model) { text.len() }\n",
    )
    harness.data["limits"] = {"exact_token_counting": True}
    schema = {"type": "object", "properties": {"a": {"type": "string", "description": "café"}}}
    request = {**REQ, "max_tokens": 1, "tools": [{"name": "f", "description": "d", "parameters": schema}]}
    text = "\n".join(
        ["hi", "f", "d", json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)]
    )

    async def body(rt: ProviderRuntime) -> str:
        with pytest.raises(TokenLimitExceeded) as err:
            await rt.inference("p", request)
        return str(err.value.message)

    assert harness.run(body) == f"Token limit exceeded: {len(text)} > 10"


# -- docs/scripts/host-functions.md#values-between-json-and-rhai,
# docs/scripts/providers.md#streamstate-request-on_chunk collapsed chunk: arguments_delta is serde_json's
# compact text


def test_collapse_writes_floats_like_serde_json(harness: Harness) -> None:
    """serde_json (ryu) writes 1e-7, 1e21, 0.00001, 1e16 where Python would write 1e-07, 1e+21..."""
    harness.write(
        "p",
        INIT + 'fn inference(state, request) { #{tool_calls: [#{id: "c", name: "f", arguments: '
        'parse_json("{\\"x\\":1e-7,\\"y\\":1e21,\\"z\\":0.00001,\\"w\\":1e16,'
        '\\"v\\":1.5,\\"u\\":-2.5e-300}")}]} }',
    )

    async def body(rt: ProviderRuntime) -> list[StreamChunk | ProviderError]:
        return [item async for item in rt.stream("p", REQ)]

    (chunk,) = harness.run(body)
    assert isinstance(chunk, StreamChunk)
    assert chunk.tool_calls[0].arguments_delta == (
        '{"u":-2.5e-300,"v":1.5,"w":1e16,"x":1e-7,"y":1e21,"z":0.00001}'
    )
    plain = collapse(
        Response(tool_calls=[ResponseToolCall("c", "f", {"a": 3.0, "b": 123456789.125, "c": 1e-5})])
    )
    assert plain.tool_calls[0].arguments_delta == '{"a":3.0,"b":123456789.125,"c":0.00001}'


# -- docs/scripts/providers.md#metadata metadata -------------------------------------------------------------


def test_metadata_numbers_parse_like_rust_unsigned() -> None:
    """Rust's ``parse::<usize>`` accepts a leading ``+`` and rejects values beyond u64."""
    assert parse_metadata("// @max_context_tokens +5000").max_context_tokens == 5000
    assert parse_metadata(f"// @max_output_tokens {2**64}").max_output_tokens == 4096
    assert parse_metadata("// @max_output_tokens -5").max_output_tokens == 4096


def test_metadata_keyword_ends_at_any_whitespace() -> None:
    """Keyword = text up to the first whitespace (Unicode whitespace, as Rust's ``char::is_whitespace``)."""
    assert parse_metadata("// @max_context_tokens\u00a07000").max_context_tokens == 7000
    assert parse_metadata("// @description\u2003wide").description == "wide"


def test_type_lists_keep_only_mime_patterns() -> None:
    """Items that are not mime patterns are unparsable and dropped; a list with none keeps the default."""
    m = parse_metadata("// @input_types text/*, Image/PNG , not-a-type, bad type/x\n// @output_types junk")
    assert m.input_types == ("text/*", "image/png")
    assert m.output_types == ("text/*",)


# -- docs/scripts/providers.md#inferencestate-request parts / docs/scripts/host-functions.md decode_base64:
# standard padded base64 (canonical, as Rust's STANDARD engine) --


def test_parts_reject_non_canonical_base64() -> None:
    parts = parse_response(
        {"parts": [{"data": "AQID===="}, {"data": "AR=="}, {"data": "AQI="}, {"data": "AQ"}]}
    ).parts
    assert [p.data for p in parts] == [b"\x01\x02"]


def test_decode_base64_rejects_non_canonical(harness: Harness) -> None:
    harness.write(
        "p",
        INIT + "fn inference(state, request) { let out = [];"
        ' for s in ["AQID====", "AR==", "aGk="] { try { out.push(decode_base64(s)); }'
        " catch (e) { out.push(e.sub_string(0, 33)); } }"
        ' #{content: out.reduce(|a, b| a + "|" + b, "")} }',
    )
    content = harness.run(lambda rt: rt.inference("p", REQ)).content
    bad = "decode_base64: not valid base64: "
    assert content == f"|{bad}|{bad}|hi"


# -- docs/scripts/providers.md#count_tokensstate-text-model fallback heuristic: tiktoken with the *model's*
# BPE, else cl100k_base


def test_heuristic_uses_the_models_bpe() -> None:
    text = "日本語のテキスト"  # 8 tokens in cl100k_base, 6 in o200k_base
    assert count_by_model(text, "gpt-4") == 8
    assert count_by_model(text, "gpt-3.5-turbo") == 8
    assert count_by_model(text, "gpt-4o") == 6
    assert count_by_model(text, "gpt-4o-mini") == 6
    assert count_by_model(text, "o3-mini") == 6
    assert count_by_model(text, "o4-mini") == 6
    assert count_by_model(text, "gpt-unknown") == 8  # no mapping: cl100k_base


_PLAIN = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(_PLAIN)
def test_the_coordinators_json_text_is_the_scripts(value: Any) -> None:
    """The coordinator writes JSON text (collapsed chunks, the guard's text) exactly as a script's
    ``to_json`` does in the worker: one spelling of floats, keys and escapes on both sides."""
    assert to_json_text(value) == rhai.to_json(value)


def test_the_token_fallback_counts_special_tokens_instead_of_failing() -> None:
    """The reference encodes with special tokens allowed: ``<|endoftext|>`` is one token, not an error."""
    assert count_by_model("<|endoftext|>", "gpt-4") == 1
    assert count_by_model("a<|endoftext|>b", "gpt-4o") == 3
