"""Per-kind helper function sets registered on each kind's engine.

``worker/functions/region.py`` and ``worker/functions/provider.py`` are written by
the region and provider engineers; each exports ``FUNCTIONS: dict[str, Callable]``
of pure helpers (no I/O).  They are imported defensively: a missing or broken
module yields an empty set and a reason, never a worker that cannot start.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["functions_for", "signatures_for"]


def functions_for(kind: str) -> tuple[dict[str, Callable[..., Any]], str | None]:
    """The helper set for ``kind`` and, if it could not be loaded, why."""
    try:
        module = importlib.import_module(f"worker.functions.{kind}")
    except Exception as exc:  # an engineer's module failing to import must not kill the worker
        return {}, f"worker.functions.{kind} not loaded: {type(exc).__name__}: {exc}"
    functions = getattr(module, "FUNCTIONS", None)
    if not isinstance(functions, dict):
        return {}, f"worker.functions.{kind}.FUNCTIONS is not a dict"
    return {name: fn for name, fn in functions.items() if isinstance(name, str) and callable(fn)}, None


def signatures_for(kind: str) -> dict[str, tuple[str, ...]]:
    """Typed parameter lists (``SIGNATURES``) for helpers that must shadow built-ins.

    The reference registers its helpers as typed Rust functions, which take
    precedence over Rhai's standard library (``trim(s)`` returns the trimmed
    string instead of trimming in place) and refuse other argument types.
    """
    try:
        module = importlib.import_module(f"worker.functions.{kind}")
    except Exception:  # reported once by functions_for
        return {}
    signatures = getattr(module, "SIGNATURES", None)
    return dict(signatures) if isinstance(signatures, dict) else {}
