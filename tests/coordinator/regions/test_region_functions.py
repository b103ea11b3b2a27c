"""The region helper set (docs/scripts/regions.md#helpers-a-hook-can-call) called directly: semantics and the
reference's typed signatures."""

from __future__ import annotations

from typing import Any

import pytest

from worker.functions.region import FUNCTIONS, rhai_to_string

F = FUNCTIONS


def test_the_set_is_exactly_the_reference_helpers() -> None:
    assert set(F) == {
        "contains",
        "starts_with",
        "ends_with",
        "trim",
        "split",
        "join",
        "count_tokens",
        "is_json",
        "is_mermaid",
        "is_markdown",
        "is_empty",
        "summarize",
        "extract_modified",
        "region_pinned",
        "region_temporary",
        "region_clearable",
        "region_sliding_window",
        "region_compacting",
        "region_custom",
        "region_entry",
        "content_format",
        "tokens_remaining",
        "usage_ratio",
        "needs_eviction",
    }
    assert not {"parse_json", "to_json", "http_get", "http_post", "env_var", "encode_base64"} & set(F)


def test_strings() -> None:
    assert (
        F["contains"]("hello world", "world")
        and F["contains"]("hello", "")
        and not F["contains"]("hello", "xyz")
    )
    assert F["starts_with"]("hello", "he") and not F["starts_with"]("hello", "lo")
    assert F["ends_with"]("hello", "lo") and not F["ends_with"]("hello", "he")
    assert F["trim"]("\u3000 hi \n") == "hi"
    assert F["trim"]("\x1chi") == "\x1chi"  # not Unicode White_Space, so Rust keeps it
    assert F["split"]("a,b,c", ",") == ["a", "b", "c"] and F["split"]("abc", ",") == ["abc"]
    assert F["split"]("ab", "") == ["", "a", "b", ""]
    assert F["join"](["a", "b", "c"], ",") == "a,b,c" and F["join"]([], ",") == ""
    assert F["join"](["x", 1, 2.0, True, None], "|") == "x|1|2.0|true|"


@pytest.mark.parametrize(("text", "tokens"), [("", 0), ("hello world", 3), ("abcd", 1), ("é", 1)])
def test_count_tokens(text: str, tokens: int) -> None:
    assert F["count_tokens"](text) == tokens


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        ("{}", True),
        ("[1,2,3]", True),
        (" 5 ", True),
        ('"s"', True),
        ("null", True),
        ("not json", False),
        ("", False),
        ("NaN", False),
        ("[Infinity]", False),
        ("[1e400]", False),
        ('"\\ud800"', False),
        ("[1,]", False),
        ("\ufeff{}", False),
        ("[" * 127 + "]" * 127, True),
        ("[" * 128 + "]" * 128, False),
    ],
)
def test_is_json_follows_serde_json(text: str, valid: bool) -> None:
    assert F["is_json"](text) is valid


def test_content_classifiers() -> None:
    assert F["is_mermaid"]("graph TD; A-->B") and F["is_mermaid"]("sequenceDiagram\nA->>B: Hi")
    assert not F["is_mermaid"]("just some text")
    assert F["is_markdown"]("plain") and not F["is_markdown"]("")
    assert F["is_empty"]("") and F["is_empty"](" \t\n") and not F["is_empty"]("hi")


def test_placeholders() -> None:
    assert F["summarize"]("hello", 100) == "hello"
    assert F["summarize"]("hello world", 2) == "hello wo..."
    assert F["summarize"]("hello", -1) == "hello"
    with pytest.raises(ValueError, match="char boundary"):
        F["summarize"]("語語語", 1)
    assert F["extract_modified"]("modified: a.rs\nother\r\nchanged: b.rs\nM c.rs\n") == [
        "modified: a.rs",
        "changed: b.rs",
        "M c.rs",
    ]


def test_constructors_and_budget_helpers() -> None:
    assert (F["region_pinned"](), F["region_temporary"](), F["region_clearable"]()) == (
        "pinned",
        "temporary",
        "clearable",
    )
    assert F["region_sliding_window"](10) == {"kind": "sliding_window", "max_items": 10}
    assert F["region_compacting"](5000) == {"kind": "compacting", "threshold_tokens": 5000}
    assert F["region_custom"]("r.rhai", True) == {"kind": "custom", "script": "r.rhai", "persistent": True}
    assert F["region_entry"]("", 0) == {"content": "", "tokens": 0}
    assert [F["content_format"](f) for f in ("json", "code", "invalid", "")] == [
        "json",
        "code",
        "text",
        "text",
    ]
    assert F["tokens_remaining"](100, 30) == 70 and F["tokens_remaining"](100, 130) == -30
    assert (
        F["tokens_remaining"](-(2**63), 1) == -(2**63) and F["tokens_remaining"](2**63 - 1, -1) == 2**63 - 1
    )
    assert F["usage_ratio"](100, 50) == 0.5 and F["usage_ratio"](0, 50) == 1.0
    assert F["needs_eviction"](100, 80, 0.8) and not F["needs_eviction"](100, 50, 0.8)
    assert F["needs_eviction"](0, 0, 0.8)


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("tokens_remaining", (1.5, 2)),
        ("needs_eviction", (100, 80, 1)),
        ("contains", (5, "x")),
        ("trim", ()),
        ("join", ("abc", ",")),
        ("region_custom", ("r", 1)),
        ("region_entry", ("c", True)),
    ],
)
def test_wrong_types_are_function_not_found(name: str, args: tuple[Any, ...]) -> None:
    with pytest.raises(TypeError, match=f"Function not found: {name}"):
        F[name](*args)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.0, "1.0"),
        (0.1, "0.1"),
        (1e-7, "0.0000001"),
        (-2.5, "-2.5"),
        (1e21, "1e21"),
        (1.5e-14, "1.5e-14"),
        (0.0, "0.0"),
        ([1, "a", None], '[1, "a", ()]'),
        ({"a": 1}, '#{"a": 1}'),
    ],
)
def test_to_string_like_rhai(value: Any, text: str) -> None:
    assert rhai_to_string(value) == text


def test_signatures_match_the_functions() -> None:
    from worker.functions.region import SIGNATURES

    assert set(SIGNATURES) == set(F)
    for name, types in SIGNATURES.items():
        samples = {"string": "s", "i64": 1, "f64": 0.5, "bool": True, "array": ["a"]}
        F[name](*(samples[t] for t in types))  # the declared types are accepted
