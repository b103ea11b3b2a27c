"""One exception tree: every exception the library defines descends from ``RhaipoolError`` through one
of at most eight family roots, and the README draws exactly the tree the code has (the only drawing).

The walk imports every module of ``proto``, ``worker`` and ``coordinator`` (entry points that run on
import excepted) and collects every exception class defined there. The drawing is rendered from the
classes themselves, so a new, moved or re-parented exception fails this test until the README shows it.
The command line's own errors (``coordinator._cli``) are outside the library's tree, under
``CommandLineError``.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path
from types import ModuleType

import httpx

from coordinator._cli.errors import CommandLineError
from proto.errors import RhaipoolError

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("proto", "worker", "coordinator")
CLI = "coordinator._cli"
#: Each family's root (the issue's seven, plus the worker's own); no other class hangs under the root.
FAMILY_ROOTS = {
    "protocol": "ProtocolError",
    "worker": "WorkerError",
    "call": "CallFailed",
    "pool": "PoolFamilyError",
    "egress": "EgressError",
    "provider": "ProviderFamilyError",
    "region": "RegionError",
    "service": "ServiceFamilyError",
}
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


def all_exceptions() -> list[type[BaseException]]:
    """Each exception class once, in the module that defines it, in definition order."""
    classes: dict[type[BaseException], None] = {}
    for module in all_modules():
        for obj in vars(module).values():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == module.__name__:
                classes[obj] = None
    return list(classes)


def is_cli(cls: type[BaseException]) -> bool:
    return cls.__module__ == CLI or cls.__module__.startswith(CLI + ".")


def defined_exceptions() -> list[type[BaseException]]:
    """The library's exceptions: every one the walk finds outside the command line."""
    return [c for c in all_exceptions() if not is_cli(c)]


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


def test_the_command_lines_errors_are_outside_the_librarys_tree() -> None:
    cli = [c for c in all_exceptions() if is_cli(c)]
    assert {c.__name__ for c in cli} >= {"CommandLineError", "ScenarioError", "TenantStateError"}
    inside = [c.__qualname__ for c in cli if issubclass(c, RhaipoolError)]
    assert inside == []
    strays = [c.__qualname__ for c in cli if not issubclass(c, CommandLineError)]
    assert strays == []


def test_at_most_eight_families_each_with_its_root() -> None:
    """Private helpers (``_Refused``, ``_NotServed``) are left out, as in the drawing."""
    public = [c for c in defined_exceptions() if not c.__name__.startswith("_") and c is not RhaipoolError]
    children = [c for c in public if _parent(c) is RhaipoolError]
    assert sorted(c.__name__ for c in children) == sorted(FAMILY_ROOTS.values())
    assert len(children) <= 8


def test_no_class_is_named_after_an_httpx_class() -> None:
    """A reader who knows httpx must not guess wrong. Two names are shared on purpose: they mean what
    httpx's mean (a peer broke the protocol; a request followed too many redirects)."""
    theirs = {n for n, v in vars(httpx).items() if inspect.isclass(v)}
    ours = {c.__name__ for c in all_exceptions()}
    assert sorted(ours & theirs) == ["ProtocolError", "TooManyRedirects"]


def test_the_readme_holds_the_only_drawing() -> None:
    """A module docstring that draws part of the tree goes stale; it names its classes instead."""
    names = {c.__name__ for c in all_exceptions()}
    drawn = re.compile(r"[├└]── *(\w+)")
    drawings = [
        module.__name__
        for module in all_modules()
        if any(m in names for m in drawn.findall(module.__doc__ or ""))
    ]
    assert drawings == []


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
        for c in all_exceptions()
        if not c.__name__.startswith("_") and c.__module__ != errors_module_of(c.__module__)
    ]
    assert misplaced == []


def test_names_are_unique_across_packages() -> None:
    """One name, one meaning: no two exception classes share a name."""
    names = [c.__name__ for c in all_exceptions()]
    assert sorted(n for n in set(names) if names.count(n) > 1) == []


def test_the_readme_draws_the_tree() -> None:
    match = README_BLOCK.search((ROOT / "README.md").read_text())
    assert match, "README.md has no <!-- error-tree --> block"
    expected = render_tree(defined_exceptions())
    assert match.group(1) == expected, f"update the README's error tree to:\n{expected}"
