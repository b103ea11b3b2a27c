"""The pure provider helpers of the worker (docs/scripts/host-functions.md), called on a real engine."""

from __future__ import annotations

from typing import Any

import pytest
import rhai

from worker.functions.provider import FUNCTIONS


def run(body: str, *args: Any) -> Any:
    engine = rhai.Engine(max_operations=500_000, max_string_size=2_000_000)
    for name, fn in FUNCTIONS.items():
        engine.register_fn(name, fn)
    params = ", ".join(f"a{i}" for i in range(len(args)))
    return engine.compile(f"fn t({params}) {{ {body} }}", name="t.rhai").call("t", *args)


def test_pe1_parse_json_error_names_parse_json() -> None:
    with pytest.raises(rhai.ScriptThrow) as info:
        run('parse_json("{not json}")')
    assert str(info.value.value).startswith("parse_json:")
    assert run('let r = (); try { parse_json("{not json}") } catch (e) { r = "caught: " + e } r').startswith(
        "caught: parse_json:"
    )


def test_pe2_parse_sse() -> None:
    assert run('parse_sse("data: [DONE]")') is None
    assert run('parse_sse("")') is None
    assert run('parse_sse("not json")') is None
    assert run('parse_sse("data: {\\"n\\":7}").n') == 7
    assert run('parse_sse("  data:5  ")') == 5
    assert run("parse_sse(a0)", '{"a":[1,2]}') == {"a": [1, 2]}


def test_pe4_pe5_to_json() -> None:
    import json

    text = run("to_json(#{content: a0})", "NASDAQ:\u202fCBRS\u200b wafer\u2011scale\ufeff")
    assert "\\u{" not in text
    assert json.loads(text) == {"content": "NASDAQ:\u202fCBRS\u200b wafer\u2011scale\ufeff"}
    assert json.loads(run('to_json([#{a:"x\u202fy"},"b\u200bc",1])')) == [{"a": "x\u202fy"}, "b\u200bc", 1]
    assert run("to_json(#{a:1})") == '{"a":1}'
    assert run("to_json(#{b:1,a:2})") == '{"a":2,"b":1}'
    with pytest.raises(rhai.RhaiError):
        run("to_json(|x| x)")


def test_pe6_encoders() -> None:
    assert run('encode_uri("a b/c")') == "a%20b%2Fc"
    assert run('encode_uri("Aa0-_.~ /?")') == "Aa0-_.~%20%2F%3F"
    assert run('encode_uri("é")') == "%C3%A9"
    assert run('encode_base64("hi")') == "aGk="
    assert run('decode_base64("aGk=")') == "hi"


def test_decode_base64_errors_are_catchable_strings() -> None:
    msg = run('let r = (); try { decode_base64("!!") } catch (e) { r = e } r')
    assert msg.startswith("decode_base64: not valid base64: ")
    msg = run('let r = (); try { decode_base64("aGk") } catch (e) { r = e } r')
    assert msg.startswith("decode_base64: not valid base64: ")
    msg = run('let r = (); try { decode_base64("//79") } catch (e) { r = e } r')
    assert msg.startswith("decode_base64: decoded 3 bytes that are not UTF-8 text (")


def test_pe8_pd2_heuristic_hints() -> None:
    assert run('count_tokens_heuristic("abcd", "general")') == 1
    assert run('count_tokens_heuristic("abcd", "gemini")') == 1
    assert run('count_tokens_heuristic("abcdefgh", "anthropic")') == 3
    assert run('count_tokens_heuristic("abcdefg", "anthropic")') == 2
    assert run('count_tokens_heuristic("hello world", "openai")') >= 1
    assert run('count_tokens_heuristic("", "general")') == 0
    assert run('count_tokens_heuristic("日", "other")') == 1
    assert run('count_tokens_heuristic(a0, "general") + 100', "abcd") == 101


def test_openai_hint_is_cl100k() -> None:
    assert run('count_tokens_heuristic("hello world", "openai")') == 2  # "hello", " world"
    assert run('count_tokens_heuristic("Hello, world! How are you today?", "openai")') == 9
