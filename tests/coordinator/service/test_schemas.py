"""The request and reply schemas (coordinator/service/schemas.py), the one-line problems they give, the
name rule, and the checked-in OpenAPI document: all without a service (the live checks are in
test_bodies_fuzz.py and test_schemas_replies.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError
from starlette.routing import Route

from coordinator.service import front, routes_ops, routes_providers, routes_regions, routes_scripts
from coordinator.service.http import problem
from coordinator.service.names import InvalidName, check_name
from coordinator.service.openapi import (
    API,
    FAILURES,
    openapi_document,
    openapi_text,
)
from coordinator.service.schemas import (
    OPENAPI_PATH,
    Assemble,
    CountTokens,
    Evict,
    InferenceRequest,
    ProviderTableBody,
    RegionCreate,
    Render,
    Replace,
    ScriptPut,
    ScriptValidate,
    TenantToken,
    WriteEntry,
)

BODIES: list[Any] = [
    ScriptPut, ScriptValidate, RegionCreate, WriteEntry, Replace, Render, Evict, Assemble,
    InferenceRequest, CountTokens, ProviderTableBody, TenantToken,
]  # fmt: skip


def _problem(schema: Any, raw: bytes | str) -> str:
    data = raw.encode() if isinstance(raw, str) else raw
    with pytest.raises(ValidationError) as refused:
        TypeAdapter(schema).validate_json(data)
    text = problem(schema, data, refused.value)
    assert "\n" not in text and len(text) < 400, text
    return text


# -- the document ------------------------------------------------------------------------------------


def test_the_checked_in_document_is_the_generated_one() -> None:
    """Regenerate with ``.venv/bin/python -c 'from coordinator.service.openapi import write_openapi;
    write_openapi()'`` after changing a schema or a route."""
    assert OPENAPI_PATH.read_text(encoding="utf-8") == openapi_text()


def test_the_api_table_documents_exactly_the_served_routes() -> None:
    served = {
        (m, r.path.replace(":path", ""))
        for module in (routes_ops, routes_providers, routes_regions, routes_scripts, front)
        for r in module.ROUTES
        if isinstance(r, Route)
        for m in (r.methods or ()) - {"HEAD"}
    }
    documented = [(e.method, e.path) for e in API]
    assert len(documented) == len(set(documented))
    assert served == set(documented)


def test_every_body_is_typed_and_every_failure_explained() -> None:
    doc = openapi_document()
    schemas = doc["components"]["schemas"]
    for endpoint in API:
        operation = doc["paths"][endpoint.path][endpoint.method.lower()]
        assert set(endpoint.fails) <= set(FAILURES), endpoint.path
        if endpoint.body is None:
            assert "requestBody" not in operation
            continue
        ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        body = schemas[ref.rsplit("/", 1)[-1]]
        assert body["type"] == "object" and body["properties"], endpoint.path
    for name, schema in schemas.items():  # no body or reply is a bare {"type": "object"}
        assert set(schema) - {"title", "description"} != {"type"}, name


def test_request_bodies_refuse_unknown_keys_in_the_document() -> None:
    schemas = openapi_document()["components"]["schemas"]
    for name in ("Render", "WriteEntry", "InferenceRequest", "MessageBody", "RegionCreate", "ToolUseBlock"):
        assert schemas[name]["additionalProperties"] is False, name
    assert schemas["ProviderTable"].get("additionalProperties", True) is not False  # forwarded keys


# -- one-line problems ------------------------------------------------------------------------------


def test_a_mistyped_key_is_refused_with_a_suggestion() -> None:
    assert _problem(Render, '{"stage": "plan"}') == "unknown field 'stage': did you mean 'stage_name'?"
    assert "did you mean 'total_tokens'" in _problem(Render, '{"window": {"total": 1}}')
    assert "did you mean 'messages'" in _problem(InferenceRequest, '{"mesages": []}')


def test_a_mistyped_key_inside_a_union_member_names_the_path_as_written() -> None:
    block = '{"type": "tool_use", "id": "a", "name": "n", "inptu": 1}'
    raw = '{"messages": [{"role": "user", "content": [' + block + "]}]}"
    text = _problem(InferenceRequest, raw)
    assert text.startswith("unknown field 'messages[0].content[0].inptu': did you mean 'input'?"), text


