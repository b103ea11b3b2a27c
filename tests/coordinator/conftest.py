"""Pool test fixtures: no child process may outlive a pool test (loky's teardown check).

Applies only to the pool's own test files, not to the sandbox, region or provider
suites that share these folders.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from pool_support import wait_no_children

_OTHERS = ("regions", "providers")


@pytest.fixture(autouse=True)
def no_stray_children(request: pytest.FixtureRequest) -> Iterator[None]:
    path = Path(str(request.node.fspath))
    mine = not path.name.startswith("test_sandbox") and not set(_OTHERS) & set(path.parts)
    yield
    if mine:
        left = wait_no_children()
        assert not left, f"processes left behind: {[(p.pid, p.cmdline()) for p in left]}"
