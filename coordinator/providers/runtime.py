"""The provider runtime: every entry point of a script provider, with retries, limits and the token guard.

caller ──▶ ProviderRuntime.inference(name, request, tenant=...)
             │ loader.get(name, tenant)  (mtime/config reload, offline initialize, per tenant)
             │ guard                     (count_tokens when the request nears the window)
             │ run_with_retries ─┐       (backoff schedule, 900 s job bound)
             │                   ▼
             │   RateLimiter.acquire     (RPM + TPM, global per provider)
             │   pool.call(inference) ──▶ worker ──HOST_CALL──▶ ProviderHost ──▶ Egress
             ▼
           Response (normalised)         tokens recorded for TPM

Every entry point is bounded by the wall-clock cap ``call_timeout_secs`` (``wallclock.py``), and
takes ``tenant=`` (``DEFAULT_TENANT`` for single-user library use): each script call
it makes -- ``initialize`` included -- is that tenant's pool call, so the fair queue, the tenant's
caps and strikes apply, and log lines name it. Rate limits stay global per provider
(docs/scripts/errors.md#rate-limits).

Past 400 lines: each entry point (inference, stream, count_tokens, list_models) with its retries,
limits and wall-clock cap, sharing one attempt path.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from coordinator.egress import Egress
from coordinator.egress.timeouts import timeout_at
from coordinator.providers.clock import Clock, MonotonicClock
from coordinator.providers.config import ProvidersConfig
from coordinator.providers.errors import RerunDiverged
from coordinator.providers.executor import DEFAULT_TENANT, PoolExecutor, StreamEnd
from coordinator.providers.failures import (
    InvalidResponse,
    ProviderError,
    TokenLimitExceeded,
    UnclassifiedProviderError,
)
from coordinator.providers.host import ProviderHost
from coordinator.providers.loader import LoadedProvider, ProviderLoader
from coordinator.providers.models import Capabilities, ModelInfo, capabilities, parse_models
from coordinator.providers.ratelimit import Backoff429, RateLimiter, SharedLimiters
from coordinator.providers.request import build_request, prompt_text
from coordinator.providers.response import Response, StreamChunk, collapse, parse_chunk, parse_response, uint
from coordinator.providers.retry import InferenceRetryPolicy, run_with_retries
from coordinator.providers.source import ScriptSource
from coordinator.providers.tokens import count_by_model, estimate_bytes
from coordinator.providers.wallclock import CallCap

__all__ = ["JOB_TIMEOUT_SECS", "ProviderRuntime"]

#: Bound of a whole inference job (attempts, retry sleeps, rate-limit waits) without a stage timeout.
JOB_TIMEOUT_SECS = 900.0
_MAX_REMEMBERED_CAPABILITIES = 4096


class _Serving:
    """:meth:`ProviderRuntime._serving`'s context (a class: one per attempt, cheaper than a generator)."""

    __slots__ = ("host",)

    def __init__(self, host: ProviderHost) -> None:
        self.host = host

    def __enter__(self) -> ProviderHost:
        return self.host

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        try:
            diverged = self.host.journal.diverged
            if diverged is None:
                return
            if exc is None:
                raise RerunDiverged(diverged)
            if isinstance(exc, ProviderError) and not isinstance(exc, RerunDiverged):
                raise RerunDiverged(diverged) from exc
        finally:
            self.host.close()


