"""The pool suites' teardown check: no child process may outlive a test (loky's check).

Each pool test folder's conftest re-exports ``no_stray_children``; a conftest at
``tests/`` itself would put ``tests/`` on ``sys.path``, where ``tests/proto``
would shadow the real ``proto`` package.

The region, provider and CLI suites keep one pool per module (their workers outlive a
single test by design) and the sandbox tests manage their own children, so those
files are left to their own fixtures.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pool_support import wait_no_children

_OTHERS = ("regions", "providers", "cli")


@pytest.fixture(autouse=True)
def no_stray_children(request: pytest.FixtureRequest) -> Iterator[None]:
    path = Path(str(request.node.fspath))
    mine = not path.name.startswith("test_sandbox") and not set(_OTHERS) & set(path.parts)
    yield
    if mine:
        left = wait_no_children()
        assert not left, f"processes left behind: {[(p.pid, p.cmdline()) for p in left]}"
