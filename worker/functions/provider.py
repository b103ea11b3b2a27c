"""Pure helper functions for provider engines (stub until its engineer lands the real set)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["FUNCTIONS"]

FUNCTIONS: dict[str, Callable[..., Any]] = {}
