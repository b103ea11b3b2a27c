"""Brokered host calls, streaming output with flow control, and multiplexing of provider calls."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pool_support import run

from coordinator._core.pool import Pool
from coordinator.errors import Cancelled, HostCallError, ScriptError, WorkerLost

PROVIDER = """
fn fetch(url) { http_get(url, #{ auth: "k" }) }
fn post(url, body) { http_post(url, body) }
fn key() { env_var("API_KEY") }
fn guarded(url) { let r = ""; try { r = http_get(url); } catch (e) { r = e; } r }
fn stream(state, request, on_chunk) {
    for i in 0..request.n { on_chunk.call(#{ delta: `${i}` }); }
    #{ content: "done", n: request.n }
}
fn relay(url, on_chunk) {
    let seen = 0;
    stream_request(url, "{}", #{}, |payload| { on_chunk.call(#{ delta: payload }); });
    "relayed"
}
fn slow_then_fetch(url) { sleep(0.3); http_get(url) }
fn relay_fetch(url, on_chunk) {
    stream_request(url, "{}", #{}, |payload| {
        on_chunk.call(#{ delta: payload + "+" + http_get("http://in") });
    });
    "relayed"
}
"""


class Host:
    """A provider runtime's handler: records what it was asked, answers from a table.

    Like the real one it keeps the record of side effects: an HTTP function "sends" when called.
    """

    def __init__(self, delay: float = 0.0, payloads: int = 0) -> None:
        self.calls: list[tuple[str, list[Any]]] = []
        self.delay, self.payloads, self.produced = delay, payloads, 0
        self.sent = False

    def begin_attempt(self, spawn: object) -> None:
        pass

    async def call(self, name: str, args: list[Any]) -> Any:
        self.calls.append((name, args))
        if name == "env_var":
            await asyncio.sleep(self.delay)
            return "secret" if args == ["API_KEY"] else None
        self.sent = True
        await asyncio.sleep(self.delay)
        if args[0] == "http://fail":
            raise HostCallError({"kind": "api", "message": "HTTP 500 Internal Server Error: x"})
        if args[0] == "http://bug":
            raise RuntimeError("handler bug")
        return f"{name}:{args[0]}"

    async def stream(self, name: str, args: list[Any]) -> AsyncIterator[Any]:
        self.sent = True
        for i in range(self.payloads):
            self.produced += 1
            yield f"p{i}"


def test_host_calls_are_brokered_by_the_handler() -> None:
    async def scenario() -> None:
        async with Pool(workers=1, spares=0) as pool:
            handle = await pool.load(PROVIDER, name="p.rhai", kind="provider")
            host = Host()
            assert await pool.call(handle, "fetch", "http://a", host=host) == "http_get:http://a"
            assert await pool.call(handle, "post", "http://b", "{}", host=host) == "http_post:http://b"
            assert await pool.call(handle, "key", host=host) == "secret"
            assert host.calls[0] == ("http_get", ["http://a", {"auth": "k"}])
            thrown = await pool.call(handle, "guarded", "http://fail", host=host)
            assert thrown == {"kind": "api", "message": "HTTP 500 Internal Server Error: x"}
            assert "provider host dropped the reply" in await pool.call(
                handle, "guarded", "http://bug", host=host
            )
            with pytest.raises(ScriptError, match="provider host channel closed"):
                await pool.call(handle, "fetch", "http://a")  # no handler given

    run(scenario())


def test_stream_yields_chunks_then_the_value() -> None:
    async def scenario() -> None:
        async with Pool(workers=1, spares=0, stream_window=4) as pool:
            handle = await pool.load(PROVIDER, name="p.rhai", kind="provider")
            stream = pool.stream(handle, "stream", {}, {"n": 50})
            chunks = [chunk async for chunk in stream]
            assert chunks == [{"delta": str(i)} for i in range(50)]
            assert stream.value == {"content": "done", "n": 50}

    run(scenario())


def test_a_stream_closed_early_cancels_its_call_in_the_worker() -> None:
    """A consumer that stops after two chunks frees the worker at once, not at the deadline."""

    async def scenario() -> None:
        async with Pool(workers=1, spares=0, stream_window=2) as pool:
            handle = await pool.load(PROVIDER, name="p.rhai", kind="provider")
            pid = pool.workers()[0].pid
            stream = pool.stream(handle, "stream", {}, {"n": 1_000_000}, timeout=60)
            assert [await anext(stream), await anext(stream)] == [{"delta": "0"}, {"delta": "1"}]
            await stream.aclose()
            with pytest.raises(Cancelled, match="closed by its consumer"):
                await anext(stream)
            await stream.aclose()  # idempotent
            for _ in range(200):
                if not pool.workers()[0].running:
                    break
                await asyncio.sleep(0.01)
            assert pool.workers()[0].running == () and pool.statistics().inflight == 0
            assert pool.workers()[0].pid == pid  # cancelled, not killed
            finished = pool.stream(handle, "stream", {}, {"n": 1})
            assert [c async for c in finished] == [{"delta": "0"}]
            await finished.aclose()  # after the end: nothing to cancel
            assert finished.value == {"content": "done", "n": 1}

    run(scenario())


def test_a_host_call_from_a_stream_callback_nests_legitimately() -> None:
    """Host calls nest only this way; the coordinator's sequence and fan-out checks must allow it."""

    async def scenario() -> None:
        async with Pool(workers=1, spares=0, stream_window=2) as pool:
            handle = await pool.load(PROVIDER, name="p.rhai", kind="provider")
            stream = pool.stream(handle, "relay_fetch", "http://sse", host=Host(payloads=5))
            chunks = [chunk async for chunk in stream]
            assert chunks == [{"delta": f"p{i}+http_get:http://in"} for i in range(5)]
            assert stream.value == "relayed" and pool.statistics().protocol_errors == 0

    run(scenario())


def test_stream_request_payloads_flow_with_bounded_buffering() -> None:
    async def scenario() -> None:
        async with Pool(workers=1, spares=0, stream_window=4) as pool:
            handle = await pool.load(PROVIDER, name="p.rhai", kind="provider")
            host = Host(payloads=200)
            stream = pool.stream(handle, "relay", "http://sse", host=host)
            received = 0
            async for chunk in stream:
                assert chunk == {"delta": f"p{received}"}
                received += 1
                # the handler may only run ahead by what the windows allow (host + output + one in hand)
                assert host.produced - received <= 2 * 4 + 2
                if received % 20 == 0:
                    await asyncio.sleep(0.02)  # a slow consumer
            assert received == 200 and stream.value == "relayed"

    run(scenario())


class Gate(Host):
    """Holds every host call until ``count`` of them wait at once: they can only all finish if the
    calls really run concurrently (no clock involved)."""

    def __init__(self, count: int) -> None:
        super().__init__()
        self.count, self.waiting, self.peak = count, 0, 0
        self.opened = asyncio.Event()

    async def call(self, name: str, args: list[Any]) -> Any:
        self.waiting += 1
        self.peak = max(self.peak, self.waiting)
        if self.waiting == self.count:
            self.opened.set()
        await self.opened.wait()
        self.waiting -= 1
        return await super().call(name, args)


def test_hundreds_of_io_bound_calls_multiplex_on_few_workers() -> None:
    async def scenario() -> None:
        async with Pool(workers=4, spares=0, provider_capacity=64) as pool:
            handle = await pool.load(PROVIDER, name="p.rhai", kind="provider")
            host = Gate(256)
            results = await asyncio.gather(
                *(pool.call(handle, "fetch", f"http://{i}", host=host, timeout=60) for i in range(256))
            )
            assert results == [f"http_get:http://{i}" for i in range(256)]
            assert host.peak == 256 and len(pool.workers()) == 4  # all 256 at once, on 4 processes

    run(scenario())


def test_provider_call_is_rerun_only_if_no_host_call_was_sent() -> None:
    async def scenario() -> None:
        async with Pool(workers=1, spares=1) as pool:
            handle = await pool.load(PROVIDER, name="p.rhai", kind="provider")
            host = Host(delay=5.0)
            # killed before its host call: re-run elsewhere, succeeds
            task = asyncio.ensure_future(pool.call(handle, "slow_then_fetch", "http://a", host=Host()))
            await asyncio.sleep(0.1)
            (busy,) = [w for w in pool.workers() if w.running]
            os.kill(busy.pid, signal.SIGKILL)
            assert await task == "http_get:http://a"
            # killed while its host call is outstanding: never re-sent (egress may have happened)
            task = asyncio.ensure_future(pool.call(handle, "fetch", "http://b", host=host, timeout=20))
            for _ in range(100):
                if host.calls:
                    break
                await asyncio.sleep(0.02)
            busy = [w for w in pool.workers() if w.inflight]
            os.kill(busy[0].pid, signal.SIGKILL)
            with pytest.raises(WorkerLost, match="host call") as info:
                await task
            assert "SIGKILL" in str(info.value) and info.value.exit_reason.startswith("SIGKILL")
            assert len(host.calls) == 1

    run(scenario())


def test_an_unencodable_chunk_is_an_error_item_and_the_stream_goes_on() -> None:
    from coordinator._core.calls import InvalidChunk

    async def scenario() -> None:
        async with Pool(workers=1, spares=0) as pool:
            source = (
                'fn s(on_chunk) { on_chunk.call("a"); on_chunk.call(#{d: |x| x}); on_chunk.call("b"); 3 }'
            )
            handle = await pool.load(source, name="p.rhai", kind="provider")
            stream = pool.stream(handle, "s")
            items = [item async for item in stream]
            assert items[0] == "a" and isinstance(items[1], InvalidChunk) and items[2] == "b"
            assert stream.value == 3

    run(scenario())


def test_a_host_wait_ends_at_the_calls_own_deadline_inside_the_worker() -> None:
    """The worker stops waiting when the engine deadline passes (before the coordinator's kill grace)."""

    class Slow:
        sent = True

        def begin_attempt(self, spawn: object) -> None:
            pass

        async def call(self, name: str, args: list[Any]) -> Any:
            await asyncio.sleep(3600)

        async def stream(self, name: str, args: list[Any]) -> AsyncIterator[Any]:  # pragma: no cover
            yield None

    async def scenario() -> None:
        from coordinator._core.config import Deadlines, PoolConfig
        from coordinator.errors import ScriptTimeout

        config = PoolConfig(workers=1, spares=0, deadlines=Deadlines(kill_grace=30.0))
        async with Pool(config) as pool:
            handle = await pool.load(PROVIDER, name="p.rhai", kind="provider")
            pid = pool.workers()[0].pid
            with pytest.raises(ScriptTimeout) as info:
                await pool.call(handle, "fetch", "http://x", timeout=0.3, host=Slow())
            assert "deadline" in str(info.value)
            assert pool.statistics().exits == 0 and pool.workers()[0].pid == pid  # the worker's own, no kill

    run(scenario())


def test_a_handlers_own_task_outlives_its_attempt_and_ends_with_the_pool() -> None:
    """What a handler starts through ``begin_attempt``'s ``spawn`` (a provider's request kept for a
    re-run) runs in the pool's TaskGroup: past the end of its call, and cancelled as the pool closes."""

    class Keeper(Host):
        def __init__(self) -> None:
            super().__init__()
            self.started = asyncio.Event()
            self.tasks: list[asyncio.Task[None]] = []

        def begin_attempt(self, spawn: Any) -> None:
            self.tasks.append(spawn(self.keep()))

        async def keep(self) -> None:
            self.started.set()
            await asyncio.sleep(3600)  # a request still running for a re-run that never comes

    async def scenario() -> None:
        keeper = Keeper()
        async with Pool(workers=1, spares=0) as pool:
            handle = await pool.load(PROVIDER, name="p.rhai", kind="provider")
            assert await pool.call(handle, "fetch", "http://a", host=keeper) == "http_get:http://a"
            await asyncio.wait_for(keeper.started.wait(), 5)
            (task,) = keeper.tasks
            assert not task.done()  # its call has ended: the task runs on
        assert task.cancelled()  # the pool closed, and nothing of it was left running

    run(scenario())
