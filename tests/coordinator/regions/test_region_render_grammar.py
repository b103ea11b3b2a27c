"""docs/scripts/regions.md#renderctx render grammar and docs/scripts/regions.md#renderctx fallback, on plain
JSON values (pure functions)."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.regions.model import Entry, Message, SystemBlock
from coordinator.regions.render import InvalidShape, fallback_blocks, interpret_render

CALL = {"id": "c1", "name": "shell", "arguments": {"command": "ls"}}


def test_string_render_is_one_block_with_hint_by_persistence() -> None:
    out = interpret_render("<brain>", persistent=False)
    assert out.system == (SystemBlock("<brain>", "UntilChanged", "rewritten", ""),)
    assert interpret_render("<brain>", persistent=True).system[0].cache_hint == "Always"
    assert out.messages == ()


@pytest.mark.parametrize("value", ["", {}, {"system": None, "messages": None}, {"system": []}, {"other": 1}])
def test_empty_outputs_produce_nothing(value: Any) -> None:
    out = interpret_render(value, persistent=False)
    assert out.system == () and out.messages == ()


def test_whitespace_string_is_a_block() -> None:
    assert interpret_render("  ", persistent=False).system[0].text == "  "


def test_full_map_with_typed_messages_rb3() -> None:
    value = {
        "system": ["s1", "", "s2"],
        "messages": [
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "thinking", "tool_calls": [CALL]},
            {
                "role": "user",
                "tool_results": [{"tool_call_id": "c1", "content": "file_a", "is_error": False}],
            },
        ],
    }
    out = interpret_render(value, persistent=False)
    assert [b.text for b in out.system] == ["s1", "s2"]
    assert [m.to_json() for m in out.messages] == [
        {"role": "user", "content": "hello"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "thinking"},
                {"type": "tool_use", "id": "c1", "name": "shell", "input": {"command": "ls"}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "file_a", "is_error": False}],
        },
    ]


def test_single_system_string_null_messages_rb4() -> None:
    out = interpret_render({"system": "solo", "messages": None}, persistent=False)
    assert [b.text for b in out.system] == ["solo"] and out.messages == ()


def _msg(**fields: Any) -> dict[str, Any]:
    return {"messages": [fields]}


INVALID = [
    42,
    True,
    [1, 2],
    None,
    1.5,
    {"system": 42},
    {"system": [1]},
    {"system": ["ok", None]},
    {"messages": "not an array"},
    {"messages": [42]},
    _msg(content="no role"),
    _msg(role="system", content="x"),
    _msg(role=None, content="x"),
    _msg(role="user", content=42),
    _msg(role="user"),
    _msg(role="user", content=None),
    _msg(role="user", tool_calls=[]),
    _msg(role="assistant", tool_calls=42),
    _msg(role="assistant", tool_calls=None),
    _msg(role="assistant", tool_calls=[42]),
    _msg(role="assistant", tool_calls=[{"name": "n"}]),
    _msg(role="assistant", tool_calls=[{"id": "c"}]),
    _msg(role="assistant", tool_calls=[{"id": 1, "name": "n"}]),
    _msg(role="assistant", tool_results=[]),
    _msg(role="user", tool_results=42),
    _msg(role="user", tool_results=None),
    _msg(role="user", tool_results=[42]),
    _msg(role="user", tool_results=[{"content": "x"}]),
    _msg(role="user", tool_results=[{"tool_call_id": "c"}]),
    _msg(role="user", tool_results=[{"tool_call_id": "c", "content": 5}]),
    _msg(role="assistant", content=42, tool_calls=[]),
]


@pytest.mark.parametrize("value", INVALID)
def test_invalid_shapes_raise_rb5(value: Any) -> None:
    with pytest.raises(InvalidShape):
        interpret_render(value, persistent=False)


def test_one_bad_message_voids_everything() -> None:
    value = {
        "system": "fine",
        "messages": [{"role": "user", "content": "ok"}, {"role": "bot", "content": "x"}],
    }
    with pytest.raises(InvalidShape, match=r"messages\[1\]\.role"):
        interpret_render(value, persistent=False)


def test_tool_call_defaults_and_signature_rb14() -> None:
    plain = interpret_render(_msg(role="assistant", tool_calls=[{"id": "c", "name": "n"}]), persistent=False)
    assert plain.messages[0].content == ({"type": "tool_use", "id": "c", "name": "n", "input": {}},)
    signed = interpret_render(
        _msg(role="assistant", tool_calls=[{"id": "c", "name": "n", "thought_signature": "sig123"}]),
        persistent=False,
    )
    assert signed.messages[0].content[0]["thought_signature"] == "sig123"  # type: ignore[index]
    unsigned = interpret_render(
        _msg(role="assistant", tool_calls=[{"id": "c", "name": "n", "thought_signature": 5}]),
        persistent=False,
    )
    assert "thought_signature" not in unsigned.messages[0].content[0]  # type: ignore[operator]


def test_present_null_arguments_stay_null() -> None:
    out = interpret_render(
        _msg(role="assistant", tool_calls=[{"id": "c", "name": "n", "arguments": None}]), persistent=False
    )
    assert out.messages[0].content[0]["input"] is None  # type: ignore[index]


def test_tool_calls_take_precedence_and_results_are_ignored_there() -> None:
    value = _msg(role="assistant", tool_calls=[], tool_results=42)
    assert interpret_render(value, persistent=False).messages == (Message("assistant", ()),)


def test_tool_results_discard_content_and_default_is_error() -> None:
    value = _msg(
        role="user", content="dropped", tool_results=[{"tool_call_id": "c", "content": "r", "is_error": 1}]
    )
    message = interpret_render(value, persistent=False).messages[0]
    assert message.content == (
        {"type": "tool_result", "tool_use_id": "c", "content": "r", "is_error": False},
    )


def test_empty_assistant_text_is_not_a_block_but_whitespace_is() -> None:
    empty = interpret_render(_msg(role="assistant", content="", tool_calls=[]), persistent=False)
    assert empty.messages[0].content == ()
    spaced = interpret_render(_msg(role="assistant", content=" ", tool_calls=[]), persistent=False)
    assert spaced.messages[0].content == ({"type": "text", "text": " "},)


def test_plain_empty_text_message_is_accepted_here() -> None:
    assert interpret_render(_msg(role="user", content=""), persistent=False).messages == (
        Message("user", ""),
    )


def test_fallback_joins_entries_and_names_region_rb8() -> None:
    entries = [Entry("a", 10), Entry("b", 10)]
    assert fallback_blocks("brain", entries, "grows") == (
        SystemBlock("[brain]:\na\n\nb", "Never", "grows", "brain"),
    )
    assert fallback_blocks("brain", [], "stable") == ()
