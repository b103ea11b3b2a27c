"""The provider runtime's only contact with the pool: load, call, stream, and error translation.

Pool errors become provider errors here and nowhere else (docs/scripts/errors.md#provider-error-classes,
docs/scripts/errors.md#limits for our own limits), so the rest of ``coordinator.providers`` speaks one error
vocabulary.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any, Final

from coordinator import errors as pool_errors
from coordinator.providers.failures import (
    InvalidResponse,
    ProviderError,
    RequestFailed,
    UnclassifiedProviderError,
    classify_thrown,
)
from coordinator.tenancy import DEFAULT_TENANT
from proto.vocabulary import ErrorClass

if TYPE_CHECKING:
    from coordinator._core.calls import HostHandler
    from coordinator._core.handles import ScriptHandle
    from coordinator._core.pool import Pool

__all__ = ["DEFAULT_TENANT", "KIND", "PoolExecutor", "StreamEnd", "translate"]

KIND: Final = "provider"


class StreamEnd:
    """Marks the end of a stream in :meth:`PoolExecutor.stream` output; ``value`` is the return value."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


#: Pool failures the pool blames on the call's own script: a crash of its worker, a budget it ran
#: out of (memory kills included), its deadline. Retrying one only repeats the damage.
_SCRIPT_BLAMED = (pool_errors.WorkerCrashed, pool_errors.LimitExceeded)


def translate(exc: BaseException) -> ProviderError:
    """Map a pool failure onto the provider error classes; ``script_blamed`` marks the script's own."""
    error = _translate(exc)
    if isinstance(exc, _SCRIPT_BLAMED):
        error.script_blamed = True
    return error


def _translate(exc: BaseException) -> ProviderError:
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, pool_errors.ScriptError):
        if exc.rhai_class == "ScriptThrow":
            return classify_thrown(exc.value)
        if exc.rhai_class == ErrorClass.INVALID_VALUE:
            error = InvalidResponse(f"provider returned an unconvertible value: {exc.message}")
            error.unconvertible = True
            return error
        return UnclassifiedProviderError(exc.message)
    if isinstance(exc, pool_errors.LimitExceeded):
        return UnclassifiedProviderError(f"{exc.limit} limit exceeded: {exc.message}")
    if isinstance(exc, pool_errors.WorkerCrashed):
        return UnclassifiedProviderError(f"the script's worker died ({exc.exit_reason or exc.message})")
    if isinstance(exc, pool_errors.WorkerLost):
        return UnclassifiedProviderError(
            f"worker lost and the call could not be re-run safely: {exc.message}"
        )
    if isinstance(exc, (pool_errors.Overloaded, pool_errors.NoWorkerAvailable)):
        return RequestFailed(f"script pool unavailable: {exc}")
    if isinstance(exc, pool_errors.RhaipoolError):
        return UnclassifiedProviderError(str(exc))
    return UnclassifiedProviderError(f"provider script task failed: {type(exc).__name__}: {exc}")


class PoolExecutor:
    """Runs provider scripts on a :class:`~coordinator._core.pool.Pool`."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def load(self, source: str, name: str, *, tenant: str = DEFAULT_TENANT) -> ScriptHandle:
        """Compile in a worker as ``tenant``; raises the pool's LoadError/CompileError."""
        return await self.pool.load(source, name=name, kind=KIND, tenant=tenant)

    async def call(
        self,
        handle: ScriptHandle,
        fn: str,
        args: list[Any],
        *,
        host: HostHandler,
        timeout: float,
        tenant: str = DEFAULT_TENANT,
    ) -> Any:
        """One call as ``tenant``; failures come out as ProviderError."""
        try:
            return await self.pool.call(handle, fn, *args, host=host, timeout=timeout, tenant=tenant)
        except Exception as exc:
            raise translate(exc) from exc

    async def stream(
        self,
        handle: ScriptHandle,
        fn: str,
        args: list[Any],
        *,
        host: HostHandler,
        timeout: float,
        tenant: str = DEFAULT_TENANT,
    ) -> AsyncGenerator[Any, None]:
        """Chunks as the script emits them, then one :class:`StreamEnd`; failures as ProviderError."""
        try:
            stream = self.pool.stream(handle, fn, *args, host=host, timeout=timeout, tenant=tenant)
        except Exception as exc:
            raise translate(exc) from exc
        try:
            try:
                async for chunk in stream:
                    yield chunk
            except Exception as exc:
                raise translate(exc) from exc
            yield StreamEnd(stream.value)
        finally:  # a consumer that stopped early: cancel the call in its worker
            await stream.aclose()
