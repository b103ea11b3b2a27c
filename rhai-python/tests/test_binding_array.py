"""``rhai.Array``: a list converted once and passed to many calls without converting it again."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest
import rhai
from hypothesis import given, settings
from hypothesis import strategies as st

ENGINE = rhai.Engine(max_operations=10**7, max_array_size=10**6, max_map_size=10**6)
ECHO = ENGINE.compile("fn f(x) { x }")
ENTRIES = [
    {"content": "first", "tokens": 3, "key": None, "kind": "text"},
    {"content": "héllo\u202f", "tokens": 2**63 - 1, "tags": [True, 1, 1.5, b"\x00\xff"]},
    "a bare string",
    None,
]


def echo(value: object) -> Any:
    return ECHO.call("f", value)


def test_a_script_sees_the_same_values_as_from_the_python_list() -> None:
    held = rhai.Array(ENTRIES)
    assert len(held) == len(ENTRIES)
    assert echo(held) == echo(ENTRIES) == ENTRIES
    assert echo({"entries": held, "n": 1}) == {"entries": ENTRIES, "n": 1}
    assert echo([held, (held,)]) == [ENTRIES, [ENTRIES]]
    assert held.to_list() == list(held) == ENTRIES


def test_types_survive_as_in_an_ordinary_argument() -> None:
    script = ENGINE.compile("fn kinds(xs) { xs.map(|x| type_of(x)) }")
    values = [True, 1, 2**63, 1.5, "s", b"b", None, [1], {"a": 1}]
    assert script.call("kinds", rhai.Array(values)) == script.call("kinds", values)


def test_each_call_gets_its_own_copy() -> None:
    held = rhai.Array([{"n": 1}, {"n": 2}])
    script = ENGINE.compile("fn f(ctx) { ctx.entries[0].n = 99; ctx.entries.push(3); ctx.entries.len() }")
    assert script.call("f", {"entries": held}) == 3
    assert script.call("f", {"entries": held}) == 3
    assert held.to_list() == [{"n": 1}, {"n": 2}]
    listed = held.to_list()
    listed[0]["n"] = 5  # nor does Python's copy reach the held items
    assert held.to_list() == [{"n": 1}, {"n": 2}]


def test_the_items_are_converted_when_added_not_when_passed() -> None:
    source = [{"n": 1}]
    held = rhai.Array(source)
    source[0]["n"] = 2
    source.append({"n": 3})
    assert echo(held) == [{"n": 1}]


def test_extend_appends_and_remove_drops_by_index() -> None:
    held = rhai.Array()
    model: list[Any] = []
    held.extend(range(6))
    model.extend(range(6))
    held.remove([0, 1])  # the oldest: the eviction shape
    del model[:2]
    assert echo(held) == model == [2, 3, 4, 5]
    held.extend(iter(["x", "y"]))
    held.remove([3, 1, 1])  # any order, repeats allowed
    model = [2, 4, "x", "y"]
    assert echo(held) == model
    held.remove([])
    assert echo(held) == model
    held.remove(list(range(len(model))))
    assert echo(held) == [] and len(held) == 0


@pytest.mark.parametrize("bad", [[4], [-1], [0, 4], [2**63]])
def test_an_index_out_of_range_removes_nothing(bad: list[int]) -> None:
    held = rhai.Array(range(4))
    with pytest.raises((IndexError, OverflowError)):
        held.remove(bad)
    assert echo(held) == [0, 1, 2, 3]


def test_an_item_with_no_rhai_form_is_named_and_nothing_is_added() -> None:
    with pytest.raises(TypeError, match=r'^items\[1\]\["x"\]: cannot pass a object'):
        rhai.Array([1, {"x": object()}])
    held = rhai.Array([1])
    with pytest.raises(TypeError, match=r"^items\[2\]: cannot pass a object"):
        held.extend([2, 3, object()])
    with pytest.raises(OverflowError, match=r"^items\[0\]"):
        held.extend([10**400])
    with pytest.raises(TypeError):
        held.extend(5)  # type: ignore[arg-type]
    assert echo(held) == [1]


def test_size_checks_apply_to_the_copy_as_to_any_argument() -> None:
    checked = rhai.Engine(max_array_size=3).compile("fn f(x) { x.len() }")
    with pytest.raises(rhai.DataTooLarge):
        checked.call("f", rhai.Array(range(4)))
    unchecked = rhai.Engine(max_array_size=3, check_argument_sizes=False).compile("fn f(x) { 0 }")
    assert unchecked.call("f", rhai.Array(range(4))) == 0


def test_a_host_function_receives_plain_python_values() -> None:
    engine = rhai.Engine()
    seen: list[Any] = []
    engine.register_fn("inspect", lambda v: seen.append(v) or len(v))
    script = engine.compile("fn f(xs) { inspect(xs) }")
    assert script.call("f", rhai.Array([{"a": 1}])) == 1
    assert seen == [[{"a": 1}]]


def test_repr_names_the_size_only() -> None:
    assert repr(rhai.Array(["secret"])) == "Array(<1 items>)"


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None)
@given(
    first=st.lists(JSONISH, max_size=8),
    added=st.lists(JSONISH, max_size=4),
    drop_bits=st.lists(st.booleans(), max_size=8),
)
def test_deltas_match_the_same_edits_on_a_list(
    first: list[Any], added: list[Any], drop_bits: list[bool]
) -> None:
    held = rhai.Array(first)
    drop = [i for i, bit in enumerate(drop_bits[: len(first)]) if bit]
    held.extend(added)
    held.remove(drop)
    model = [item for i, item in enumerate(first) if i not in drop] + added
    assert echo(held) == echo(model)


def test_deep_items_are_kept_copied_and_freed_on_a_small_stack() -> None:
    """Rhai clones and frees nested values recursively: an Array used on a 256 KiB stack must not overflow."""
    code = textwrap.dedent(
        """
        import threading, rhai
        deep = 7
        for _ in range(20_000):
            deep = [deep]
        engine = rhai.Engine(max_operations=10**7, max_array_size=10**6, max_map_size=10**6)
        script = engine.compile("fn f(ctx) { ctx.entries.len() }")
        out = []
        def use():
            held = rhai.Array([deep, {"m": deep}])
            held.extend([deep])
            out.append(script.call("f", {"entries": held}, timeout=60))
            out.append(len(held.to_list()))
            held.remove([0])
            del held
        threading.stack_size(256 * 1024)
        t = threading.Thread(target=use)
        t.start()
        t.join()
        print(out)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.strip() == "[3, 3]"
