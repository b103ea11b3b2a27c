"""When a call whose worker died is re-run, and how long it may take: real workers, real signals.

- the re-run rule reads the host handler's precise record of side effects (``ProviderHost.sent``):
  an ``env_var`` or a request the egress policy refused sends nothing, so such a call is re-run; a
  request that reached the wire is never sent twice;
- a stream that has delivered chunks is never re-run (its consumer would see them twice);
- a call's ``timeout`` bounds it, re-runs included, and a re-run is never placed on a worker that
  is already dead, so losing every worker at once costs a call one re-run.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pool_support import SCRIPT, run

from coordinator._core.config import Deadlines, PoolConfig, RetryPolicy
from coordinator._core.pool import Pool
from coordinator.egress import Egress, EgressPolicy, EnvResolver
from coordinator.errors import ScriptTimeout, WorkerLost
from coordinator.providers.host import ProviderHost
from proto import Call as CallMessage
from proto import decode

PROVIDER = """
fn quiet(url) {
    let key = env_var("API_KEY");
    let refused = "";
    try { http_get(url); } catch (e) { refused = "refused"; }
    sleep(0.8);
    `${key}:${refused}`
}
fn hang(url) { http_get(url) }
fn chunks(n, on_chunk) { on_chunk.call(0); sleep(0.8); for i in 1..n { on_chunk.call(i); } n }
"""


class Counted:
    """The real ``ProviderHost``, with a count of the host calls it has answered (to know when to kill)."""

    def __init__(self, host: ProviderHost) -> None:
        self.host, self.answered = host, 0

    @property
    def sent(self) -> bool:
        return self.host.sent

    async def call(self, name: str, args: list[Any]) -> Any:
        try:
            return await self.host.call(name, args)
        finally:
            self.answered += 1

    def stream(self, name: str, args: list[Any]) -> AsyncIterator[Any]:
        return self.host.stream(name, args)


async def running_pid(pool: Pool, function: str) -> int:
    """The worker running ``function`` (waits for it to be placed)."""
    for _ in range(1000):
        busy = [w for w in pool.workers() if any(r.endswith(f":{function}") for r in w.running)]
        if busy:
            return busy[0].pid
        await asyncio.sleep(0.005)
    raise AssertionError(f"no worker picked up {function}")


async def until(predicate: Any, what: str) -> None:
    for _ in range(2000):
        if predicate():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never happened: {what}")


def test_a_provider_call_whose_host_calls_sent_nothing_is_rerun_after_a_worker_death() -> None:
    async def scenario() -> None:
        async with Pool(workers=1, spares=1) as pool, Egress() as egress:
            handle = await pool.load(PROVIDER, name="p.rhai", kind="provider")
            policy = EgressPolicy.build("p", allowed_hosts=("api.example.test",))
            env = EnvResolver.build("p", configured=(("API_KEY", "k"),))
            host = Counted(ProviderHost(egress, policy, env))
            task = asyncio.ensure_future(
                pool.call(handle, "quiet", "http://elsewhere.test/", host=host, timeout=20)
            )
            pid = await running_pid(pool, "quiet")
            await until(lambda: host.answered == 2, "env_var and the refused http_get answered")
            os.kill(pid, signal.SIGKILL)
            assert await task == "k:refused"
            assert not host.sent and host.answered == 4  # both host calls again, in the re-run
            assert pool.statistics().retries == 1

    run(scenario())


def test_a_provider_call_whose_request_reached_the_wire_is_never_sent_twice() -> None:
    async def scenario() -> None:
        connections = 0
        served: list[asyncio.Future[None]] = []

        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal connections
            connections += 1
            done = asyncio.get_running_loop().create_future()
            served.append(done)
            try:
                await reader.read()  # answers nothing; the connection ends when the client goes
            finally:
                writer.close()
                done.set_result(None)

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server, Pool(workers=1, spares=1) as pool, Egress() as egress:
            handle = await pool.load(PROVIDER, name="p.rhai", kind="provider")
            policy = EgressPolicy.build("p", egress_allow=("127.0.0.1",))
            host = Counted(ProviderHost(egress, policy, EnvResolver.build("p")))
            url = f"http://127.0.0.1:{port}/v1"
            task = asyncio.ensure_future(pool.call(handle, "hang", url, host=host, timeout=20))
            pid = await running_pid(pool, "hang")
            await until(lambda: connections == 1, "the request reached the server")
            os.kill(pid, signal.SIGKILL)
            with pytest.raises(WorkerLost, match="host call already sent a request"):
                await task
            assert host.sent and connections == 1 and pool.statistics().retries == 0
        await asyncio.wait_for(asyncio.gather(*served), 5)  # the client hung up: nothing left open

    run(scenario())


def test_a_stream_that_delivered_chunks_is_not_rerun_after_a_worker_death() -> None:
    async def scenario() -> None:
        async with Pool(workers=1, spares=1) as pool:
            handle = await pool.load(PROVIDER, name="p.rhai", kind="provider")
            stream = pool.stream(handle, "chunks", 3, timeout=20)
            assert await anext(stream) == 0
            os.kill(await running_pid(pool, "chunks"), signal.SIGKILL)
            rest: list[Any] = []
            with pytest.raises(WorkerLost, match="chunks were already delivered"):
                async for chunk in stream:
                    rest.append(chunk)
            assert rest == [] and pool.statistics().retries == 0

    run(scenario())


def test_a_frozen_worker_does_not_stretch_a_calls_timeout() -> None:
    """SIGSTOP mid-call: the worker is killed at the hard deadline and the call ends there, with no
    re-run (no time is left for one) -- not after a second full timeout on another worker."""

    async def scenario() -> None:
        timeout, grace = 3.0, 0.5
        config = PoolConfig(workers=1, spares=1, deadlines=Deadlines(kill_grace=grace))
        async with Pool(config) as pool:
            handle = await pool.load(SCRIPT, name="s.rhai")
            started = time.monotonic()
            task = asyncio.ensure_future(pool.call(handle, "sleepy", 30, "late", timeout=timeout))
            os.kill(await running_pid(pool, "sleepy"), signal.SIGSTOP)
            with pytest.raises(ScriptTimeout, match="no time left to re-run"):
                await task
            elapsed = time.monotonic() - started
            # the bound is the behaviour: timeout + kill_grace, plus a generous margin for a loaded machine
            assert elapsed < timeout + grace + 2.0, f"answered after {elapsed:.1f} s"
            stats = pool.statistics()
            assert stats.exit_reasons.get("frozen (SIGSTOP)") == 1 and stats.retries == 0
            assert await pool.call(handle, "add", 1, 2) == 3

    run(scenario())


def test_a_rerun_gets_only_the_time_left_of_its_timeout() -> None:
    """Killed mid-call, the call is re-run with what is left: the re-run's engine deadline ends it."""

    async def scenario() -> None:
        async with Pool(workers=1, spares=1) as pool:
            handle = await pool.load(SCRIPT, name="s.rhai")
            started = time.monotonic()
            task = asyncio.ensure_future(pool.call(handle, "sleepy", 30, "late", timeout=3.0))
            pid = await running_pid(pool, "sleepy")
            await asyncio.sleep(2.0)  # two thirds of the timeout used up on the first worker
            os.kill(pid, signal.SIGKILL)
            with pytest.raises(ScriptTimeout):
                await task
            elapsed = time.monotonic() - started
            # the bound is the behaviour (not 2 s + a fresh 3 s): the timeout plus a generous margin
            assert elapsed < 3.0 + 1.5, f"answered after {elapsed:.1f} s"
            assert pool.statistics().retries == 1

    run(scenario())


