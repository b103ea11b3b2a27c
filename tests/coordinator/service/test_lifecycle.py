"""SIGTERM drains (in-flight calls finish, new ones get a retryable 503, exit 0); SIGHUP reloads tokens."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import httpx
from service_support import TOKENS, ServiceProcess, free_port, sha, write_config

from coordinator._cli.demo import GROQ_SCRIPT
from coordinator.bench.standin import StandinServer

PONG = {"model": "standin-small", "messages": [{"role": "user", "content": "Reply with exactly: PONG"}]}
AUTH = {"Authorization": f"Bearer {TOKENS['acme']}"}


def _start(tmp_path: Path, standin: StandinServer, extra: str = "") -> ServiceProcess:
    port = free_port()
    service = ServiceProcess.start(
        write_config(tmp_path, port=port, standin=standin.base_url, extra=extra), port
    )
    with service.client("acme") as c:
        c.put_script("provider", "groq", GROQ_SCRIPT.read_text())
    return service


async def _infer(http: httpx.AsyncClient) -> httpx.Response | Exception:
    try:
        return await http.post("/api/providers/groq/inference", json=PONG, headers=AUTH)
    except httpx.TransportError as exc:
        return exc


def _completions(standin: StandinServer) -> int:
    return sum(1 for r in standin.requests if r.path == "/v1/chat/completions")


def test_sigterm_lets_in_flight_calls_finish_and_refuses_the_rest(tmp_path: Path) -> None:
    with StandinServer(delay=0.6) as standin:
        service = _start(tmp_path, standin)

        async def scenario() -> tuple[
            list[httpx.Response | Exception], list[httpx.Response | Exception], int
        ]:
            limits = httpx.Limits(max_connections=100)
            async with httpx.AsyncClient(base_url=service.url, timeout=30, limits=limits) as http:
                accepted = [asyncio.ensure_future(_infer(http)) for _ in range(20)]
                await asyncio.sleep(0.3)  # all 20 are at the stand-in now
                service.process.send_signal(signal.SIGTERM)
                await asyncio.sleep(0.05)
                ready = await http.get("/readyz")
                late = [await _infer(http) for _ in range(5)]
                return list(await asyncio.gather(*accepted)), late, ready.status_code

        accepted, late, ready = asyncio.run(scenario())
        assert service.process.wait(30) == 0
        assert service.stop() == 0
        assert ready == 503
        assert all(isinstance(r, httpx.Response) and r.status_code == 200 for r in accepted), [
            r.text if isinstance(r, httpx.Response) else r
            for r in accepted
            if not isinstance(r, httpx.Response) or r.status_code != 200
        ]
        assert _completions(standin) == 20  # each accepted call ran exactly once
        for r in late:  # refused while draining, or not accepted at all once the listener closed
            if isinstance(r, httpx.Response):
                assert r.status_code == 503 and r.headers["retry-after"] == "1"


def test_calls_still_running_when_the_grace_ends_get_a_retryable_503(tmp_path: Path) -> None:
    with StandinServer(delay=5.0) as standin:
        service = _start(tmp_path, standin, extra="")
        text = service.config.read_text().replace("grace_secs = 3", "grace_secs = 0.5")
        service.config.write_text(text)
        service.stop()
        service = ServiceProcess.start(service.config, service.port)

        async def scenario() -> list[httpx.Response | Exception]:
            async with httpx.AsyncClient(base_url=service.url, timeout=30) as http:
                calls = [asyncio.ensure_future(_infer(http)) for _ in range(3)]
                await asyncio.sleep(0.3)
                service.process.send_signal(signal.SIGTERM)
                return list(await asyncio.gather(*calls))

        answers = asyncio.run(scenario())
        assert service.process.wait(30) == 0
        service.stop()
        for r in answers:
            assert isinstance(r, httpx.Response) and r.status_code == 503, r
            assert r.headers["retry-after"] == "1"


def test_sighup_rotates_and_revokes_tokens_without_dropping_a_call(tmp_path: Path) -> None:
    with StandinServer(delay=0.5) as standin:
        service = _start(tmp_path, standin)
        before = service.config.read_text()
        after = before.replace(sha(TOKENS["acme"]), sha("acme-rotated"))
        globex = f'[tenants.globex]\ntoken_sha256 = "{sha(TOKENS["globex"])}"\nproviders = ["groq"]\n'
        assert globex in after
        after = after.replace(globex, "")

        async def scenario() -> tuple[httpx.Response | Exception, list[int]]:
            async with httpx.AsyncClient(base_url=service.url, timeout=30) as http:
                running = asyncio.ensure_future(_infer(http))
                await asyncio.sleep(0.2)
                service.config.write_text(after)
                service.process.send_signal(signal.SIGHUP)
                await asyncio.sleep(0.3)
                codes = []
                for token in (TOKENS["acme"], "acme-rotated", TOKENS["globex"]):
                    r = await http.get("/api/scripts", headers={"Authorization": f"Bearer {token}"})
                    codes.append(r.status_code)
                return await running, codes

        finished, codes = asyncio.run(scenario())
        assert isinstance(finished, httpx.Response) and finished.status_code == 200
        assert codes == [401, 200, 401]
        assert service.stop() == 0