class ProviderRuntime:
    """Script providers by name; one per coordinator (rate limits are per provider, global)."""

    def __init__(
        self,
        executor: PoolExecutor,
        egress: Egress | None,
        config: ProvidersConfig,
        *,
        clock: Clock | None = None,
        source: ScriptSource | None = None,
        shared: SharedLimiters | None = None,
    ) -> None:
        self.loader = ProviderLoader(executor, egress, config, source=source)
        self.shared = shared
        """The limiters of tables several runtimes share (the service's tenants): they take those."""
        self.executor = executor
        self.egress = egress
        self.clock = clock or MonotonicClock()
        self._limiters: dict[str, tuple[Any, RateLimiter, Backoff429]] = {}
        self._window_waits: dict[str, tuple[int, float]] = {}
        self._gates: dict[str, tuple[int, asyncio.Semaphore]] = {}
        self._capabilities: dict[
            tuple[str, str, str], tuple[LoadedProvider, ProvidersConfig, Capabilities]
        ] = {}
        self._gated_for: tuple[ProvidersConfig | None, dict[str, int]] = (None, {})
        self.on_retry: Callable[[ProviderError, float], None] | None = None
        """Told of each retry (the error and the delay) before its wait; the CLI prints it."""

    @property
    def config(self) -> ProvidersConfig:
        """The current configuration snapshot."""
        return self.loader.config

    def set_config(self, config: ProvidersConfig) -> None:
        """A config reload: providers whose table changed reload on their next lookup."""
        self.loader.config = config

    async def get(self, name: str, *, tenant: str = DEFAULT_TENANT) -> LoadedProvider:
        """``tenant``'s loaded provider (raises ProviderLoadError / ProviderNotFound)."""
        return await self.loader.get(name, tenant=tenant)

    async def lookup(self, name: str, *, tenant: str = DEFAULT_TENANT) -> LoadedProvider | None:
        """``tenant``'s loaded provider, or None when it is missing or broken (a warning is logged)."""
        return await self.loader.lookup(name, tenant=tenant)

    def _limiter(self, provider: LoadedProvider) -> tuple[RateLimiter, Backoff429] | None:
        limit = provider.table.rate_limit if provider.table else None
        if limit is None:
            self._limiters.pop(provider.name, None)
            return None
        shared = None
        if self.shared is not None and provider.table is not None:
            shared = self.shared.get(provider.name, provider.table)
        entry = self._limiters.get(provider.name)
        if entry is None or entry[0] != limit or (shared is not None and entry[1] is not shared):
            entry = (limit, shared or RateLimiter(limit, self.clock), Backoff429())
            self._limiters[provider.name] = entry
            self._window_waits[provider.name] = (0, 0.0)
        return entry[1], entry[2]

    async def _acquire(self, provider: str, limiter: RateLimiter) -> None:
        """Room in the limiter's windows; the wait counted as this runtime's (a shared limiter's
        waits are told apart by the runtime, so by tenant, that waited)."""
        waited = await limiter.acquire()
        if waited > 0:
            count, seconds = self._window_waits.get(provider, (0, 0.0))
            self._window_waits[provider] = (count + 1, seconds + waited)

    def rate_limit_waits(self) -> list[tuple[str, str, int, float]]:
        """``(provider, cause, waits, seconds)`` of every provider with a rate limit (for metrics).

        ``cause`` is ``window`` (its RPM/TPM windows were full) or ``429`` (the API answered 429).
        """
        rows = []
        for provider, (_limit, _window, backoff) in sorted(self._limiters.items()):
            waits, seconds = self._window_waits.get(provider, (0, 0.0))
            rows.append((provider, "window", waits, seconds))
            rows.append((provider, "429", backoff.waits, backoff.waited_seconds))
        return rows

    def _gated(self) -> dict[str, int]:
        """``[limits.max_concurrent_inferences_by_provider]`` as a dict, made once per snapshot."""
        config = self.config
        if self._gated_for[0] is not config:
            self._gated_for = (config, dict(config.max_concurrent))
        return self._gated_for[1]

    def _gate(self, provider: LoadedProvider) -> contextlib.AbstractAsyncContextManager[Any]:
        """``[limits.max_concurrent_inferences_by_provider]``: at most N calls of this provider at once."""
        limit = self._gated().get(provider.name)
        if limit is None:
            return contextlib.nullcontext()
        entry = self._gates.get(provider.name)
        if entry is None or entry[0] != limit:
            entry = self._gates[provider.name] = (limit, asyncio.Semaphore(limit))
        return entry[1]

    def _host(
        self, provider: LoadedProvider, timeout: float, backoff: Backoff429 | None, tenant: str
    ) -> ProviderHost:
        return ProviderHost(
            self.egress,
            provider.policy,
            provider.env,
            timeout=timeout,
            backoff=backoff,
            clock=self.clock,
            tenant=tenant,
        )

    @staticmethod
    def _serving(host: ProviderHost) -> _Serving:
        """``host`` lives exactly as long as its call; a re-run that diverged fails the call, whatever
        the script made of the failed host call."""
        return _Serving(host)

    async def _call_aside(self, provider: LoadedProvider, fn: str, args: list[Any], tenant: str) -> Any:
        """A non-inference entry point: one call, no retries, the global request timeout (capped)."""
        cap = CallCap.start(self.config.call_timeout_secs, fn)
        timeout = cap.limit(self.config.request_timeout_secs)
        with self._serving(self._host(provider, timeout, None, tenant)) as host:
            return await cap.run(
                self.executor.call(
                    provider.handle, fn, [provider.state, *args], host=host, timeout=timeout, tenant=tenant
                )
            )

    def capabilities(self, provider: LoadedProvider, model: str) -> Capabilities:
        """Metadata with ``[model_capabilities.<model>]`` overrides.

        Remembered per (provider version, configuration snapshot, model): an inference asks twice
        (its defaults, then the token guard), and every inference of a model asks the same.
        """
        slot = (provider.name, provider.tenant, model)
        known = self._capabilities.get(slot)
        if known is not None and known[0] is provider and known[1] is self.config:
            return known[2]
        caps = capabilities(provider.metadata, self.config.capabilities(model))
        if len(self._capabilities) >= _MAX_REMEMBERED_CAPABILITIES:  # model names are the callers'
            self._capabilities.clear()
        self._capabilities[slot] = (provider, self.config, caps)
        return caps

    def request_for(self, provider: LoadedProvider, raw: Any) -> dict[str, Any]:
        """Fill a caller's partial request with the defaults of
        docs/scripts/providers.md#inferencestate-request (InvalidProviderRequest if malformed)."""
        model = raw.get("model") if isinstance(raw, dict) else None
        caps = self.capabilities(provider, model or provider.metadata.default_model or "")
        return build_request(raw, caps, provider.metadata.default_model)

    # -- count_tokens / list_models -------------------------------------------------------------

    async def count_tokens(
        self, provider: LoadedProvider, text: str, model: str, *, tenant: str | None = None
    ) -> int:
        """The script's count when it gives an INT (clamped at 0), else the heuristic by model id.

        ``tenant`` defaults to the tenant the provider was loaded for (so do the other entry points).
        """
        if provider.has("count_tokens"):
            tenant = tenant or provider.tenant
            try:
                value = await self._call_aside(provider, "count_tokens", [text, model], tenant)
            except ProviderError:
                value = None
            if isinstance(value, int) and not isinstance(value, bool):
                return max(0, value)
        return count_by_model(text, model)

    async def list_models(self, provider: LoadedProvider, *, tenant: str | None = None) -> list[ModelInfo]:
        """The script's own listing; no ``list_models`` means none. Errors propagate."""
        if not provider.has("list_models"):
            return []
        try:
            value = await self._call_aside(provider, "list_models", [], tenant or provider.tenant)
        except InvalidResponse as exc:
            if not exc.unconvertible:  # a thrown ``invalid_response`` is the script's error: it propagates
                raise
            return []  # an answer with no JSON form counts as no rows
        return parse_models(value, provider.name)

    async def warm_models(
        self, provider: LoadedProvider, models: list[str], *, tenant: str | None = None
    ) -> None:
        """Optional warm-up ([U]); its result is ignored and so are its errors."""
        if provider.has("warm_models"):
            with contextlib.suppress(ProviderError):
                await self._call_aside(provider, "warm_models", [list(models)], tenant or provider.tenant)

    # -- the guard ------------------------------------------------------------------------------

    async def guard(
        self, provider: LoadedProvider, request: dict[str, Any], *, tenant: str | None = None
    ) -> None:
        """Refuse a request that cannot fit the model's window, counting only when it is close
        (docs/scripts/providers.md#count_tokensstate-text-model)."""
        model, reply = request["model"], uint(request.get("max_tokens"))
        window = self.capabilities(provider, model).max_context_tokens
        text = prompt_text(request)
        if self.config.exact_token_counting:
            used = await self.count_tokens(provider, text, model, tenant=tenant)
            if used + reply > window:
                raise TokenLimitExceeded(f"Token limit exceeded: {used} > {window}")
            return
        if estimate_bytes(text) + reply < math.ceil(window / 2):
            return
        used = await self.count_tokens(provider, text, model, tenant=tenant)
        if used + reply > window:
            raise TokenLimitExceeded(
                f"Token limit exceeded: the prompt's {used} tokens plus the {reply}-token reply budget "
                f"(max_output_tokens) exceed the model's {window}-token context window"
            )

    # -- inference ------------------------------------------------------------------------------

    def _timeouts(self, request: dict[str, Any]) -> tuple[float, float]:
        """(per-request HTTP timeout, whole-job bound) of docs/scripts/host-functions.md#transport,
        docs/scripts/errors.md#retries.

        Each HTTP request gets the stage's ``request_timeout_secs``, else the global one; the job is
        bounded by the stage's value, else 900 s -- never by the global value, which times requests only.
        """
        stage = request.get("request_timeout_secs")
        if isinstance(stage, int) and stage > 0:
            return float(stage), float(stage)
        return self.config.request_timeout_secs, JOB_TIMEOUT_SECS

    async def _attempt(
        self, provider: LoadedProvider, request: dict[str, Any], timeout: float, budget: float, tenant: str
    ) -> Response:
        if provider.name not in self._gated():  # the usual case: no gate to pass
            return await self._attempt_now(provider, request, timeout, budget, tenant)
        async with self._gate(provider):
            return await self._attempt_now(provider, request, timeout, budget, tenant)

    async def _attempt_now(
        self, provider: LoadedProvider, request: dict[str, Any], timeout: float, budget: float, tenant: str
    ) -> Response:
        """One attempt: HTTP requests get ``timeout`` each; the script call may use the job's ``budget``."""
        limits = self._limiter(provider)
        if limits is not None:
            await self._acquire(provider.name, limits[0])
        with self._serving(self._host(provider, timeout, limits[1] if limits else None, tenant)) as host:
            value = await self.executor.call(
                provider.handle, "inference", [provider.state, request], host=host, timeout=budget,
                tenant=tenant,
            )  # fmt: skip
        response = parse_response(value, list(provider.metadata.mime_types))
        if limits is not None:
            limits[0].record_tokens(response.tokens_used.total_tokens)
        return response

    async def inference(self, name: str, raw_request: Any, *, tenant: str = DEFAULT_TENANT) -> Response:
        """One inference with retries; raises ProviderError (or ProviderLoadError /
        InvalidProviderRequest)."""
        provider = await self.get(name, tenant=tenant)
        return await self.inference_for(provider, raw_request, tenant=tenant)

    async def inference_for(
        self, provider: LoadedProvider, raw_request: Any, *, tenant: str = DEFAULT_TENANT
    ) -> Response:
        """:meth:`inference` of a provider the caller has just looked up itself (:meth:`get`), so that
        a request that needs the loaded provider anyway (the service's) looks it up once, not twice."""
        request = self.request_for(provider, raw_request)
        await self.guard(provider, request, tenant=tenant)
        return await self._run_inference(provider, request, tenant)

    async def _run_inference(
        self, provider: LoadedProvider, request: dict[str, Any], tenant: str
    ) -> Response:
        """Attempts under the retry policy, the whole-job bound and the wall-clock cap."""
        timeout, job = self._timeouts(request)
        policy = InferenceRetryPolicy(self.config.retry_attempts, self.config.retry_base_ms)
        loop = asyncio.get_running_loop()
        cap = CallCap.start(self.config.call_timeout_secs, "inference")
        timeout = cap.limit(timeout)
        deadline = min(loop.time() + job, cap.deadline)
        try:
            async with timeout_at(deadline):
                return await run_with_retries(
                    lambda _n: self._attempt(
                        provider, request, timeout, max(deadline - loop.time(), 0.001), tenant
                    ),
                    policy,
                    self.clock,
                    self.on_retry,
                )
        except ProviderError as exc:
            translated = cap.translated(exc)
            if translated is exc:
                raise
            raise translated from exc
        except TimeoutError:
            if cap.expired():
                raise cap.error() from None
            raise UnclassifiedProviderError(
                f"inference exceeded the {job:g}s job timeout (request_timeout_secs); "
                "the provider was still answering or being retried"
            ) from None

    # -- streaming ------------------------------------------------------------------------------

    async def stream(
        self, name: str, raw_request: Any, *, tenant: str = DEFAULT_TENANT
    ) -> AsyncIterator[StreamChunk | ProviderError]:
        """Chunks as they are produced; a failure ends the stream with one error item
        (docs/scripts/providers.md#streamstate-request-on_chunk)."""
        provider = await self.get(name, tenant=tenant)
        request = self.request_for(provider, raw_request)
        await self.guard(provider, request, tenant=tenant)
        if not provider.has("stream"):
            yield collapse(await self._run_inference(provider, request, tenant))
            return
        native = self._native_stream(provider, request, tenant)
        async with self._gate(provider), contextlib.aclosing(native) as items:
            async for item in items:
                yield item

    async def _native_stream(
        self, provider: LoadedProvider, request: dict[str, Any], tenant: str
    ) -> AsyncGenerator[Any, None]:
        """The script's ``stream``: one rate-limit acquire, then chunks (or one final error item)."""
        timeout, job = self._timeouts(request)
        cap = CallCap.start(self.config.call_timeout_secs, "stream")
        timeout, job = cap.limit(timeout), cap.limit(job)
        limits = self._limiter(provider)
        if limits is not None:
            try:
                await cap.run(self._acquire(provider.name, limits[0]))
            except ProviderError as exc:
                yield exc
                return
            job = cap.limit(job)
        host = self._host(provider, timeout, None, tenant)
        rows = list(provider.metadata.mime_types)
        emit = self.executor.stream(
            provider.handle, "stream", [provider.state, request], host=host, timeout=job, tenant=tenant
        )
        most = 0
        try:
            with self._serving(host):
                async for item in emit:
                    if isinstance(item, StreamEnd):
                        break
                    try:
                        chunk = parse_chunk(item, rows)
                    except InvalidResponse as exc:
                        yield exc
                        continue
                    if chunk.tokens is not None:
                        most = max(most, chunk.tokens.total_tokens)
                    yield chunk
        except ProviderError as exc:
            yield cap.translated(exc)
        finally:
            await emit.aclose()
            if limits is not None:
                limits[0].record_tokens(most)
