"""The ROUTER's reader against a real DEALER: every message of a burst arrives, framed as sent (a
message of extra frames is a protocol defect, never shifted into the next one's identity), and a
wake-up with nothing to read (its first receive meets ``zmq.Again``) passes quietly."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
import zmq
from pool_support import run

from coordinator._core.transport import Router
from proto import ProtocolError, Result, encode


def _router(tmp_path: Path, got: list[tuple[bytes, Any]]) -> Router:
    return Router(f"ipc://{tmp_path}/r.sock", lambda identity, message: got.append((identity, message)))


def test_a_burst_arrives_whole_and_framed_as_sent(tmp_path: Path) -> None:
    got: list[tuple[bytes, Any]] = []

    async def main() -> None:
        router = _router(tmp_path, got)
        router.start(asyncio.get_running_loop())
        context = zmq.Context()
        dealer = context.socket(zmq.DEALER)
        dealer.setsockopt(zmq.IDENTITY, b"worker-1")
        dealer.connect(router.endpoint)
        try:
            for i in range(3000):
                if i % 500 == 250:
                    dealer.send_multipart([b"one", b"two", b"three"])  # extra frames: a defect
                else:
                    dealer.send(encode(Result(i, i, 0.5, 0.25, 1, 2, []))[0])
            for _ in range(600):
                if len(got) == 3000:
                    break
                await asyncio.sleep(0.05)
        finally:
            dealer.close(0)
            context.term()
            router.close()

    run(main())
    assert len(got) == 3000 and {identity for identity, _ in got} == {b"worker-1"}
    for i, (_, message) in enumerate(got):
        if i % 500 == 250:
            assert isinstance(message, ProtocolError)
        else:
            assert type(message) is Result and message.id == i == message.value


def test_a_wakeup_with_nothing_to_read_is_quiet(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    got: list[tuple[bytes, Any]] = []

    async def main() -> None:
        router = _router(tmp_path, got)
        router.start(asyncio.get_running_loop())
        context = zmq.Context()
        dealer = context.socket(zmq.DEALER)
        dealer.connect(router.endpoint)
        try:
            with caplog.at_level(logging.DEBUG, logger="coordinator._core.transport"):
                for _ in range(5):
                    router._on_readable()  # as the loop calls it: nothing is waiting
            assert caplog.records == [] and router.received == 0
            dealer.send(encode(Result(1, "x", 0.5, 0.25, 1, 2, []))[0])
            for _ in range(200):
                if got:
                    break
                await asyncio.sleep(0.05)
        finally:
            dealer.close(0)
            context.term()
            router.close()

    run(main())
    assert [message.value for _, message in got] == ["x"]
