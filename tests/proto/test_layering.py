"""Import rules between the packages, checked with ``ast`` (trio's enforced layering).

proto imports only the standard library and msgpack; worker never imports
coordinator; coordinator reaches worker only by spawning ``python -m worker``.
zmq errors are caught only in coordinator/transport.py and worker/loop.py.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


def test_proto_imports_only_stdlib_and_msgpack() -> None:
    for path in (ROOT / "proto").glob("*.py"):
        foreign = imports(path) - set(sys.stdlib_module_names) - {"msgpack", "proto"}
        assert not foreign, f"{path.name} imports {foreign}"


def test_worker_never_imports_coordinator() -> None:
    for path in (ROOT / "worker").rglob("*.py"):
        assert "coordinator" not in imports(path), path


def test_coordinator_never_imports_worker() -> None:
    for path in (ROOT / "coordinator").rglob("*.py"):
        assert "worker" not in imports(path), path


def test_zmq_errors_are_caught_in_two_places_only() -> None:
    allowed = {ROOT / "coordinator" / "transport.py", ROOT / "worker" / "loop.py"}
    for package in ("proto", "worker", "coordinator"):
        for path in (ROOT / package).rglob("*.py"):
            if path not in allowed:
                assert "except zmq." not in path.read_text(), path
