"""When a call whose worker died is re-run, and how long it may take: real workers, real signals.

- the re-run rule reads the host handler's precise record of side effects (``ProviderHost.sent``):
  an ``env_var`` or a request the egress policy refused sends nothing, so such a call is re-run; a
  request that reached the wire is never sent twice: the re-run is served it from the call's journal
  (awaited while still in flight, answered from the record once finished, errors and stream events
  included), and a re-run that asks for a different request fails without sending it;
- a stream that has delivered chunks is never re-run (its consumer would see them twice);
- a call's ``timeout`` bounds it, re-runs included, and a re-run is never placed on a worker that
  is already dead, so losing every worker at once costs a call one re-run.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, Self

import pytest
from pool_support import SCRIPT, run

from coordinator._core.config import Deadlines, PoolConfig, RetryPolicy
from coordinator._core.pool import Pool
from coordinator.bench.standin import Reply, Request, StandinServer
from coordinator.egress import Egress, EgressPolicy, EnvResolver
from coordinator.errors import ScriptError, ScriptTimeout, WorkerLost
from coordinator.providers.config import parse_config
from coordinator.providers.errors import RerunDiverged
from coordinator.providers.executor import PoolExecutor
from coordinator.providers.host import ProviderHost
from coordinator.providers.runtime import ProviderRuntime
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
fn three(url) {
    let a = http_post(`${url}/ok`, "question", #{"x-n": 1});
    let b = "";
    try { http_get(`${url}/missing`); } catch (e) { b = e.message; }
    sleep(0.8);
    `${a}|${b}|${http_get(`${url}/after`)}`
}
fn refused(url) {
    let n = env_var("NONCE");
    try { http_get(`http://elsewhere.test/${n}`); } catch (e) { }
    sleep(0.8);
    `${n}:${http_get(`${url}/after`)}`
}
fn bigger(url) { let n = 0; for i in 0..3 { n += http_get(url).len; } sleep(0.8); n }
fn stamped(url) { let n = env_var("NONCE"); let a = http_post(`${url}/ok`, n, #{}); sleep(0.8); a }
fn streamed(url) {
    let got = [];
    stream_request(`${url}/sse`, "{}", #{}, |p| { got.push(p); });
    got
}
"""


class Counted:
    """The real ``ProviderHost``, with a count of the host calls it has answered (to know when to kill)."""

    def __init__(self, host: ProviderHost) -> None:
        self.host, self.answered, self.events, self.nonce = host, 0, 0, 0

    @property
    def sent(self) -> bool:
        return self.host.sent

    def begin_attempt(self, spawn: Any) -> None:
        self.host.begin_attempt(spawn)

    async def call(self, name: str, args: list[Any]) -> Any:
        try:
            if args == ["NONCE"]:  # a value that differs on every run: a non-deterministic script
                self.nonce += 1
                return str(self.nonce)
            return await self.host.call(name, args)
        finally:
            self.answered += 1

    async def stream(self, name: str, args: list[Any]) -> AsyncIterator[Any]:
        async for payload in self.host.stream(name, args):
            self.events += 1
            yield payload


