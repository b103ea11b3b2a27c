"""The deploy suite's runbook tests start a real ``rhaipool serve`` (``tests/support/service_support.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
