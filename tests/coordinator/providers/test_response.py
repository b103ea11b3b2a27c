"""Responses, usage, finish reasons, parts, chunks (docs/scripts/providers.md#inferencestate-request,
docs/scripts/providers.md#streamstate-request-on_chunk; PB8, PB9, PB15, PB16, PB20, PC5, PC6)."""

from __future__ import annotations

import pytest

from coordinator.providers.failures import InvalidResponse
from coordinator.providers.metadata import MimeRow
from coordinator.providers.response import (
    Response,
    ResponseToolCall,
    TokenUsage,
    collapse,
    finish_reason,
    parse_chunk,
    parse_response,
    parse_usage,
    to_plain,
)


def test_pb8_defaults() -> None:
    r = parse_response({})
    assert (r.content, r.tool_calls, r.tokens_used.total_tokens, r.finish_reason, r.parts) == (
        "",
        [],
        0,
        "Complete",
        [],
    )


def test_pb7_non_map_and_unconvertible() -> None:
    with pytest.raises(InvalidResponse, match="must return a map"):
        parse_response([1, 2, 3])
    with pytest.raises(InvalidResponse, match="unconvertible"):
        parse_response({"content": object()})


def test_lenient_fields() -> None:
    r = parse_response({"content": 5, "tool_calls": "x", "tokens_used": 3, "finish_reason": 1})
    assert (r.content, r.tool_calls, r.tokens_used, r.finish_reason) == ("", [], TokenUsage(), "Complete")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("ToolCall", "ToolCall"),
        ("tool_calls", "ToolCall"),
        ("tool_use", "ToolCall"),
        ("TokenLimit", "TokenLimit"),
        ("length", "TokenLimit"),
        ("max_tokens", "TokenLimit"),
        ("Stop", "Stop"),
        ("stop_sequence", "Stop"),
        ("stop", "Complete"),
        ("end_turn", "Complete"),
        ("tool-calls", "Complete"),
        (None, "Complete"),
        (3, "Complete"),
        ("Complete", "Complete"),
        ("TOOLCALL", "Complete"),
    ],
)
def test_pb9_finish_mapping(raw: object, expected: str) -> None:
    assert finish_reason(raw) == expected
    assert parse_response({} if raw is None else {"finish_reason": raw}).finish_reason == expected


def test_pb15_tool_calls_passthrough() -> None:
    r = parse_response(
        {
            "tool_calls": [
                {"id": "t1", "name": "a", "arguments": '{"x":1}', "thought_signature": "sig"},
                {"id": "t2", "name": "b", "arguments": {"y": 2}},
                {"id": 5},
                "junk",
            ]
        }
    )
    assert r.tool_calls[0] == ResponseToolCall("t1", "a", '{"x":1}', "sig")
    assert r.tool_calls[1] == ResponseToolCall("t2", "b", {"y": 2}, None)
    assert r.tool_calls[2] == ResponseToolCall("", "", None, None)
    assert r.tool_calls[3] == ResponseToolCall("", "", None, None)


def test_pb16_usage_normalisation() -> None:
    base = {"prompt_tokens": 100, "cached_tokens": 30, "cache_write_tokens": 10, "completion_tokens": 5}
    assert parse_usage(base) == TokenUsage(60, 5, 105, 30, 10, None)
    assert parse_usage({**base, "total_tokens": 500}).total_tokens == 500
    assert parse_usage({**base, "total_tokens": 50}).total_tokens == 105
    assert parse_usage({"prompt_tokens": 100, "cached_tokens": 200}).prompt_tokens == 0


def test_usage_integer_fields_and_cost() -> None:
    u = parse_usage({"prompt_tokens": 1.0, "completion_tokens": -3, "total_tokens": "9", "cost_usd": 2})
    assert (u.prompt_tokens, u.completion_tokens, u.total_tokens, u.cost_usd) == (0, 0, 0, 2.0)
    assert parse_usage({"cost": 0.5}).cost_usd == 0.5
    assert parse_usage({"cost_usd": None, "cost": 0.5}).cost_usd is None  # cost_usd present → cost not read
    assert parse_usage({"cost_usd": "1"}).cost_usd is None
    assert parse_usage({}).cost_usd is None
    assert parse_usage({"cost_usd": 0.0}).cost_usd == 0.0


