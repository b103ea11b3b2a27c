"""Import rules between the packages, checked with ``ast`` (trio's enforced layering).

Every import counts, including those inside functions and under ``TYPE_CHECKING``:
a lazy import is still a dependency.

    proto ◀── contract                    (what both sides share beyond the wire: the script contract's terms)
    contract ◀── worker                   (the worker hosts the engine; it never sees the coordinator)
    contract ◀── coordinator._core        (the pool: generic, knows no application)
              ▲        ▲        ▲
         regions   providers ──▶ egress   (applications of the pool; never each other; egress
                                          takes only the core's timer heap, coordinator._core.timers)
              ▲        ▲
    coordinator.service                   (rhaipool serve: an application; the library never imports it)
    coordinator._cli, coordinator.bench   (the command line and benchmarks; nothing imports them)
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COORDINATOR = ROOT / "coordinator"


def imported_modules(path: Path) -> Iterator[str]:
    """Every absolute module name ``path`` imports, at any depth of the file."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert not node.level, f"{path}: relative import (use the absolute name)"
            assert node.module is not None
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def sources(package: Path) -> list[Path]:
    found = sorted(package.rglob("*.py"))
    assert found, package
    return found


def violations(package: Path, forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sources(package)
        for name in imported_modules(path)
        if any(name == f or name.startswith(f + ".") for f in forbidden)
    ]


#: The one exception: ``contract.tokens`` is the tiktoken counter worker and coordinator share (one
#: token estimator for both sides), and imports our binding ``rhai`` (tiktoken-rs) lazily, inside the
#: function that needs it.
LAZY_IN_CONTRACT = {"tokens.py": {"rhai"}}


def test_proto_imports_only_stdlib_and_msgpack() -> None:
    for path in sources(ROOT / "proto"):
        foreign = {n.split(".")[0] for n in imported_modules(path)} - set(sys.stdlib_module_names)
        assert foreign <= {"msgpack", "proto"}, f"{path.name} imports {foreign - {'msgpack', 'proto'}}"


def test_contract_imports_only_stdlib_and_proto() -> None:
    """``contract`` sits on the wire and under both sides: it imports nothing else of ours."""
    for path in sources(ROOT / "contract"):
        foreign = {n.split(".")[0] for n in imported_modules(path)} - set(sys.stdlib_module_names)
        allowed = {"contract", "proto"} | LAZY_IN_CONTRACT.get(path.name, set())
        assert foreign <= allowed, f"{path.name} imports {foreign - allowed}"


def test_contract_third_party_exceptions_are_lazy() -> None:
    """``import contract`` must still need nothing but the standard library and ``proto``."""
    for name, lazy in LAZY_IN_CONTRACT.items():
        tree = ast.parse((ROOT / "contract" / name).read_text())
        top = {
            n.split(".")[0]
            for node in tree.body
            if isinstance(node, ast.Import | ast.ImportFrom)
            for n in ([a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""])
        }
        assert not top & lazy, f"{name} imports {top & lazy} at module level"


def test_worker_never_imports_coordinator() -> None:
    assert violations(ROOT / "worker", ("coordinator",)) == []


def test_coordinator_never_imports_worker() -> None:
    assert violations(COORDINATOR, ("worker",)) == []


def test_core_imports_no_application() -> None:
    apps = ("coordinator.regions", "coordinator.providers", "coordinator.egress", "coordinator._cli",
            "coordinator.bench")  # fmt: skip
    assert violations(COORDINATOR / "_core", apps) == []


@pytest.mark.parametrize(("package", "other"), [("regions", "providers"), ("providers", "regions")])
def test_regions_and_providers_never_import_each_other(package: str, other: str) -> None:
    assert violations(COORDINATOR / package, (f"coordinator.{other}",)) == []


@pytest.mark.parametrize("package", ["_core", "regions", "providers", "egress"])
def test_library_never_imports_the_command_line(package: str) -> None:
    assert violations(COORDINATOR / package, ("coordinator._cli", "coordinator.bench")) == []


@pytest.mark.parametrize("package", ["_core", "regions", "providers", "egress"])
def test_library_never_imports_the_service(package: str) -> None:
    """``rhaipool serve`` is an application of the library, like the command line."""
    assert violations(COORDINATOR / package, ("coordinator.service", "coordinator.client")) == []


