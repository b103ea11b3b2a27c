"""The host-call handler of one provider call: ``http_get``, ``http_post``, ``stream_request``, ``env_var``.

The worker blocks on a HOST_CALL; the pool hands it to :meth:`ProviderHost.call` (or ``stream``), which
goes through the shared :class:`~coordinator.egress.Egress` under the provider's policy. Failures are
thrown into the script as the maps of docs/scripts/errors.md#provider-error-classes via ``HostCallError``.
Every request goes through the call's :class:`~coordinator.providers.journal.Journal`, which lives as long as
the call, across its attempts: a re-run after a worker death is served the requests its dead attempt already
sent, so ``sent`` (read by the re-run rule) is true only for a request that cannot be replayed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from coordinator.egress import Egress, EgressPolicy, EnvResolver, HostError
from coordinator.errors import HostCallError
from coordinator.providers.clock import Clock, MonotonicClock
from coordinator.providers.journal import Journal, Spawn
from coordinator.providers.ratelimit import Backoff429
from coordinator.tenancy import DEFAULT_TENANT
from proto.host import BROKERED_FUNCTIONS
from proto.vocabulary import Kind, rhai_type_name

__all__ = ["ProviderHost", "header_value"]

log = logging.getLogger(__name__)


def header_value(value: Any) -> str:
    """Headers are stringified the way Rhai prints values: ``5`` → ``"5"``, ``()`` → ``""``."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _not_found(name: str, args: list[Any]) -> HostCallError:
    types = ", ".join(rhai_type_name(a) for a in args)
    return HostCallError(f"Function not found: {name} ({types})")


def _settled(value: Any, error: Exception | None = None) -> asyncio.Future[Any]:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    if error is None:
        future.set_result(value)
    else:
        future.set_exception(error)
    return future


def _headers(value: Any) -> dict[str, str]:
    return {str(k): header_value(v) for k, v in value.items()} if value else {}


_VERDICTS: dict[tuple[str, tuple[type, ...]], bool] = {}
"""Argument-type verdicts by (function, Python types): a Rhai type name is a function of the Python
type alone, and wire values come in a handful of types, so this stays small (bounded anyway)."""


def _registered(name: str, args: list[Any]) -> bool:
    """Whether ``args`` match a signature ``name`` is registered with, as in the reference (proto's
    table); worked out once per (function, argument types) rather than on every request."""
    key = (name, tuple(map(type, args)))
    verdict = _VERDICTS.get(key)
    if verdict is None:
        wanted = BROKERED_FUNCTIONS[Kind.PROVIDER][name].wire_signatures
        verdict = tuple(map(rhai_type_name, args)) in wanted
        if len(_VERDICTS) >= 256:
            _VERDICTS.clear()
        _VERDICTS[key] = verdict
    return verdict


