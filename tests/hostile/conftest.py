"""One arena (pool, egress, provider runtime, quiet tenant) per test module of the hostile corpus."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from .arena import Arena


@pytest.fixture(scope="module")
def arena() -> Iterator[Arena]:
    started = Arena()
    try:
        yield started
    finally:
        started.close()
    assert not started.loop_errors, f"exceptions reached the event loop: {started.loop_errors}"
