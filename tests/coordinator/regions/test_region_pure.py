"""Pure parts of the region runtime: tokens, ctx shapes, on_write answers, drop indices."""

from __future__ import annotations

from typing import Any

import pytest
import rhai

from coordinator.regions.eviction import oldest_group_size, remove_indices, validate_indices
from coordinator.regions.hooks import (
    RegionState,
    RenderMeta,
    entry_ctx,
    on_overflow_ctx,
    on_write_ctx,
    render_ctx,
)
from coordinator.regions.loading import RegionLoadError, check_hook_arities, resolve_script_path
from coordinator.regions.model import Entry, Message, SystemBlock, ToolCall, plain_json, to_rhai_json
from coordinator.regions.tokens import compact_json, estimate_tokens, render_cost
from coordinator.regions.writes import WriteDecision, interpret_on_write


@pytest.mark.parametrize(
    ("text", "tokens"), [("", 0), ("abc", 1), ("abcd", 1), ("abcde", 2), ("語", 1), ("語語", 2)]
)
def test_estimate_is_ceil_bytes_over_four(text: str, tokens: int) -> None:
    assert estimate_tokens(text) == tokens


def test_render_cost_counts_every_part() -> None:
    blocks = [SystemBlock("abcde", "Never", "stable", "")]
    messages = [
        Message("user", "abcd"),
        Message("assistant", ({"type": "tool_use", "id": "c", "name": "n", "input": {"b": 1, "a": "é"}},)),
        Message(
            "user", ({"type": "tool_result", "tool_use_id": "c", "content": "x" * 9, "is_error": False},)
        ),
    ]
    # 2 + 1 + ceil(len('{"a":"é","b":1}'.encode()) / 4) + 3
    assert render_cost(blocks, messages) == 2 + 1 + 4 + 3


def test_entry_ctx_shapes_rb22() -> None:
    entries = [
        Entry("t", 10, "text", key="k", timestamp=7),
        Entry("u", 10, "user_message"),
        Entry("a", 10, "assistant_turn", tool_calls=(ToolCall("c1", "shell", {"command": "ls"}),)),
        Entry("r", 10, "tool_result", tool_call_id="c1", tool_name="shell", is_error=True),
    ]
    shapes = [e.to_ctx() for e in entries]
    assert [s["kind"] for s in shapes] == ["text", "user_message", "assistant_turn", "tool_result"]
    assert [s["key"] for s in shapes] == ["k", None, None, None]
    assert shapes[0] == {"content": "t", "tokens": 10, "key": "k", "kind": "text", "timestamp": 7}
    assert shapes[2]["tool_calls"] == [{"id": "c1", "name": "shell", "arguments": {"command": "ls"}}]
    assert (
        shapes[3]["tool_call_id"] == "c1"
        and shapes[3]["is_error"] is True
        and shapes[3]["tool_name"] == "shell"
    )
    assert "tool_calls" not in shapes[3] and "tool_call_id" not in shapes[2]
    signed = ToolCall("c", "n", None, "sig").to_json()
    assert signed == {"id": "c", "name": "n", "arguments": None, "thought_signature": "sig"}


def test_ctx_objects() -> None:
    state = RegionState("brain", 1000, 20, 2)
    entries = [Entry("a", 10), Entry("b", 10)]
    ctx = render_ctx(state, [entry_ctx(e) for e in entries], RenderMeta("plan", 2, "m1", 50, 2000))
    assert ctx["entries"][1] == {"content": "b", "tokens": 10, "key": None, "kind": "text", "timestamp": 0}
    assert ctx["region"] == {"name": "brain", "budget": 1000, "current_tokens": 20, "entry_count": 2}
    assert (ctx["stage_name"], ctx["stage_iterations"], ctx["model"]) == ("plan", 2, "m1")
    assert ctx["window"] == {"total_tokens": 50, "max_tokens": 2000}
    assert on_write_ctx(state, Entry("x", 5, "tool_result", key="k")) == {
        "region": state.to_json(),
        "entry": {"content": "x", "kind": "tool_result", "tokens": 5},
    }
    assert on_overflow_ctx(state, [entry_ctx(e) for e in entries], 7)["needed_tokens"] == 7


def test_big_host_integers_become_floats_for_rhai() -> None:
    assert to_rhai_json({"a": [2**63, -(2**63), 5, True]}) == {"a": [float(2**63), -(2**63), 5, True]}


def test_plain_json_refuses_what_has_no_json_form() -> None:
    assert plain_json({"b": float("nan"), "a": [1, "x"]}) == {"a": [1, "x"], "b": None}
    for bad in (b"\x00", object(), {"k": b""}):
        with pytest.raises(TypeError):
            plain_json(bad)


def _nested(depth: int) -> Any:
    value: Any = 1
    for i in range(depth):
        value = {"k": [value], "i": i}
    return value


