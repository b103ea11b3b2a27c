"""Fixtures: ``pooled``, one real sandboxed pool per test module (``tests/support/region_pool.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from region_pool import Pooled, pooled

__all__ = ["Pooled", "pooled"]
