"""Fixtures: ``pooled``, one real sandboxed pool per test module (``tests/support/region_pool.py``)."""

from __future__ import annotations

from region_pool import Pooled, pooled

__all__ = ["Pooled", "pooled"]
