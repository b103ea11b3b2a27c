"""Helpers shared by the binding's tests (a unique module name: test dirs share sys.path)."""

from __future__ import annotations

import rhai


def run(engine: rhai.Engine, body: str, *args: object, timeout: float | None = 5.0) -> object:
    """Compile ``fn main(...) { body }`` and call it."""
    params = ", ".join(f"a{i}" for i in range(len(args)))
    script = engine.compile(f"fn main({params}) {{ {body} }}", name="t.rhai")
    return script.call("main", *args, timeout=timeout)
