"""Speed of the binding, each figure next to a baseline measured in the same run.

    rhaipool bench binding [--json] [--quick]

* call overhead: p50 of ``fn f(x) { x }`` with an int (baseline: a Python call);
* region ctx round trip: a 100-entry render ctx (docs/scripts/regions.md#renderctx shape, ~200-character
  contents) sent into a script and returned, against
  ``msgpack.unpackb(msgpack.packb(ctx))`` of the same data (target: <= 1.5x);
* operations per second of a counting loop;
* compile time of the example scripts in ``examples/`` (and a built-in region).

Not part of the test suite: tests check behaviour, this checks speed.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import msgpack
import rhai

from coordinator._cli.demo import EXAMPLES

BRAIN = """
fn render(ctx) {
    let xml = "<context>";
    for entry in ctx.entries { xml += `<event kind="${entry.kind}">${entry.content}</event>`; }
    xml += "</context>";
    #{ messages: [ #{ role: "user", content: xml } ] }
}
"""


def region_ctx(entries: int) -> dict[str, Any]:
    """A render ctx in the shape of docs/scripts/regions.md#renderctx with ~200-character contents."""
    content = ("The user prefers concise answers and works in UTC+1; remember the project codename. " * 3)[
        :200
    ]
    return {
        "region": {"name": "brain", "budget": 8000, "current_tokens": entries * 50, "entry_count": entries},
        "entries": [
            {
                "content": f"{i}: {content}",
                "tokens": 50,
                "timestamp": 1_760_000_000 + i,
                "key": None,
                "kind": "text",
            }
            for i in range(entries)
        ],
        "stage_name": "main",
        "stage_iterations": 3,
        "model": "groq/llama-3.3-70b-versatile",
        "window": {"total_tokens": 12000, "max_tokens": 128000},
    }


def timings(fn: Callable[[], object], *, seconds: float, min_runs: int = 50) -> list[float]:
    """Wall time of each call of ``fn``, repeated for about ``seconds``."""
    for _ in range(min(20, min_runs)):
        fn()
    out: list[float] = []
    end = time.perf_counter() + seconds
    while len(out) < min_runs or time.perf_counter() < end:
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


def run(seconds: float) -> dict[str, Any]:
    engine = rhai.Engine(
        max_operations=10**12, max_string_size=10**8, max_array_size=10**7, max_map_size=10**7
    )
    echo = engine.compile("fn f(x) { x }", name="echo.rhai")
    results: dict[str, Any] = {}

    def py_echo(x: object) -> object:
        return x

    call = timings(lambda: echo.call("f", 1), seconds=seconds)
    base = timings(lambda: py_echo(1), seconds=seconds / 4)
    results["call_overhead"] = {
        "p50_us": p(call, 50) * 1e6,
        "p99_us": p(call, 99) * 1e6,
        "baseline_python_call_p50_us": p(base, 50) * 1e6,
    }

    ctx = region_ctx(100)
    assert echo.call("f", ctx) == ctx
    rt = timings(lambda: echo.call("f", ctx), seconds=seconds)
    mp = timings(lambda: msgpack.unpackb(msgpack.packb(ctx)), seconds=seconds)
    results["ctx_round_trip_100"] = {
        "rhai_p50_us": p(rt, 50) * 1e6,
        "msgpack_p50_us": p(mp, 50) * 1e6,
        "ratio": p(rt, 50) / p(mp, 50),
        "target_ratio": 1.5,
    }

    loop = engine.compile("fn f(n) { let x = 0; while x < n { x += 1; } x }")
    n = 2_000_000
    t0 = time.perf_counter()
    ops = loop.call_detailed("f", n).operations
    dt = time.perf_counter() - t0
    results["counting_loop"] = {
        "iterations": n,
        "operations": ops,
        "ops_per_second": ops / dt,
        "iterations_per_second": n / dt,
    }

    sources = {"builtin/brain.rhai": BRAIN}
    for path in sorted(EXAMPLES.rglob("*.rhai")):
        sources[f"examples/{path.relative_to(EXAMPLES)}"] = path.read_text()
    compile_times: dict[str, dict[str, float | str]] = {}
    for name, src in sources.items():
        try:
            t = timings(functools.partial(engine.compile, src, name=name), seconds=seconds / 8, min_runs=20)
            compile_times[name] = {"p50_us": p(t, 50) * 1e6, "bytes": len(src)}
        except rhai.CompileError as exc:
            compile_times[name] = {"error": str(exc)}
    results["compile"] = compile_times
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--quick", action="store_true", help="shorter runs")
    args = parser.parse_args(argv)
    results = run(0.5 if args.quick else 2.0)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    c, r, lp = results["call_overhead"], results["ctx_round_trip_100"], results["counting_loop"]
    print(
        f"call overhead fn f(x) {{ x }}   p50 {c['p50_us']:8.2f} us  p99 {c['p99_us']:8.2f} us"
        f"  (python call p50 {c['baseline_python_call_p50_us']:.3f} us)"
    )
    print(
        f"100-entry ctx round trip       p50 {r['rhai_p50_us']:8.1f} us"
        f"  msgpack p50 {r['msgpack_p50_us']:8.1f} us"
        f"  ratio {r['ratio']:.2f}x (target <= {r['target_ratio']}x)"
    )
    print(
        f"counting loop                  {lp['ops_per_second'] / 1e6:8.1f} M ops/s"
        f"  ({lp['iterations_per_second'] / 1e6:.1f} M iterations/s)"
    )
    for name, t in results["compile"].items():
        shown = f"p50 {t['p50_us']:8.1f} us  ({t['bytes']} bytes)" if "p50_us" in t else t["error"]
        print(f"compile {name:<30} {shown}")


if __name__ == "__main__":
    main()