class Gated:
    """A stand-in API on 127.0.0.1 whose answers wait for the test to open the gate."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.server = StandinServer()
        self.server.route("GET", "/slow", self._slow)
        self.server.route("POST", "/ok", lambda r: Reply(200, body=b"answer to " + r.body))
        self.server.route("GET", "/missing", lambda _r: Reply(404, body=b"no such thing"))
        self.server.route("GET", "/after", lambda _r: Reply(200, body=b"later"))
        self.server.route("POST", "/sse", self._sse)
        self.server.route("POST", "/v1/stamp", self._slow)

    def _slow(self, _request: Request) -> Reply:
        self.gate.wait(20)
        return Reply(200, body=b"slow answer")

    def _events(self) -> Iterator[bytes | float]:
        yield b"data: one\n\n"
        self.gate.wait(20)
        yield b"data: two\n\ndata: three\n\n"

    def _sse(self, _request: Request) -> Reply:
        return Reply(200, {"Content-Type": "text/event-stream"}, stream=self._events())

    def hits(self, path: str) -> int:
        return sum(1 for r in self.server.requests if r.path == path)

    def __enter__(self) -> Self:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.gate.set()
        self.server.stop()


def provider_host(egress: Egress) -> Counted:
    policy = EgressPolicy.build("p", egress_allow=("127.0.0.1",))
    return Counted(ProviderHost(egress, policy, EnvResolver.build("p")))


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


def test_a_request_in_flight_when_the_worker_died_is_awaited_by_the_rerun_never_sent_twice() -> None:
    async def scenario() -> None:
        with Gated() as api:
            async with Pool(workers=1, spares=1) as pool, Egress() as egress:
                handle = await pool.load(PROVIDER, name="p.rhai", kind="provider")
                host = provider_host(egress)
                task = asyncio.ensure_future(
                    pool.call(handle, "hang", f"{api.server.url}/slow", host=host, timeout=20)
                )
                pid = await running_pid(pool, "hang")
                await until(lambda: api.hits("/slow") == 1, "the request reached the server")
                os.kill(pid, signal.SIGKILL)
                await until(lambda: pool.statistics().retries == 1, "the call was re-run")
                api.gate.set()
                assert await task == "slow answer"
                assert api.hits("/slow") == 1 and not host.sent
                host.host.close()
                assert host.host.journal.entries == []

    run(scenario())


def test_finished_requests_are_answered_from_the_journal_errors_included() -> None:
    async def scenario() -> None:
        with Gated() as api:
            async with Pool(workers=1, spares=1) as pool, Egress() as egress:
                handle = await pool.load(PROVIDER, name="p.rhai", kind="provider")
                host = provider_host(egress)
                task = asyncio.ensure_future(
                    pool.call(handle, "three", api.server.url, host=host, timeout=20)
                )
                pid = await running_pid(pool, "three")
                await until(lambda: host.answered == 2, "the post and the failed get answered")
                os.kill(pid, signal.SIGKILL)
                answer = await task
                assert answer == "answer to question|HTTP 404 Not Found: no such thing|later"
                assert [api.hits(p) for p in ("/ok", "/missing", "/after")] == [1, 1, 1]
                assert host.answered == 5 and not host.sent and pool.statistics().retries == 1

    run(scenario())


def test_a_rerun_that_asks_for_a_different_request_fails_without_sending_it() -> None:
    async def scenario() -> None:
        with Gated() as api:
            async with Pool(workers=1, spares=1) as pool, Egress() as egress:
                handle = await pool.load(PROVIDER, name="p.rhai", kind="provider")
                host = provider_host(egress)
                task = asyncio.ensure_future(
                    pool.call(handle, "stamped", api.server.url, host=host, timeout=20)
                )
                pid = await running_pid(pool, "stamped")
                await until(lambda: host.answered == 2, "the nonce and the post answered")
                os.kill(pid, signal.SIGKILL)
                with pytest.raises(ScriptError, match=r"re-run .* not deterministic.*sent twice"):
                    await task
                assert api.hits("/ok") == 1 and host.nonce == 2
                assert host.sent and host.host.journal.diverged is not None

    run(scenario())


def test_a_rerun_may_take_another_path_where_its_first_run_sent_nothing() -> None:
    """A different request where the record holds only requests that never left (refused by the
    egress policy) is no divergence: that part of the record is forgotten and the re-run goes live."""

    async def scenario() -> None:
        with Gated() as api:
            async with Pool(workers=1, spares=1) as pool, Egress() as egress:
                handle = await pool.load(PROVIDER, name="p.rhai", kind="provider")
                host = provider_host(egress)
                task = asyncio.ensure_future(
                    pool.call(handle, "refused", api.server.url, host=host, timeout=20)
                )
                pid = await running_pid(pool, "refused")
                await until(lambda: host.answered == 2, "the nonce and the refused get answered")
                os.kill(pid, signal.SIGKILL)
                assert await task == "2:later"
                assert api.hits("/after") == 1 and not host.sent
                assert [e.args[0] for e in host.host.journal.entries] == [
                    "http://elsewhere.test/2",
                    f"{api.server.url}/after",
                ]

    run(scenario())


def test_a_stream_request_is_replayed_to_the_rerun_then_followed_live() -> None:
    async def scenario() -> None:
        with Gated() as api:
            async with Pool(workers=1, spares=1) as pool, Egress() as egress:
                handle = await pool.load(PROVIDER, name="p.rhai", kind="provider")
                host = provider_host(egress)
                task = asyncio.ensure_future(
                    pool.call(handle, "streamed", api.server.url, host=host, timeout=20)
                )
                pid = await running_pid(pool, "streamed")
                await until(lambda: host.events == 1, "the first event handed to the script")
                os.kill(pid, signal.SIGKILL)
                await until(lambda: pool.statistics().retries == 1, "the call was re-run")
                api.gate.set()
                assert await task == ["one", "two", "three"]
                assert api.hits("/sse") == 1 and not host.sent

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
    """SIGSTOP mid-call: the call is answered at its timeout, with no re-run (no time is left for one) --
    not after the kill grace, nor after a second full timeout on another worker; the worker is killed
    a grace later."""

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
            # the bound is the behaviour: the timeout, plus a margin for a loaded machine (below the grace)
            assert elapsed < timeout + grace, f"answered after {elapsed:.1f} s"
            await until(lambda: pool.statistics().exits == 1, "the frozen worker is killed")
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


def _rerun_left_waiting(timeout: float, kill_after: float) -> None:
    """One worker and no spare: the worker running a call dies ``timeout - kill_after`` seconds before
    the call's timeout ends, so its re-run waits for a cold start that outlasts what is left."""

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
            task = asyncio.ensure_future(pool.call(handle, "sleepy", 30, "late", timeout=timeout))
            pid = await running_pid(pool, "sleepy")
            await asyncio.sleep(kill_after)
            os.kill(pid, signal.SIGKILL)
            with pytest.raises(ScriptTimeout, match="deadline"):
                await task
            assert sent == ["sleepy"]  # tried once; the re-run ran out of time in the queue
            assert await pool.call(handle, "add", 1, 2) == 3

    run(scenario())


