"""uvicorn's httptools (C, llhttp) HTTP/1.1 protocol, with the bounds a hostile client needs.

h11 (pure Python) cost ~0.08 ms of CPU per request here, most of what the bare HTTP hop costs; httptools
parses in C. Two kinds of bound are added:

- **a request head's size.** h11 refused a head larger than ``h11_max_incomplete_event_size`` before
  buffering more of it; httptools keeps an unfinished header in memory however long it grows. So once
  more than ``max_head_bytes`` have arrived in whole chunks of a head that is still not complete, the
  request is answered ``431`` and the connection closed (at most the limit plus two socket reads are
  ever held for one head). A complete head is measured exactly by the gate (``gate.py``).
- **what a connection may hold** (``connections.py``): each connection is counted in the
  :class:`~coordinator.service.connections.ConnectionTable` when it is made (or refused ``503`` there),
  and tells the table's sweep where it is: waiting for a head, receiving a body, or between requests;
  a head or body that is late is answered ``408`` and the connection closed.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from coordinator.service.connections import ConnectionTable

__all__ = ["BoundedHttpTools", "bounded_httptools"]

Phase = Literal["head", "body", "done"]


def _answer(status: bytes, error: str, retry_after: bool = False) -> bytes:
    """A whole response written by the protocol itself (no handler runs), ending the connection."""
    body = json.dumps({"error": error}).encode()
    head = b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\ncontent-length: %d\r\n" % len(body)
    retry = b"retry-after: 1\r\n" if retry_after else b""
    return head + retry + b"connection: close\r\n\r\n" + body


class BoundedHttpTools(HttpToolsProtocol):
    """:class:`HttpToolsProtocol` bounded in head size and, with a :attr:`table`, in time and number."""

    max_head_bytes: int = 16 << 10
    table: ConnectionTable | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # between a message's first byte and the end of its headers
        self._began = False  # a message began in the chunk being fed
        self._head_bytes = 0
        self.phase: Phase = "head"  # waiting for a head (or reading one), reading a body, or between
        self.since = 0.0  # loop time the phase began
        self._partial = False  # part of a head has arrived
        self._stalled = 0.0  # how long the client has not been reading our reply
        self._refused = False
        if self.table is not None:  # uvicorn arms this after each reply; its Config types it int
            self.timeout_keep_alive = self.table.limits.idle_timeout_secs  # type: ignore[assignment]

    # -- connection accounting ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        table = self.table
        if table is not None:
            self.since = self.loop.time()
            sock = transport.get_extra_info("socket")
            fd = sock.fileno() if sock is not None else -1
            refusal = table.admit(self, transport.get_extra_info("peername"), fd)
            if refusal is not None:
                self._refused = True
                transport.write(_answer(b"503 Service Unavailable", refusal, retry_after=True))
                transport.close()
                return
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            return
        if self.table is not None:
            self.table.forget(self)
        super().connection_lost(exc)

    @property
    def holds_request(self) -> bool:
        """A request is being received or answered on this connection."""
        cycle = self.cycle
        return (
            self.phase == "body" or bool(self.pipeline) or (cycle is not None and not cycle.response_complete)
        )

    def evict(self) -> None:
        """Closed to make room for a new connection (it holds no request)."""
        if not self.transport.is_closing():
            self.transport.close()

    def expire(self, now: float, elapsed: float) -> None:
        """Cut the connection if its head or its body is late, or its client stopped reading our reply."""
        transport, limits = self.transport, self.table.limits  # type: ignore[union-attr]
        self._stalled = self._stalled + elapsed if self.flow.write_paused else 0.0
        if self._stalled > limits.body_timeout_secs:  # even once closing: a close waits for the reply
            self._end_request(None)
            transport.abort()
            return
        if transport.is_closing():
            return
        if self.flow.read_paused:  # the service's own doing (a pipelined request waits): not counted
            self.since += elapsed
        elif self.phase == "head" and now - self.since > limits.header_timeout_secs:
            if self._partial:
                late = f"request head not received within {limits.header_timeout_secs:g} s"
                transport.write(_answer(b"408 Request Timeout", late))
            transport.close()
        elif self.phase == "body" and now - self.since > limits.body_timeout_secs:
            self._end_request(f"request body not received within {limits.body_timeout_secs:g} s")
            transport.close()

    def _end_request(self, late: str | None) -> None:
        """End the request being received or answered (its handler sees a disconnect), answering
        ``late`` if it was not answered yet."""
        cycle = self.cycle
        if cycle is None:
            return
        if late is not None and not cycle.response_started:
            self.transport.write(_answer(b"408 Request Timeout", late))
        cycle.disconnected = True  # the handler's reply, if it comes, is dropped
        cycle.message_event.set()

    # -- where the connection is ----------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._in_head and self._head_bytes > self.max_head_bytes:
            self._refuse_head()
            return
        self._began = False
        super().data_received(data)
        if self._in_head and not self._began:  # a whole chunk of an unfinished head
            self._head_bytes += len(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._began, self._head_bytes = True, True, 0
        if self.phase != "head":  # a new head on a kept-alive connection: its own time from now
            self.phase, self.since = "head", self.loop.time()
        self._partial = True

    def on_headers_complete(self) -> None:
        self._in_head = self._partial = False
        self.phase, self.since = "body", self.loop.time()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self.phase = "done"
        super().on_message_complete()

    def _refuse_head(self) -> None:
        if self.transport.is_closing():
            return
        self.transport.write(_answer(b"431 Request Header Fields Too Large", "request headers too large"))
        self.transport.close()


def bounded_httptools(max_head_bytes: int, table: ConnectionTable | None = None) -> type[BoundedHttpTools]:
    """The protocol class uvicorn's ``http=`` takes, bound to ``max_head_bytes`` and ``table``."""
    return type("BoundedHttpTools", (BoundedHttpTools,), {"max_head_bytes": max_head_bytes, "table": table})
