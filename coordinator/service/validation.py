"""Does a script compile as its kind? Answered in a sandboxed worker (the parser is untrusted surface).

Verdicts are cached by ``(kind, sha256)``: listing a tenant's scripts asks about each one, and a script
that has not changed has not changed its verdict.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any, Final

from coordinator.providers.executor import KIND as PROVIDER_KIND
from coordinator.providers.loader import check_functions
from coordinator.regions.loading import check_hook_arities, describe_failure
from proto.errors import RhaipoolError

__all__ = ["KINDS", "KIND_LIST", "Validator"]

KINDS: Final = ("provider", "region_hook")
KIND_LIST: Final = "provider or region_hook"
_CACHE_SIZE: Final = 4096


class Validator:
    """Compile-and-check through the pool, as the runtime would at load time; nothing is run."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self._verdicts: OrderedDict[tuple[str, str, str], tuple[bool, str | None]] = OrderedDict()

    async def check(self, kind: str, label: str, content: str, tenant: str) -> tuple[bool, str | None]:
        """``(valid, error)`` with the messages ``rhaipool validate`` prints."""
        key = (kind, label, hashlib.sha256(content.encode()).hexdigest())
        cached = self._verdicts.get(key)
        if cached is not None:
            self._verdicts.move_to_end(key)
            return cached
        verdict = await (self._provider if kind == "provider" else self._region)(label, content, tenant)
        self._verdicts[key] = verdict
        if len(self._verdicts) > _CACHE_SIZE:
            self._verdicts.popitem(last=False)
        return verdict

    async def _provider(self, label: str, content: str, tenant: str) -> tuple[bool, str | None]:
        try:
            handle = await self._pool.load(content, name=label, kind=PROVIDER_KIND, tenant=tenant)
        except RhaipoolError as exc:
            return False, f"compile provider script {label}: {getattr(exc, 'message', str(exc))}"
        functions = [(n, a) for n, a in handle.functions if not n.startswith("anon$")]
        problem = check_functions(label, functions)
        return problem is None, problem

    async def _region(self, label: str, content: str, tenant: str) -> tuple[bool, str | None]:
        try:
            handle = await self._pool.load(content, name=label, kind="region", tenant=tenant)
        except RhaipoolError as exc:
            inner = describe_failure(exc).split(": ", 1)[-1]
            return False, f"Script compilation failed: {label}: {inner}"
        functions = [(str(n), int(a)) for n, a in getattr(handle, "functions", ())]
        problem = check_hook_arities(functions)
        if problem is not None:
            return False, f"Script validation failed: {label}: {problem}"
        return True, None
