"""One exception tree: every exception rhaipool defines descends from ``RhaipoolError``, and the README
draws exactly the tree the code has.

The walk imports every module of ``proto``, ``worker`` and ``coordinator`` (entry points that run on
import excepted) and collects every exception class defined there. The drawing is rendered from the
classes themselves, so a new, moved or re-parented exception fails this test until the README shows it.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path
from types import ModuleType

from proto.errors import RhaipoolError

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("proto", "worker", "coordinator")
README_BLOCK = re.compile(r"<!-- error-tree -->\n```\n(.*?)```\n", re.DOTALL)


def all_modules() -> list[ModuleType]:
    """Every module of the three packages; ``__main__`` modules run a program on import and are skipped."""
    found = []
    for name in PACKAGES:
        package = importlib.import_module(name)
        found.append(package)
        for info in pkgutil.walk_packages(package.__path__, f"{name}."):
            if info.name.rsplit(".", 1)[-1] != "__main__":
                found.append(importlib.import_module(info.name))
    return found


def defined_exceptions() -> list[type[BaseException]]:
    """Each exception class once, in the module that defines it, in definition order."""
    classes: dict[type[BaseException], None] = {}
    for module in all_modules():
        for obj in vars(module).values():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == module.__name__:
                classes[obj] = None
    return list(classes)


def _parent(cls: type[BaseException]) -> type[BaseException]:
    """The nearest rhaipool base (``InvalidShape(RhaipoolError, ValueError)`` hangs under the root)."""
    return next(base for base in cls.__mro__[1:] if issubclass(base, RhaipoolError))


def render_tree(classes: list[type[BaseException]]) -> str:
    """The drawing: children by package (proto, worker, coordinator), module, then definition order;
    private classes are left out (they must still descend from the root)."""
    public = [c for c in classes if not c.__name__.startswith("_") and c is not RhaipoolError]
    order = {
        c: (PACKAGES.index(c.__module__.split(".")[0]), c.__module__, inspect.getsourcelines(c)[1])
        for c in public
    }
    children: dict[type[BaseException], list[type[BaseException]]] = {}
    for cls in sorted(public, key=order.__getitem__):
        children.setdefault(_parent(cls), []).append(cls)
    lines = [f"{'RhaipoolError':<39} {RhaipoolError.__module__}"]

    def draw(node: type[BaseException], prefix: str) -> None:
        kids = children.get(node, [])
        for i, kid in enumerate(kids):
            last = i == len(kids) - 1
            label = prefix + ("└── " if last else "├── ") + kid.__name__
            lines.append(f"{label:<39} {kid.__module__}".rstrip())
            draw(kid, prefix + ("    " if last else "│   "))

    draw(RhaipoolError, "")
    return "\n".join(lines) + "\n"


def test_every_exception_descends_from_the_root() -> None:
    strays = [
        f"{c.__module__}.{c.__qualname__}" for c in defined_exceptions() if not issubclass(c, RhaipoolError)
    ]
    assert strays == []


def test_the_walk_sees_every_package() -> None:
    modules = {c.__module__.split(".")[0] for c in defined_exceptions()}
    assert modules == set(PACKAGES)
    names = {c.__name__ for c in defined_exceptions()}
    assert {
        "ProtocolError",
        "ScriptFailure",
        "CallFailed",
        "RegionFull",
        "UnclassifiedProviderError",
    } <= names


def errors_module_of(module: str) -> str:
    """Where a module's exceptions belong: its (sub-)package's ``errors`` module."""
    parts = module.split(".")
    if parts[0] != "coordinator" or len(parts) == 2:
        return f"{parts[0]}.errors"
    package = importlib.import_module(".".join(parts[:2]))
    return f"{'.'.join(parts[:2])}.errors" if hasattr(package, "__path__") else "coordinator.errors"


def test_each_package_keeps_its_exceptions_in_its_errors_module() -> None:
    """The modules that raise them import (and may re-export) them; private helpers are exempt."""
    misplaced = [
        f"{c.__module__}.{c.__qualname__} (belongs in {errors_module_of(c.__module__)})"
        for c in defined_exceptions()
        if not c.__name__.startswith("_") and c.__module__ != errors_module_of(c.__module__)
    ]
    assert misplaced == []


def test_names_are_unique_across_packages() -> None:
    """One name, one meaning: no two exception classes share a name."""
    names = [c.__name__ for c in defined_exceptions()]
    assert sorted(n for n in set(names) if names.count(n) > 1) == []


def test_the_readme_draws_the_tree() -> None:
    match = README_BLOCK.search((ROOT / "README.md").read_text())
    assert match, "README.md has no <!-- error-tree --> block"
    expected = render_tree(defined_exceptions())
    assert match.group(1) == expected, f"update the README's error tree to:\n{expected}"
