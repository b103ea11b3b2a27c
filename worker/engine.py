"""The hardened Rhai engines, one per script kind, and the one place rhai errors are caught.

The exceptions are ``worker.errors``'s (re-exported here).

Every rhai exception (and every exception a host function lets escape) is
translated here into a ``ScriptFailure`` whose fields are those of the wire's
ERROR message, so nothing above this module needs to know rhai's classes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import rhai

from contract.budgets import BUDGETS
from proto.host import BROKERED_FUNCTIONS
from proto.vocabulary import ErrorClass, Kind, Limit
from worker.errors import CallAborted, DeadlineReached, ScriptFailure, WorkerError
from worker.functions import HELPERS

__all__ = [
    "BUDGETS",
    "CPU_SECONDS",
    "NATIVE",
    "CallAborted",
    "Compiled",
    "DeadlineReached",
    "Engines",
    "Outcome",
    "ScriptFailure",
    "WorkerError",
    "translate",
]


NATIVE: Final = None
"""In a host-function table: a brokered call the binding makes itself (``Engine.register_brokered``)."""
OUTPUT_LIMIT: Final = 65_536
CPU_SECONDS: Final = {Kind.REGION: 8.0, Kind.PROVIDER: 0.25}
"""CPU time of its thread one call may spend, whatever its operation count (one operation may copy or
free a whole value: a value built 150 000 deep cost quadratic time in 450 000 operations).  Provider
calls get less: one may run on the loop thread, which sends no heartbeat while it computes, and its
worker is killed (and the call blamed) if silent for ``liveness × heartbeat`` (2 s by default), so
its compute must stay far within that even on a machine loaded five times over; a region call's
thread is known to be busy (the coordinator does not wait for its heartbeat) and its deadline (5 s
for a hook by default) already bounds its CPU, so its cap only matters under a longer deadline and
leaves room for what the reference runs: a value built 5 000 deep by copying takes ~2.5 s.
Allocating costs CPU too (page faults: ~1-2 ms per MB on a loaded machine), so these also bound how
fast a call can grow its worker's memory; a region call can still reach a worker's memory limit,
and is blamed for it."""


@dataclass(frozen=True, slots=True)
class Compiled:
    """A compiled script and its public functions as ``(name, arity)`` pairs."""

    script: rhai.Script
    functions: list[tuple[str, int]]
    size: int


class Outcome(NamedTuple):
    """A finished call: value plus cost (seconds of wall and thread CPU time, Rhai operations).

    A tuple: one is built per call, in half the time of a frozen dataclass."""

    value: Any
    wall: float
    cpu: float
    ops: int
    output: list[str]


_LIMIT_NAMES: Final = (
    (rhai.TooManyOperations, Limit.OPERATIONS),
    (rhai.DataTooLarge, Limit.DATA_SIZE),
    (rhai.CallDepthExceeded, Limit.CALL_DEPTH),
)


def translate(exc: BaseException) -> ScriptFailure:
    """Map any exception from compile or call to a ``ScriptFailure`` (exhaustive over rhai's tree)."""
    if isinstance(exc, rhai.RhaiError):
        kind, line, column = type(exc).__name__, exc.line, exc.column
        if isinstance(exc, rhai.CompileError):
            return ScriptFailure(ErrorClass.COMPILE_ERROR, exc.message, kind=kind, line=line, column=column)
        if isinstance(exc, rhai.ScriptThrow):
            return ScriptFailure(
                ErrorClass.SCRIPT_ERROR, exc.message, kind=kind, line=line, column=column, value=exc.value
            )
        if isinstance(exc, rhai.DeadlineExceeded):
            return ScriptFailure(
                ErrorClass.SCRIPT_TIMEOUT,
                exc.message,
                kind=kind,
                line=line,
                column=column,
                limit=Limit.DEADLINE,
            )
        if isinstance(exc, rhai.LimitExceeded):
            limit = next((name for cls, name in _LIMIT_NAMES if isinstance(exc, cls)), Limit.OTHER)
            return ScriptFailure(
                ErrorClass.LIMIT_EXCEEDED, exc.message, kind=kind, line=line, column=column, limit=limit
            )
        if isinstance(exc, rhai.Cancelled):
            return ScriptFailure(ErrorClass.CANCELLED, exc.message, kind=kind, line=line, column=column)
        return ScriptFailure(ErrorClass.SCRIPT_ERROR, exc.message, kind=kind, line=line, column=column)
    if isinstance(exc, DeadlineReached):
        return ScriptFailure(
            ErrorClass.SCRIPT_TIMEOUT, str(exc), kind="DeadlineExceeded", limit=Limit.DEADLINE
        )
    if isinstance(exc, CallAborted):
        return ScriptFailure(ErrorClass.CANCELLED, str(exc) or "call cancelled", kind="Cancelled")
    if isinstance(exc, (TypeError, ValueError, OverflowError)):
        return ScriptFailure(
            ErrorClass.INVALID_VALUE, f"{type(exc).__name__}: {exc}", kind=type(exc).__name__
        )
    return ScriptFailure(ErrorClass.INTERNAL, f"{type(exc).__name__}: {exc}", kind=type(exc).__name__)


class Engines:
    """One engine per script kind; helper sets and host functions registered once at start-up."""

    def __init__(
        self,
        host_functions: Mapping[Kind, Mapping[str, Callable[..., Any] | None]],
        waits: Mapping[Kind, Sequence[tuple[str, Callable[..., Any], tuple[str, ...]]]] | None = None,
    ) -> None:
        """``waits``: typed overrides (name, function, parameter types) of standard functions that wait."""
        self._engines: dict[Kind, rhai.Engine] = {}
        for kind, budget in BUDGETS.items():
            # The reference passes hook arguments unchecked; only what scripts build is size-checked.
            engine = rhai.Engine(
                **budget,
                output_limit=OUTPUT_LIMIT,
                json_functions=kind != Kind.REGION,
                check_argument_sizes=False,
                max_cpu_seconds=CPU_SECONDS[kind],
            )
            for name, (fn, types) in HELPERS[kind].items():
                engine.register_fn(name, fn, types=list(types) if types else None)
            for name, host_fn in host_functions.get(kind, {}).items():
                # Typed as in the reference: wrong types fail here, not after a round trip
                # (docs/scripts/host-functions.md).
                signatures = BROKERED_FUNCTIONS[kind][name].signatures
                if host_fn is NATIVE:
                    engine.register_brokered(name, [list(types) for types in signatures])
                    continue
                for types in signatures:
                    engine.register_fn(name, host_fn, types=list(types))
            for name, fn, types in (waits or {}).get(kind, ()):
                engine.register_fn(name, fn, types=list(types))
            self._engines[kind] = engine

    def compile(self, kind: Kind, source: str, name: str) -> Compiled:
        """Compile in this process (the parser is untrusted surface too)."""
        try:
            script = self._engines[kind].compile(source, name=name)
            functions = [(str(n), int(a)) for n, a in script.functions]
        except Exception as exc:
            raise translate(exc) from exc
        return Compiled(script, functions, len(source.encode("utf-8", "surrogatepass")) * 4)

    def run(
        self,
        compiled: Compiled,
        fn: str,
        args: list[Any],
        timeout: float | None,
        cancel: rhai.CancelToken | None,
    ) -> Outcome:
        """Run one function on the calling thread; wall time and this thread's CPU time are measured."""
        wall0, cpu0 = time.perf_counter(), time.thread_time()
        try:
            result = compiled.script.call_detailed(fn, *args, timeout=timeout, cancel=cancel)
        except Exception as exc:
            raise translate(exc) from exc
        output = result.output  # a new list on every read
        if result.output_truncated:
            output.append("[output truncated]")
        return Outcome(
            result.value, time.perf_counter() - wall0, time.thread_time() - cpu0, result.operations, output
        )
