"""Deep values: built up to the budgets, freed, converted and written as JSON without a native stack overflow.

The attacks run in a subprocess on a thread with the worker's 8 MiB stack: a stack overflow there is a
signal death (SIGSEGV), which the parent sees as a negative return code.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import rhai
from rhai_helpers import run

REGION = {"max_operations": 100_000, "max_array_size": 10_000, "max_map_size": 10_000}
PROVIDER = {"max_operations": 500_000, "max_array_size": 50_000, "max_map_size": 50_000}
COMMON = {"max_call_levels": 64, "max_expr_depth": 128, "max_function_expr_depth": 128}

# Each builds one kind of deep structure until a limit stops it (or `n` levels), keeping it alive in scope.
ATTACKS = {
    "closure_chain": "let f = || 0; for i in 0..n { let g = f; f = || g.call() + 1; } 0",
    "closure_chain_unrolled": (
        "let f = || 0; for i in 0..n {"
        " let a = f; let b = || a; let c = || b; let d = || c; let e = || d; f = || e; } 0"
    ),
    "closure_chain_returned": "let f = || 0; for i in 0..n { let g = f; f = || g; } f",
    "curry_chain": "let f = |a, b| a; for i in 0..n { f = (|x, y| x).curry(f); } 0",
    "fnptr_chain": 'let f = Fn("id"); for i in 0..n { f = Fn("id").curry(Fn("id").curry(f)); } 0',
    "nested_arrays": "let a = []; for i in 0..n { a = [[[[[[[[[[a]]]]]]]]]]; } 0",
    "nested_maps": "let m = #{}; for i in 0..n { m = #{a: #{a: #{a: #{a: #{a: m}}}}}; } 0",
    "mixed": 'let v = 0; for i in 0..n { v = [#{f: Fn("id").curry(v)}]; } 0',
    "closure_in_array_in_map": "let v = 0; for i in 0..n { let w = v; v = #{a: [|| w]}; } 0",
}

LIMITS = {"TooManyOperations", "DataTooLarge", "DeadlineExceeded"}

RUNNER = textwrap.dedent(
    """
    import json, sys, threading
    import rhai
    limits, body, n = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    script = rhai.Engine(**limits).compile("fn id(x) { x }\\nfn main(n) { " + body + " }")
    outcome = []
    def go():
        try:
            value = script.call("main", n, timeout=15)
            outcome.append("value " + type(value).__name__)
            del value
        except rhai.RhaiError as exc:
            outcome.append(type(exc).__name__)
    threading.stack_size(8 * 1024 * 1024)
    thread = threading.Thread(target=go)
    thread.start()
    thread.join()
    print(outcome[0])
    """
)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", sorted(ATTACKS))
@pytest.mark.parametrize("budget", ["region", "provider"])
def test_deep_structures_up_to_the_limits_are_freed_without_a_signal(kind: str, budget: str) -> None:
    limits = {**COMMON, **(REGION if budget == "region" else PROVIDER)}
    # Until a limit stops it; the returned chain as long as the budget lets it be built (9 ops a level).
    n = limits["max_operations"] // 10 if kind == "closure_chain_returned" else 10**9
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(limits), ATTACKS[kind], str(n)],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    # The budget, not the stack, ended the attack: a limit error (operations, data size, or the deadline
    # where rhai's own copies make building quadratic), or a value for the returned chain.
    expected = {"value FnPtr"} if kind == "closure_chain_returned" else LIMITS
    assert proc.stdout.strip() in expected, proc.stdout


def _nested(depth: int, kind: str) -> object:
    value: object = 7
    for i in range(depth):
        value = [value] if kind == "array" else {"k": value, "i": i}
    return value


def _depth(value: object) -> int:
    depth = 0
    while value != 7:
        value = value[0] if isinstance(value, list) else value["k"]  # type: ignore[index]
        depth += 1
    return depth


@pytest.mark.parametrize("kind", ["array", "map"])
@pytest.mark.parametrize("depth", [63, 64, 65, 1_000, 10_000])
def test_values_of_any_depth_convert_both_ways(kind: str, depth: int) -> None:
    engine = rhai.Engine(max_operations=10**7, max_array_size=10**6, max_map_size=10**6)
    back = run(engine, "a0", _nested(depth, kind))
    assert _depth(back) == depth


@pytest.mark.parametrize("depth", [64, 1_000, 10_000])
def test_scripts_return_values_of_any_depth(depth: int) -> None:
    # take() moves the value into its new parent: a plain read deep-clones it every turn (quadratic in
    # depth), and the engine charges that CPU to the operation budget
    engine = rhai.Engine(max_operations=10**7, max_array_size=10**6, max_map_size=10**6)
    arrays = run(engine, f"let a = 7; for i in 0..{depth} {{ a = [take(a)]; }} a", timeout=60)
    assert _depth(arrays) == depth
    maps = run(engine, f"let m = 7; for i in 0..{depth} {{ m = #{{k: take(m), i: i}}; }} m", timeout=60)
    assert _depth(maps) == depth


def test_a_deep_value_passes_through_a_host_function() -> None:
    engine = rhai.Engine(max_operations=10**7, max_array_size=10**6, max_map_size=10**6)
    seen: list[int] = []
    engine.register_fn("inspect", lambda v: seen.append(_depth(v)) or v)
    back = run(engine, "let a = 7; for i in 0..10000 { a = [a]; } inspect(a)", timeout=60)
    assert seen == [10_000]
    assert _depth(back) == 10_000


def test_conversion_errors_still_name_the_path_at_depth() -> None:
    engine = rhai.Engine()
    value: object = {"ok": [1, 2, {"bad": object()}]}
    for _ in range(100):
        value = [value]
    with pytest.raises(TypeError) as info:
        run(engine, "a0", value)
    assert str(info.value).startswith("args[0]" + "[0]" * 100 + '["ok"][2]["bad"]: cannot pass a object')


def test_to_json_writes_any_depth() -> None:
    depth = 10_000
    assert rhai.to_json(_nested(depth, "array")) == "[" * depth + "7" + "]" * depth
    text = rhai.to_json(_nested(3, "map"))
    assert text == '{"i":2,"k":{"i":1,"k":{"i":0,"k":7}}}'
    engine = rhai.Engine(max_operations=10**7, max_array_size=10**6)
    in_script = run(engine, "let a = 7; for i in 0..10000 { a = [a]; } to_json(a)", timeout=60)
    assert in_script == "[" * depth + "7" + "]" * depth


def test_a_returned_closure_chain_is_freed_on_a_small_stack() -> None:
    """Python may drop a function pointer on any thread; a 256 KiB one must not overflow."""
    code = textwrap.dedent(
        """
        import threading, rhai
        engine = rhai.Engine(max_operations=500_000)
        script = engine.compile("fn main() { let f = || 0; for i in 0..40000 { let g = f; f = || g; } f }")
        holder = [script.call("main", timeout=60)]
        def free():
            holder.clear()
        threading.stack_size(256 * 1024)
        t = threading.Thread(target=free)
        t.start()
        t.join()
        print("freed", len(holder))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.strip() == "freed 0"
