"""Fixtures: ``pooled``, one real sandboxed pool per test module (``tests/support/region_pool.py``), and
logging restored after each in-process command (``-v``/``-q`` set the root logger's level, as a command
line should; the next test must not inherit it)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from region_pool import Pooled, pooled

from coordinator._cli import output

__all__ = ["Pooled", "pooled", "restore_logging"]


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    level, handlers, verbosity = root.level, list(root.handlers), output.verbosity()
    yield
    root.setLevel(level)
    root.handlers[:] = handlers
    output._level["value"] = verbosity