@dataclass
class ProviderHost:
    """Serves one provider call's host functions; ``offline`` for ``initialize`` (no HTTP at all)."""

    egress: Egress | None
    policy: EgressPolicy
    env: EnvResolver
    timeout: float = 900.0
    offline: bool = False
    backoff: Backoff429 | None = None
    clock: Clock = field(default_factory=MonotonicClock)
    tenant: str = DEFAULT_TENANT
    journal: Journal = field(init=False)

    def __post_init__(self) -> None:
        # a request body and an answer of the largest size allowed: what an inference needs to be replayable
        self.journal = Journal(limit=2 * self.policy.max_response_bytes)

    @property
    def sent(self) -> bool:
        """A request of this call left the machine and a re-run could not be served it from the journal
        (``HostHandler.sent``): no re-run then."""
        return self.journal.sent

    def begin_attempt(self, spawn: Spawn) -> None:
        """The pool starts an attempt of the call (its first, or a re-run after a worker death); the
        journal's requests run through ``spawn`` (the pool's TaskGroup)."""
        self.journal.begin_attempt(spawn)

    def close(self) -> None:
        """The call has ended: requests still running for it stop, and its journal is dropped.

        The provider runtime calls it; code passing a ``ProviderHost`` to ``pool.call`` itself should
        too, or a request the worker's death left running runs on to its own timeout.
        """
        self.journal.close()

    def _log_fields(self, err: HostError) -> dict[str, Any]:
        return {"provider": self.policy.provider, "tenant": self.tenant, "failure_kind": err.failure_kind}

    def _check(self, name: str, args: list[Any]) -> None:
        """Argument types as the reference registers them; anything else is "function not found"."""
        if self.offline or self.egress is None:
            raise _not_found(name, args)
        if not _registered(name, args):
            raise _not_found(name, args)

    async def _on_error(self, err: HostError) -> HostCallError:
        """Log it with its failure_kind; on 429 with a rate limit configured,
        sleep before the script sees it."""
        log.info(
            "provider %s (tenant %s): host request failed: %s",
            self.policy.provider,
            self.tenant,
            err,
            extra=self._log_fields(err),
        )
        if self.backoff is not None and err.value.get("kind") == "rate_limited":
            await self.clock.sleep(self.backoff.on_429(err.value.get("retry_after")))
        return HostCallError(err.value)

    async def call(self, name: str, args: list[Any]) -> Any:
        """One unary host function; a request is served from the journal when a re-run repeats it."""
        return await self.start_call(name, args)

    def start_call(self, name: str, args: list[Any]) -> asyncio.Future[Any]:
        """:meth:`call`'s outcome as a future; cancelling it abandons the answer, never the request
        (the journal's task runs it)."""
        try:
            if name == "env_var":
                return _settled(self.env.get(args[0] if args else None))
            if name not in ("http_get", "http_post"):
                raise _not_found(name, args)
            self._check(name, args)
            return self.journal.unary_outcome(
                name, args, lambda mark_sent: self._fetch(name, args, mark_sent)
            )
        except Exception as exc:  # noqa: BLE001 - the caller awaits it like the coroutine's own failure
            return _settled(None, exc)

    async def _fetch(self, name: str, args: list[Any], mark_sent: Callable[[], None]) -> Any:
        """The request itself (run in a task of its own: a worker's death does not cancel it)."""
        assert self.egress is not None
        if name == "http_get":
            method, url, body, headers = "GET", args[0], None, args[1] if len(args) > 1 else {}
        else:
            method, url, body, headers = "POST", args[0], args[1], args[2] if len(args) > 2 else {}
        try:
            text = await self.egress.fetch(
                self.policy,
                method,
                url,
                body=body,
                headers=_headers(headers),
                timeout=self.timeout,
                on_send=mark_sent,
                tenant=self.tenant,
            )
        except HostError as err:
            raise await self._on_error(err) from err
        if self.backoff is not None:
            self.backoff.on_success()
        return text

    async def stream(self, name: str, args: list[Any]) -> AsyncIterator[Any]:
        """``stream_request``: SSE payload strings; HTTP errors are raised before any payload.

        A re-run repeating the request is replayed the events already read, then follows the live stream.
        """
        if name != "stream_request":
            raise _not_found(name, args)
        self._check(name, args)
        events = self.journal.stream(
            name, args, lambda mark_sent: self._events(args, mark_sent), idle=self.timeout
        )
        async with contextlib.aclosing(events):  # type: ignore[type-var]
            async for payload in events:
                yield payload

    async def _events(self, args: list[Any], mark_sent: Callable[[], None]) -> AsyncIterator[Any]:
        """The egress stream, its failures as the maps the script sees."""
        assert self.egress is not None
        url, body, headers = args
        events = self.egress.stream(
            self.policy,
            url,
            body=body,
            headers=_headers(headers),
            timeout=self.timeout,
            on_send=mark_sent,
            tenant=self.tenant,
        )
        try:
            async with contextlib.aclosing(events):  # hands its budgeted bytes back as soon as we stop
                async for payload in events:
                    yield payload
        except HostError as err:
            log.info(
                "provider %s (tenant %s): stream request failed: %s",
                self.policy.provider,
                self.tenant,
                err,
                extra=self._log_fields(err),
            )
            raise HostCallError(err.value) from err