def test_an_unknown_key_without_a_close_match_lists_the_known_ones() -> None:
    text = _problem(Evict, '{"needed_tokens": 1, "zzzz": 2}')
    assert text == "unknown field 'zzzz' (expected one of needed_tokens)"


def test_an_unknown_key_is_quoted_on_one_line() -> None:
    text = _problem(Evict, '{"needed_tokens": 1, "a\\nb\\u0007": 2}')
    assert "a\\nb\\x07" in text


@pytest.mark.parametrize(
    ("schema", "raw", "expected"),
    [
        (ScriptPut, "{}", "missing field 'content'"),
        (ScriptPut, '{"content": 5}', "field 'content': Input should be a valid string"),
        (RegionCreate, '{"name": "x", "script": "s", "budget": "10"}', "field 'budget'"),
        (RegionCreate, '{"name": "x", "script": "s", "budget": true}', "field 'budget'"),
        (RegionCreate, '{"name": "x", "script": "s", "budget": -1}', "greater than or equal to 0"),
        (RegionCreate, '{"name": "x", "script": "s", "budget": 1' + "0" * 30 + "}", "less than"),
        (Replace, '{"content": "x", "tokens": -1}', "field 'tokens'"),
        (WriteEntry, '{"content": "x", "timestamp": Infinity}', "field 'timestamp'"),
        (WriteEntry, '{"content": "x", "timestamp": 9223372036854775808}', "field 'timestamp'"),
        (WriteEntry, '{"content": "x", "tool_calls": [1]}', "field 'tool_calls[0]'"),
        (WriteEntry, '{"content": "x", "kind": "weird"}', "field 'kind'"),
        (ScriptValidate, '{"kind": "model_provider", "content": ""}', "'provider' or 'region_hook'"),
        (InferenceRequest, '{"temperature": NaN}', "finite"),
        (InferenceRequest, '{"temperature": -Infinity}', "finite"),
        (InferenceRequest, '{"messages": "not a list"}', "field 'messages'"),
        (InferenceRequest, '{"messages": [{"role": "system", "content": "x"}]}', "field 'messages[0].role'"),
        (InferenceRequest, '{"extra": {"top_p": 1e400}}', "finite"),
        (InferenceRequest, '{"extra": {"seed": 18446744073709551616}}', "64 bits"),
        (ProviderTableBody, '{"anything": [NaN]}', "request body: numbers must be finite"),
        (ProviderTableBody, '{"rate_limit": {"requests_per_minute": 0, "tokens_per_minute": 1}}', "rate"),
        (TenantToken, '{"token_sha256": "abc"}', "field 'token_sha256'"),
    ],
)
def test_a_bad_value_names_its_field(schema: Any, raw: str, expected: str) -> None:
    assert expected in _problem(schema, raw)


def test_free_form_json_is_walked_for_numbers_out_of_range() -> None:
    raw = '{"content": "x", "tool_calls": [{"id": "a", "name": "b", "arguments": {"x": [1, {"y": 1e999}]}}]}'
    assert "field 'tool_calls[0].arguments': numbers must be finite" in _problem(WriteEntry, raw)
    fine = raw.replace("1e999", "-9223372036854775808")
    (call,) = TypeAdapter(WriteEntry).validate_json(fine)["tool_calls"]
    assert call["arguments"]["x"][1] == {"y": -(2**63)}


@pytest.mark.parametrize("escape", ["\\ud800", "\\udfff", "\\ud800x", "\\udc00\\ud800"])
def test_lone_surrogates_are_not_text(escape: str) -> None:
    text = _problem(ScriptPut, '{"content": "a' + escape + '"}')
    assert text.startswith("request body is not JSON") and "surrogate" in text
    assert TypeAdapter(ScriptPut).validate_json(b'{"content": "\\ud83d\\ude00"}').content == "\U0001f600"