def test_a_call_survives_the_loss_of_every_worker_at_once() -> None:
    """With one re-run allowed: the re-run lands on a new worker, or on one already being killed
    (its exit still in progress), which does not count against the call."""

    async def scenario() -> None:
        config = PoolConfig(workers=2, spares=1, retry=RetryPolicy(max_retries=1))
        async with Pool(config) as pool:
            handle = await pool.load(SCRIPT, name="s.rhai")
            await until(lambda: pool.statistics().workers.get("spare") == 1, "the spare is warm")
            task = asyncio.ensure_future(pool.call_detailed(handle, "sleepy", 1.0, "survived", timeout=20))
            await running_pid(pool, "sleepy")
            await asyncio.sleep(0.5)  # well into the call: losing this try counts
            doomed = {w.pid for w in pool.workers()}
            assert len(doomed) == 3
            for pid in doomed:
                os.kill(pid, signal.SIGKILL)
            result = await task
            assert result.value == "survived" and result.attempts == 2  # one re-run counted against it
            stats = pool.statistics()
            assert stats.exits == 3 and stats.calls_failed == 0
            assert not doomed & {w.pid for w in pool.workers()}

    run(scenario())


def test_a_rerun_still_waiting_for_a_worker_when_its_timeout_ends_is_never_sent() -> None:
    """No spare: the re-run waits for a cold start, which outlasts what is left of the timeout."""

    async def scenario() -> None:
        async with Pool(workers=1, spares=0) as pool:
            handle = await pool.load(SCRIPT, name="s.rhai")
            sent: list[str] = []
            send_frames = pool._router.send_frames

            def counting(identity: bytes, frames: list[bytes]) -> bool:
                message = decode(frames)
                if isinstance(message, CallMessage):
                    sent.append(message.fn)
                return send_frames(identity, frames)

            pool._router.send_frames = counting  # type: ignore[method-assign]
            task = asyncio.ensure_future(pool.call(handle, "sleepy", 30, "late", timeout=1.0))
            pid = await running_pid(pool, "sleepy")
            await asyncio.sleep(0.95)
            os.kill(pid, signal.SIGKILL)
            with pytest.raises(ScriptTimeout, match="deadline"):
                await task
            assert sent == ["sleepy"]  # tried once; the re-run ran out of time in the queue
            assert await pool.call(handle, "add", 1, 2) == 3

    run(scenario())
