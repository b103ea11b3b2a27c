"""A worker death blamed on the call's own script is never retried by the provider retry layer.

Retrying it would only kill another worker (and bill another request): the crash is the script's,
not the network's. The scripts crash for real: they exhaust their worker's memory limit.
"""

from __future__ import annotations

from typing import Any

import pytest

from coordinator import errors as pool_errors
from coordinator._core.config import Limits, PoolConfig
from coordinator.providers.executor import translate
from coordinator.providers.failures import ProviderError
from coordinator.providers.retry import InferenceRetryPolicy, retryable, run_with_retries
from coordinator.providers.runtime import ProviderRuntime

from .harness import Harness

REQ: dict[str, Any] = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}
#: Fills the worker's memory with 512 KB map keys (keys are outside the engine's data-size limits). The
#: counter goes first: keys then differ in their first bytes, so inserting one costs a copy, not a
#: comparison of 512 KB prefixes (the engine charges CPU to the operation budget).
BOMB = (
    'let m = #{}; let s = "y"; while s.len < 500000 { s += s; } '
    "let i = 0; loop { m[i.to_string() + s] = i; i += 1; }"
)
#: 256 MiB of address space: the worker starts well inside it, and the bomb reaches it long before its
#: CPU (charged to its operation budget, page faults included) runs out.
CONFIG = PoolConfig(workers=1, spares=1, limits=Limits(memory_bytes=256 << 20))


def counters(rt: ProviderRuntime) -> tuple[int, int, int]:
    """(pool calls that failed, worker exits, re-runs the pool made itself)."""
    stats = rt.executor.pool.statistics()
    return stats.calls_failed, stats.exits, stats.retries


@pytest.mark.parametrize(
    "prelude",
    [
        "",
        # a request already left the machine: the crash must not look like a dropped connection
        'http_post(state.base_url, "{}", #{});',
    ],
    ids=["crash", "crash-after-egress"],
)
def test_a_crashing_inference_kills_one_worker_and_is_not_retried(harness: Harness, prelude: str) -> None:
    harness.table("p", base_url=harness.server.url + "/echo")
    harness.data["limits"] = {"inference_retry_attempts": 4, "inference_retry_base_ms": 10}
    harness.write(
        "p", f"fn initialize(config) {{ config }}\nfn inference(state, request) {{ {prelude} {BOMB} }}\n"
    )

    async def body(rt: ProviderRuntime) -> tuple[tuple[int, ...], int, ProviderError]:
        await rt.get("p")
        before, sent = counters(rt), len(harness.server.requests)
        with pytest.raises(ProviderError) as info:
            await rt.inference("p", REQ)
        after = counters(rt)
        return (
            tuple(a - b for a, b in zip(after, before, strict=True)),
            len(harness.server.requests) - sent,
            info.value,
        )

    (calls, died, reruns), requests, error = harness.run(body, pool_config=CONFIG, timeout=120)
    assert calls == 1  # the retry layer made one attempt
    assert died == 1 + reruns  # every death past the first is the pool's own re-run, none a retry
    assert requests == (1 if prelude else 0)  # and no second billed request
    assert not retryable(error)


@pytest.mark.parametrize(
    "death",
    [
        pool_errors.WorkerCrashed("worker w1 crashed while running it: SIGSEGV", exit_reason="SIGSEGV"),
        pool_errors.LimitExceeded("worker memory limit reached (killed)", limit="memory", cause="killed"),
        pool_errors.ScriptTimeout("no answer within its 1 s deadline; worker w1 was killed"),
    ],
    ids=["crashed", "memory", "deadline"],
)
def test_blamed_deaths_stop_the_retry_loop_even_if_marked_transient(
    death: pool_errors.CallFailed,
) -> None:
    """Whatever else may mark an error transient, the blame on the call's own script wins."""
    attempts: list[int] = []

    async def attempt(n: int) -> None:
        attempts.append(n)
        error = translate(death)
        error.transient = True
        raise error

    import asyncio

    with pytest.raises(ProviderError) as info:
        asyncio.run(run_with_retries(attempt, InferenceRetryPolicy(attempts=4, base_ms=1)))
    assert attempts == [1] and info.value.script_blamed


def test_a_lost_worker_is_not_blamed_on_the_call() -> None:
    lost = translate(pool_errors.WorkerLost("worker w1 was lost (SIGKILL)", exit_reason="SIGKILL"))
    assert not lost.script_blamed
    thrown = translate(pool_errors.ScriptError("boom", rhai_class="ScriptThrow", value={"kind": "transport"}))
    assert retryable(thrown) and not thrown.script_blamed  # a script's own transient throw still retries
