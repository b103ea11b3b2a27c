"""The engine budgets of each script kind (docs/scripts/errors.md#limits), shared by both sides of the wire
(not sent on it).

The worker builds its engines from these; the coordinator's benchmarks build the
in-process baseline from the same table, so the two can never drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from proto.vocabulary import Kind

__all__ = ["BUDGETS"]

_UNCAPPED: Final = 2**63 - 1
"""The reference sets no variable or function-count limit (Rhai's default is unlimited); the binding
refuses 0, so "none" is spelled as the largest count. The op budget still bounds the scope's length."""

_COMMON: Final = {
    "max_call_levels": 64,
    "max_expr_depth": 128,
    "max_function_expr_depth": 128,
    "max_variables": _UNCAPPED,
    "max_functions": _UNCAPPED,
}

BUDGETS: Final[Mapping[Kind, Mapping[str, int]]] = {
    Kind.REGION: {
        "max_operations": 100_000,
        "max_string_size": 1_000_000,
        "max_array_size": 10_000,
        "max_map_size": 10_000,
        **_COMMON,
    },
    Kind.PROVIDER: {
        "max_operations": 500_000,
        "max_string_size": 2_000_000,
        "max_array_size": 50_000,
        "max_map_size": 50_000,
        **_COMMON,
    },
}
"""Per-kind limits; the only engine configurations rhaipool uses."""
