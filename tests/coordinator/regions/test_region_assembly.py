"""docs/scripts/regions.md#renderctx assembly on plain values: preamble order, sorting, orphans, breakpoints,
Begin./Continue."""

from __future__ import annotations

from coordinator.regions.assembly import RegionOutput, assemble, sort_system, strip_orphans
from coordinator.regions.model import Entry, Message, SystemBlock, ToolCall
from coordinator.regions.window import BuiltinRegion, conversation_messages

USE = {"type": "tool_use", "id": "c1", "name": "shell", "input": {}}
RESULT = {"type": "tool_result", "tool_use_id": "c1", "content": "out", "is_error": False}


def _texts(messages: tuple[Message, ...]) -> list[object]:
    return [m.content for m in messages]


def test_preamble_goes_before_the_conversation_wherever_declared_rb15() -> None:
    conversation = RegionOutput(
        messages=(Message("user", "find the conflicts"), Message("user", "keep going"))
    )
    corpus = RegionOutput(messages=(Message("user", "REFERENCE"),), preamble=True)
    expected = ["REFERENCE", "find the conflicts", "keep going"]
    assert _texts(assemble([conversation, corpus]).messages) == expected
    assert _texts(assemble([corpus, conversation]).messages) == expected


def test_system_blocks_sort_by_volatility_then_hint_stably() -> None:
    blocks = [
        SystemBlock("r-never", "Never", "rewritten", "a"),
        SystemBlock("r-until", "UntilChanged", "rewritten", "b"),
        SystemBlock("s-never", "Never", "stable", "c"),
        SystemBlock("g-always", "Always", "grows", "d"),
        SystemBlock("s-always", "Always", "stable", "e"),
        SystemBlock("r-until-2", "UntilChanged", "rewritten", "f"),
        SystemBlock("s-slide", {"SlidingPrefix": {"stable_fraction": 0.5}}, "stable", "g"),
    ]
    order = [b.text for b in sort_system(blocks)]
    assert order == ["s-always", "s-slide", "s-never", "g-always", "r-until", "r-until-2", "r-never"]


def test_orphans_are_stripped_anywhere_rb16() -> None:
    render = RegionOutput(
        messages=(
            Message("user", "hello"),
            Message(
                "user", ({"type": "tool_result", "tool_use_id": "ghost", "content": "x", "is_error": False},)
            ),
        ),
        preamble=True,
    )
    assert _texts(assemble([render]).messages) == ["hello"]


def test_pairs_survive_in_any_order_and_text_blocks_stay() -> None:
    messages = (
        Message("user", (RESULT,)),
        Message("assistant", ({"type": "text", "text": "t"}, USE, {**USE, "id": "lonely"})),
    )
    out = strip_orphans(messages)
    assert out[0].content == (RESULT,)
    assert out[1].content == ({"type": "text", "text": "t"}, USE)


def test_begin_when_nothing_rb17() -> None:
    request = assemble([RegionOutput(preamble=True)])
    assert [m.to_json() for m in request.messages] == [{"role": "user", "content": "Begin."}]


def test_continue_after_assistant_and_begin_when_no_user_rb18() -> None:
    both = assemble([RegionOutput(messages=(Message("user", "q"), Message("assistant", "a")), preamble=True)])
    assert [(m.role, m.content) for m in both.messages] == [
        ("user", "q"),
        ("assistant", "a"),
        ("user", "Continue."),
    ]
    only = assemble([RegionOutput(messages=(Message("assistant", "a"),), preamble=True)])
    assert [(m.role, m.content) for m in only.messages] == [("assistant", "a"), ("user", "Begin.")]


def test_blank_and_empty_messages_are_dropped() -> None:
    out = assemble(
        [
            RegionOutput(
                messages=(Message("user", " \n\t"), Message("assistant", ()), Message("user", "x")),
                preamble=True,
            )
        ]
    )
    assert _texts(out.messages) == ["x"]


def test_message_cache_breakpoint_placement() -> None:
    five = tuple(Message("user", str(i)) for i in range(5))
    request = assemble([RegionOutput(messages=five)])
    assert [m.cache_breakpoint for m in request.messages] == [False, True, False, False, False]
    three = assemble([RegionOutput(messages=five[:3])])
    assert [m.cache_breakpoint for m in three.messages] == [True, False, False]
    assert not any(m.cache_breakpoint for m in assemble([RegionOutput(messages=five[:1])]).messages)
    changed = assemble([RegionOutput(messages=five)], previous_system_hash="something else")
    assert not any(m.cache_breakpoint for m in changed.messages)
    same = assemble([RegionOutput(messages=five)], previous_system_hash=request.system_hash)
    assert same.messages[1].to_json() == {"role": "user", "content": "1", "cache_breakpoint": True}


def test_sliding_window_rendering_merges_tool_results() -> None:
    entries = [
        Entry("do it", 1, "user_message"),
        Entry(
            "", 1, "assistant_turn", tool_calls=(ToolCall("c1", "shell", {"a": 1}), ToolCall("c2", "shell"))
        ),
        Entry("r1", 1, "tool_result", tool_call_id="c1"),
        Entry("r2", 1, "tool_result", tool_call_id="c2", is_error=True),
        Entry("  Assistant: done ", 1),
        Entry("plain", 1),
    ]
    messages = conversation_messages(entries)
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assert len(messages[2].content) == 2 and messages[3].content == "done" and messages[4].content == "plain"
    assert messages[1].content[0] == {"type": "tool_use", "id": "c1", "name": "shell", "input": {"a": 1}}


def test_builtin_blocks() -> None:
    pinned = BuiltinRegion("task", "pinned", [Entry("a", 1), Entry("b", 1)], volatility="stable")
    assert pinned.render().system == (SystemBlock("a\n\nb", "Always", "stable", "task"),)
    scratch = BuiltinRegion("scratch", "temporary", [Entry("x", 1)])
    assert scratch.render().system[0].text == "[scratch]:\nx"
    keyed = BuiltinRegion("files", "hashmap", [Entry("body", 1, key="a.py")])
    assert keyed.render().system[0].text == "[files]:\n### [a.py]\nbody"
    assert BuiltinRegion("empty", "pinned").render() == RegionOutput()
