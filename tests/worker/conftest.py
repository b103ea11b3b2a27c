"""Pool test fixtures (shared from ``tests/support/stray_children.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from stray_children import no_stray_children

__all__ = ["no_stray_children"]