def test_pb20_parts() -> None:
    items = [
        {"bytes": [137, 80, 78, 71], "mime_type": "image/png", "name": "hero.png"},
        {"data": "AQID"},
        {"data": "!!", "mime_type": "image/png"},
        {"bytes": [], "mime_type": "image/png"},
        {"mime_type": "image/png"},
        {"data": "AQID", "mime_type": "not a type"},
    ]
    parts = parse_response({"parts": items}).parts
    assert [(p.mime_type, p.name, p.data) for p in parts] == [
        ("image/png", "hero.png", bytes([137, 80, 78, 71])),
        ("application/octet-stream", None, b"\x01\x02\x03"),
        ("application/octet-stream", None, b"\x01\x02\x03"),
    ]
    chunk = parse_chunk({"delta": "x", "parts": [{"data": "AQID", "mime_type": "audio/wav"}]})
    assert [(p.mime_type, p.data) for p in chunk.parts] == [("audio/wav", b"\x01\x02\x03")]
    assert parse_response({"content": "x"}).parts == []


def test_parts_from_blob_filter_and_sniff() -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"rest"
    parts = parse_response(
        {"parts": [{"bytes": png}, {"bytes": [1, 300, -1, 2.0, True, 2]}, {"data": " AQID "}]}
    ).parts
    assert parts[0].mime_type == "image/png"  # sniffed: no declared type
    assert parts[1].data == b"\x01\x02"
    assert parts[2].data == b"\x01\x02\x03"
    rows = [MimeRow("application/x-acme-scene", family="model", magic=b"ACME")]
    scene = parse_response({"parts": [{"bytes": b"ACME1234"}]}, rows).parts[0]
    assert scene.mime_type == "application/x-acme-scene"


def test_pc6_chunk_parsing() -> None:
    c = parse_chunk(
        {
            "tool_calls": [{"index": 2, "id": "x", "name": "f", "arguments_delta": '{"a":'}],
            "tokens": {"total_tokens": 9},
            "finish_reason": "stop",
        }
    )
    assert (c.tool_calls[0].index, c.tool_calls[0].id, c.tool_calls[0].arguments_delta) == (2, "x", '{"a":')
    assert c.tokens is not None and c.tokens.total_tokens == 9
    assert c.finish_reason == "Complete"
    plain = parse_chunk({"delta": "tok"})
    assert (plain.delta, plain.tokens, plain.finish_reason) == ("tok", None, None)


def test_chunk_subtleties() -> None:
    assert parse_chunk({"tokens": None}).tokens == TokenUsage()  # key present as () → all-zero usage
    assert parse_chunk({"finish_reason": 3}).finish_reason is None
    d = parse_chunk({"tool_calls": [{}]}).tool_calls[0]
    assert (d.index, d.id, d.name, d.arguments_delta) == (0, None, None, "")
    with pytest.raises(InvalidResponse):
        parse_chunk({"delta": lambda: 1})


def test_pc5_collapse() -> None:
    r = Response("whole", [ResponseToolCall("c1", "f", {"b": 1, "a": [1]})], TokenUsage(1, 2, 3), "ToolCall")
    c = collapse(r)
    assert c.delta == "whole" and c.finish_reason == "ToolCall" and c.tokens == TokenUsage(1, 2, 3)
    assert [(t.index, t.id, t.name, t.arguments_delta) for t in c.tool_calls] == [
        (0, "c1", "f", '{"a":[1],"b":1}')
    ]


def test_a_flat_answer_reads_as_a_copy_with_the_usual_rules() -> None:
    """A flat map of text and numbers is taken in one pass: still a copy, and the rules still hold."""
    flat = {"content": "hi", "n": 3, "ok": True, "none": None}
    plain = to_plain(flat)
    assert plain == flat and plain is not flat
    assert to_plain({"x": float("nan"), "y": 1.5}) == {"x": None, "y": 1.5}  # floats keep their rule
    assert to_plain({"b": b"\x01\x02"}) == {"b": [1, 2]}
    with pytest.raises(InvalidResponse, match="map key is not a string"):
        parse_response({1: "a"})
