"""Shared fixtures: engines configured like the worker's (docs/scripts/errors.md#limits budgets)."""

from __future__ import annotations

import pytest
import rhai


@pytest.fixture
def engine() -> rhai.Engine:
    """A provider-sized engine with the JSON functions."""
    return rhai.Engine(
        max_operations=500_000,
        max_call_levels=64,
        max_expr_depth=128,
        max_function_expr_depth=128,
        max_string_size=2_000_000,
        max_array_size=50_000,
        max_map_size=50_000,
        max_variables=10_000,
        max_functions=1_000,
    )
