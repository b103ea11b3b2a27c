"""When a call whose worker died is re-run, and how long it may take: real workers, real signals.

- the re-run rule reads the host handler's precise record of side effects (``ProviderHost.sent``):
  an ``env_var`` or a request the egress policy refused sends nothing, so such a call is re-run; a
  request that reached the wire is never sent twice;
- a stream that has delivered chunks is never re-run (its consumer would see them twice).
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pool_support import run

from coordinator._core.pool import Pool
from coordinator.egress import Egress, EgressPolicy, EnvResolver
from coordinator.errors import WorkerLost
from coordinator.providers.host import ProviderHost

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

        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal connections
            connections += 1
            await reader.read()  # answers nothing; the connection ends when the client goes

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