def _depth(value: Any) -> int:
    depth = 0
    while value != 1:
        value, depth = value["k"][0], depth + 1
    return depth


def test_values_of_any_depth_convert_both_ways() -> None:
    """The reference has no nesting limit (issue 12): 10 000 levels of ctx and of hook results convert."""
    assert _depth(plain_json(_nested(10_000))) == 10_000
    assert _depth(to_rhai_json(_nested(10_000))) == 10_000


def test_the_budget_estimate_writes_floats_as_serde_json() -> None:
    """``1e-7``, not Python's ``1e-07``: one token fewer, so no budget warning the reference does not give."""
    block = {"type": "tool_use", "id": "t", "name": "n", "input": {"x": 1e-7}}
    assert compact_json(block["input"]) == '{"x":1e-7}'
    assert render_cost([], [Message("assistant", (block,))]) == 3  # ceil(len('{"x":1e-7}') / 4)
    for value in (1e-7, 1e21, 5e-324, 1.7976931348623157e308, -0.0, 3.0, {"b": [0.1], "a": "\u00e9\n"}):
        assert compact_json(value) == rhai.to_json(value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("HI", WriteDecision("replace", "HI", 1)),
        ("", WriteDecision("replace", "", 0)),
        (True, WriteDecision("accept")),
        (None, WriteDecision("accept")),
        (False, WriteDecision("drop")),
    ],
)
def test_on_write_answers(value: Any, expected: WriteDecision) -> None:
    assert interpret_on_write(value) == expected


@pytest.mark.parametrize("value", [42, 1.5, {"a": 1}, [1], 0])
def test_other_on_write_answers_accept_with_a_warning(value: Any) -> None:
    decision = interpret_on_write(value)
    assert decision.action == "accept" and decision.warning is not None and decision.content is None


@pytest.mark.parametrize(
    ("value", "count", "expected"),
    [([2, 0, 2], 3, [0, 2]), ([], 3, []), ([0], 1, [0])],
)
def test_valid_indices_are_sorted_and_deduplicated(value: list[int], count: int, expected: list[int]) -> None:
    assert validate_indices(value, count) == (expected, None)


@pytest.mark.parametrize(
    "value", ["not an array", ["x"], [99], [1.0], [-1], [None], [True], [0, 3], None, {"0": 1}]
)
def test_invalid_index_answers_void_the_whole_answer(value: Any) -> None:
    indices, reason = validate_indices(value, 3)
    assert indices is None and reason


def test_removal_frees_the_removed_tokens() -> None:
    entries = [Entry("a", 10), Entry("b", 12), Entry("c", 14)]
    removal = remove_indices(entries, [0, 2])
    assert (
        [e.content for e in removal.remaining] == ["b"] and removal.freed == 24 and removal.indices == (0, 2)
    )


def test_turn_groups() -> None:
    turn = Entry("t", 1, "assistant_turn", tool_calls=(ToolCall("c", "n"),))
    result = Entry("r", 1, "tool_result", tool_call_id="c")
    assert oldest_group_size([]) == 0
    assert oldest_group_size([result, result]) == 1
    assert oldest_group_size([turn, result, result, Entry("x", 1), result]) == 3
    assert oldest_group_size([turn, Entry("x", 1)]) == 1


def test_hook_arity_checks() -> None:
    assert check_hook_arities([("render", 1)]) is None
    assert check_hook_arities([("on_write", 1)]) == "script must define fn render(ctx)"
    assert check_hook_arities([("render", 2)]) == "fn render must take exactly one parameter (ctx), found 2"
    found = check_hook_arities([("render", 1), ("on_write", 0)])
    assert found == "fn on_write must take exactly one parameter (ctx), found 0"
    assert "on_overflow" in (check_hook_arities([("render", 1), ("on_overflow", 2)]) or "")
    assert check_hook_arities([("render", 1), ("render", 2)]) is None


def test_script_paths_stay_inside_the_blueprint(tmp_path: Any) -> None:
    (tmp_path / "agent" / "hooks").mkdir(parents=True)
    (tmp_path / "outside.rhai").write_text('fn render(ctx) { "" }')
    agent = tmp_path / "agent"
    assert resolve_script_path("brain", "hooks/brain.rhai", agent) == agent.resolve() / "hooks" / "brain.rhai"
    for escaping in ("../outside.rhai", "hooks/../../outside.rhai", str(tmp_path / "outside.rhai")):
        with pytest.raises(RegionLoadError, match="resolves outside the blueprint's directory"):
            resolve_script_path("brain", escaping, agent)
    (agent / "link.rhai").symlink_to(tmp_path / "outside.rhai")
    with pytest.raises(RegionLoadError, match="region 'brain'"):
        resolve_script_path("brain", "link.rhai", agent)
    for blank in ("", "   "):
        with pytest.raises(RegionLoadError, match=r'requires script = "<path>\.rhai"'):
            resolve_script_path("brain", blank, agent)
