"""Which argument counts a Python callable accepts, for ``Engine.register_fn``."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

MAX_ARITY = 8


def arities(fn: Callable[..., Any]) -> list[int]:
    """Every positional argument count ``fn`` accepts, up to ``MAX_ARITY``."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return list(range(MAX_ARITY + 1))
    low = high = 0
    for p in sig.parameters.values():
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            high += 1
            if p.default is p.empty:
                low += 1
        elif p.kind is p.VAR_POSITIONAL:
            high = MAX_ARITY
        elif p.kind is p.KEYWORD_ONLY and p.default is p.empty:
            raise TypeError(f"{fn!r} has required keyword-only parameters; scripts pass positional ones")
    if low > MAX_ARITY:
        raise TypeError(f"{fn!r} needs more than {MAX_ARITY} arguments")
    return list(range(low, min(high, MAX_ARITY) + 1))
