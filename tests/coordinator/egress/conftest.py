"""Loopback servers: one holding its answers open until the test lets them go, one writing raw bytes."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from coordinator.bench.standin import Reply, Request, StandinServer


class Gate:
    """Answers of ``/hold/<n>`` send half their body, then wait here until :meth:`open`."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def open(self) -> None:
        self.event.set()

    def close(self) -> None:
        self.event.clear()

    def body(self, request: Request) -> Reply:
        """``/hold/<n>[?declared=1]``: n bytes of text, the second half after the gate opens."""
        n = int(request.path.split("/")[2])
        headers = {"Content-Type": "text/plain"}
        if request.query.get("declared"):
            headers["Content-Length"] = str(n)
        return Reply(200, headers, stream=self._halves(b"x" * (n // 2), b"x" * (n - n // 2)))

    def event_stream(self, request: Request) -> Reply:
        """``/hold-sse/<n>``: one SSE event of about n bytes, its terminator after the gate opens."""
        n = int(request.path.split("/")[2])
        return Reply(
            200, {"Content-Type": "text/event-stream"}, stream=self._halves(b"data: " + b"x" * n, b"\n\n")
        )

    def _halves(self, first: bytes, second: bytes) -> Iterator[bytes]:
        yield first
        self.event.wait(30)
        yield second


@pytest.fixture
def gate() -> Gate:
    return Gate()


@pytest.fixture
def held(gate: Gate) -> Iterator[StandinServer]:
    """The server, with the gate's routes; the gate is opened at teardown so no thread hangs."""
    server = StandinServer()
    server.route("GET", "/hold/", gate.body)
    server.route("POST", "/hold-sse/", gate.event_stream)
    with server:
        try:
            yield server
        finally:
            gate.open()


@pytest.fixture
def raw_server() -> Iterator[Any]:
    """``raw_server(reply)``: a port whose connections read the request, write ``reply`` and close."""
    sockets: list[socket.socket] = []

    def start(reply: bytes) -> int:
        listener = socket.create_server(("127.0.0.1", 0))
        sockets.append(listener)

        def serve() -> None:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                with conn:
                    conn.recv(65536)
                    conn.sendall(reply)

        threading.Thread(target=serve, daemon=True).start()
        return int(listener.getsockname()[1])

    yield start
    for listener in sockets:
        listener.close()
