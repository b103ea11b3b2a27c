"""Per-kind helper function sets registered on each kind's engine.

``region`` and ``provider`` each export ``FUNCTIONS`` (pure helpers, no I/O);
``SIGNATURES`` gives typed parameter lists for helpers that must shadow Rhai's
standard library the way the reference's typed registration does (``trim(s)``
returns the trimmed string instead of trimming in place), and make a call with
other argument types Rhai's catchable "function not found" (docs/scripts/errors.md#errors-a-script-can-catch).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from proto.vocabulary import Kind
from worker.functions import provider, region

__all__ = ["HELPERS", "Helper"]

Helper = tuple[Callable[..., Any], tuple[str, ...] | None]
"""A helper and its typed signature (``None``: registered at every arity it accepts)."""

HELPERS: Final[Mapping[Kind, Mapping[str, Helper]]] = {
    Kind.REGION: {name: (fn, region.SIGNATURES.get(name)) for name, fn in region.FUNCTIONS.items()},
    Kind.PROVIDER: {name: (fn, provider.SIGNATURES.get(name)) for name, fn in provider.FUNCTIONS.items()},
}