def test_a_rerun_still_waiting_for_a_worker_when_its_timeout_ends_is_never_sent() -> None:
    """No spare: the re-run waits for a cold start, which outlasts what is left of the timeout."""
    _rerun_left_waiting(1.0, 0.95)


def test_a_rerun_whose_timeout_ran_out_is_not_sent_to_a_worker_that_comes_up_before_the_ticker_looks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same, with the pool's ticker slowed down: the replacement comes up after the timeout ran
    out but before any tick could drop the waiting re-run; placing it must end it instead."""
    monkeypatch.setattr("coordinator._core.pool._TICK", 2.0)
    _rerun_left_waiting(0.6, 0.55)


STAMPING_PROVIDER = """
fn initialize(config) { config }
fn inference(state, request) {
    #{ content: http_post(`${state.base_url}/stamp`, `${env_var("RHAIPOOL_RERUN_VARIANT")}`, #{}) }
}
"""


def test_an_inference_whose_rerun_diverges_fails_with_rerun_diverged_and_sends_nothing_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the provider runtime: the script's request body changed between runs (here from the
    environment), so the re-run is refused its request, the inference fails (permanent, no retry)
    and the request still in flight for the dead attempt is stopped with the call."""
    (tmp_path / "stamping.rhai").write_text(STAMPING_PROVIDER)
    monkeypatch.setenv("RHAIPOOL_RERUN_VARIANT", "first")

    async def scenario() -> None:
        with Gated() as api:
            table = {
                "script": "stamping.rhai",
                "base_url": api.server.base_url,
                "egress_allow": ["127.0.0.1"],
                "allow_env_vars": ["RHAIPOOL_RERUN_VARIANT"],
            }
            config = parse_config({"providers_dir": str(tmp_path), "model_providers": {"stamping": table}})
            async with Pool(workers=1, spares=1) as pool, Egress() as egress:
                runtime = ProviderRuntime(PoolExecutor(pool), egress, config)
                request = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
                task = asyncio.ensure_future(runtime.inference("stamping", request))
                pid = await running_pid(pool, "inference")
                await until(lambda: api.hits("/v1/stamp") == 1, "the request reached the server")
                monkeypatch.setenv("RHAIPOOL_RERUN_VARIANT", "second")
                os.kill(pid, signal.SIGKILL)
                with pytest.raises(RerunDiverged, match="not deterministic") as info:
                    await task
                assert not info.value.transient
                assert [r.body for r in api.server.requests if r.path == "/v1/stamp"] == [b"first"]
                assert pool.statistics().retries == 1

    run(scenario())


def test_a_call_whose_journal_outgrew_its_bound_is_not_replayed_and_nothing_is_sent_twice() -> None:
    """The journal keeps at most twice ``max_response_bytes`` of a call; a request it could not keep
    makes the call unreplayable, so a worker death then ends it (``WorkerLost``) instead of re-running."""

    async def scenario() -> None:
        with Gated() as api:
            api.server.route("GET", "/big", lambda _r: Reply(200, body=b"x" * 900))
            async with Pool(workers=1, spares=1) as pool, Egress() as egress:
                handle = await pool.load(PROVIDER, name="p.rhai", kind="provider")
                policy = EgressPolicy.build("p", egress_allow=("127.0.0.1",), max_response_bytes=1000)
                host = Counted(ProviderHost(egress, policy, EnvResolver.build("p")))
                url = f"{api.server.url}/big"
                task = asyncio.ensure_future(pool.call(handle, "bigger", url, host=host, timeout=20))
                pid = await running_pid(pool, "bigger")
                await until(lambda: host.answered == 3, "three big answers read")
                assert host.sent and len(host.host.journal.entries) == 2  # the third did not fit
                os.kill(pid, signal.SIGKILL)
                with pytest.raises(WorkerLost, match="host call already sent a request"):
                    await task
                assert api.hits("/big") == 3 and pool.statistics().retries == 0

    run(scenario())


def test_a_stream_bigger_than_the_journal_bound_is_delivered_whole_but_not_kept() -> None:
    """Past the bound the journal lets a stream's events go as they are handed over (the call is then
    unreplayable): the script still gets every event, in order, exactly once."""

    async def scenario() -> None:
        events = [f"{i}{'x' * 600}" for i in range(5)]
        with Gated() as api:
            body = b"".join(f"data: {e}\n\n".encode() for e in events)
            api.server.route(
                "POST", "/big/sse", lambda _r: Reply(200, {"Content-Type": "text/event-stream"}, body)
            )
            async with Pool(workers=1, spares=1) as pool, Egress() as egress:
                handle = await pool.load(PROVIDER, name="p.rhai", kind="provider")
                policy = EgressPolicy.build("p", egress_allow=("127.0.0.1",), max_response_bytes=1000)
                host = Counted(ProviderHost(egress, policy, EnvResolver.build("p")))
                url = f"{api.server.url}/big"
                assert await pool.call(handle, "streamed", url, host=host, timeout=20) == events
                journal = host.host.journal
                assert host.sent and journal.entries == [] and api.hits("/big/sse") == 1

    run(scenario())