@pytest.mark.parametrize("schema", [WriteEntry, Render, InferenceRequest])
def test_deep_nesting_is_refused_by_the_parser(schema: Any) -> None:
    for raw in ("[" * 100_000 + "]" * 100_000, '{"content": ' + "[" * 100_000 + "]" * 100_000 + "}"):
        assert "nested too deep" in _problem(schema, raw)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"", "request body is empty"),
        (b"   ", "request body is empty"),
        (b"\xff\xfe", "request body is not UTF-8"),
        (b'{"content": "\xff"}', "request body is not UTF-8"),
        (b"{not json", "request body is not JSON"),
        (b"[1, 2]", "request body must be a JSON object"),
        (b'"text"', "request body must be a JSON object"),
        (b"null", "request body must be a JSON object"),
    ],
)
def test_bodies_that_are_not_an_object(raw: bytes, expected: str) -> None:
    for schema in (ScriptPut, WriteEntry):
        assert _problem(schema, raw).startswith(expected)


def test_several_problems_are_counted_on_the_one_line() -> None:
    assert _problem(RegionCreate, "{}").endswith("(and 2 more)")


def test_every_body_refuses_a_non_object_and_an_unknown_key() -> None:
    for schema in BODIES:
        with pytest.raises(ValidationError):
            TypeAdapter(schema).validate_json(b"[]")
        if schema is not ProviderTableBody:  # its unknown keys are the script's
            assert "unknown field 'zz_not_a_key'" in _problem(schema, '{"zz_not_a_key": 1}')


# -- valid bodies ---------------------------------------------------------------------------------


def test_valid_bodies_keep_what_the_runtime_reads() -> None:
    raw = b'{"content": "x", "kind": "assistant_turn", "tool_calls": []}'
    write = TypeAdapter(WriteEntry).validate_json(raw)
    assert write == {"content": "x", "kind": "assistant_turn", "tool_calls": []}  # absent keys stay absent
    request = {
        "model": "m",
        "system": ["plain", {"text": "t", "cache_hint": {"SlidingPrefix": {"stable_fraction": 0.5}}}],
        "messages": [
            {"role": "user", "content": "hi", "cache_breakpoint": True},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "1", "name": "f", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "1", "content": "ok"}]},
        ],
        "tools": [{"name": "f", "parameters": {"type": "object"}}],
        "temperature": 1,
        "extra": None,
    }
    assert TypeAdapter(InferenceRequest).validate_json(json.dumps(request)) == request
    render = TypeAdapter(Render).validate_json(b"{}")
    assert (render.stage_name, render.stage_iterations, render.window) == ("", 0, None)
    limits = {"requests_per_minute": 1, "tokens_per_minute": 2}
    given = {"api_key": "k", "rate_limit": limits, "x": {"y": [1.5]}}
    assert TypeAdapter(ProviderTableBody).validate_json(json.dumps(given)) == given


# -- names --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "A-b_c.9", "x" * 64, "..a", "a..", ".hidden"])
def test_names_inside_the_rule(name: str) -> None:
    for kind in ("script", "region", "provider"):
        assert check_name(name, kind) == name  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "name", ["", ".", "..", "x" * 65, "a b", "a/b", "a\nb", "a\x00b", "é", "a\n", "x" * 300, ".rhai"]
)
def test_names_outside_the_rule(name: str) -> None:
    for kind in ("script", "region", "provider") if name != ".rhai" else ("script", "provider"):
        with pytest.raises(InvalidName) as refused:
            check_name(name, kind)  # type: ignore[arg-type]
        assert refused.value.status == 400 and "\n" not in str(refused.value.error)
        assert str(refused.value.error).startswith(f"Invalid {kind} name '")
        assert len(str(refused.value.error)) < 300


def test_the_rhai_suffix_names_the_same_script_but_not_the_same_region() -> None:
    assert check_name("notes.rhai") == "notes" == check_name("notes.rhai", "provider")
    assert check_name("notes.rhai", "region") == "notes.rhai"
    assert check_name("x" * 64 + ".rhai") == "x" * 64


def test_names_in_bodies_follow_the_rule() -> None:
    created = TypeAdapter(RegionCreate).validate_json(b'{"name": "n", "script": "s.rhai", "budget": 1}')
    assert created.script == "s"
    assert "Invalid region name" in _problem(RegionCreate, '{"name": "a b", "script": "s", "budget": 1}')
    assert "Invalid script name" in _problem(RegionCreate, '{"name": "n", "script": "../s", "budget": 1}')