def test_the_service_never_imports_the_command_line() -> None:
    assert violations(COORDINATOR / "service", ("coordinator._cli", "coordinator.bench")) == []


#: The one module of the pool's core egress may import: the timer heap, which imports only the stdlib.
SHARED_CORE = "coordinator._core.timers"


def test_egress_knows_no_provider_or_region() -> None:
    apps = ("coordinator.regions", "coordinator.providers", "coordinator._core")
    found = violations(COORDINATOR / "egress", apps)
    assert [v for v in found if not v.split(" imports ")[1].startswith(SHARED_CORE)] == []


def test_the_core_module_egress_shares_imports_only_the_stdlib() -> None:
    """So importing it loads nothing of the pool: ``coordinator/_core/__init__.py`` imports nothing either."""
    for path in (COORDINATOR / "_core" / "timers.py", COORDINATOR / "_core" / "__init__.py"):
        foreign = {n.split(".")[0] for n in imported_modules(path)} - set(sys.stdlib_module_names)
        assert not foreign, f"{path.name} imports {foreign}"


def test_the_checker_sees_imports_inside_functions(tmp_path: Path) -> None:
    module = tmp_path / "lazy.py"
    module.write_text("def f():\n    from coordinator.regions import open_region\n")
    assert list(imported_modules(module)) == ["coordinator.regions", "coordinator.regions.open_region"]


def test_core_never_imports_the_nodes() -> None:
    """Nodes build on the core (``coordinator._core.fleet`` is their seam), never the other way."""
    assert violations(COORDINATOR / "_core", ("coordinator.nodes",)) == []


def test_zmq_errors_are_caught_in_three_places_only() -> None:
    """The pool's ROUTER, the worker's DEALER, and the node link's sockets (``coordinator.nodes.wire``)."""
    allowed = {
        COORDINATOR / "_core" / "transport.py",
        ROOT / "worker" / "loop.py",
        COORDINATOR / "nodes" / "wire.py",
    }
    for package in ("proto", "worker", "coordinator"):
        for path in sources(ROOT / package):
            if path not in allowed:
                assert "except zmq." not in path.read_text(), path


#: What the worker may take from ``proto``: the definition of the wire (signature, command bytes,
#: caps, vocabulary, the brokered-function table, the error root), never its codec.  The worker's
#: one codec is the binding's (``worker/wire.py``, ``rhai.Codec`` and ``rhai.Lane``).
PROTO_DEFINITIONS = frozenset(
    {
        "BROKERED_FUNCTIONS", "MAX_BODY_BYTES", "MAX_CONTAINER_LEN", "MAX_ID", "MAX_PLAIN_DEPTH",
        "MAX_RESIDENT_KEY", "PROTOCOL_VERSION", "SIGNATURE", "Command", "ErrorClass", "Kind", "Limit",
        "Op", "RhaipoolError", "rhai_type_name",
    }
)  # fmt: skip


def proto_codec_uses(path: Path) -> list[str]:
    """What ``path`` takes from ``proto`` beyond its definitions, and any Python msgpack codec it imports."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] in {"proto", "msgpack"}]
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            top = node.module.split(".")[0]
            if top == "msgpack":
                found.append(node.module)
            elif top == "proto":
                found += [f"{node.module}.{a.name}" for a in node.names if a.name not in PROTO_DEFINITIONS]
    return found


def test_the_worker_has_one_codec_and_it_is_native() -> None:
    """No worker module reads or writes a frame with ``proto`` (``decode``, ``encode``, ``pack``,
    ``unpack``, its message classes) or msgpack: every frame is read and written by the binding."""
    assert [
        f"{p.relative_to(ROOT)}: {use}" for p in sources(ROOT / "worker") for use in proto_codec_uses(p)
    ] == []


def test_the_codec_check_sees_what_it_refuses(tmp_path: Path) -> None:
    module = tmp_path / "sneaky.py"
    module.write_text(
        "import msgpack\nfrom proto import SIGNATURE, encode\nfrom proto.calls import Result\n"
        "def f():\n    import proto.values\n    from proto.frames import decode\n"
    )
    assert proto_codec_uses(module) == [
        "msgpack", "proto.encode", "proto.calls.Result", "proto.values", "proto.frames.decode",
    ]  # fmt: skip
