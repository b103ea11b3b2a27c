"""uvicorn's httptools (C, llhttp) HTTP/1.1 protocol, with the bound on a request's head that h11 had.

h11 (pure Python) cost ~0.08 ms of CPU per request here, most of what the bare HTTP hop costs; httptools
parses in C. h11 refused a head larger than ``h11_max_incomplete_event_size`` before buffering more of
it; httptools has no such bound (it keeps an unfinished header in memory however long it grows), so this
protocol keeps a bound: once more than ``max_head_bytes`` have arrived in whole chunks of a head that
is still not complete, the request is answered ``431`` and the connection closed (so at most the limit
plus two socket reads are ever held for one head). A complete head is measured exactly by the gate
(``gate.py``) against the same limit; this only stops a head that never ends from growing memory.
"""

from __future__ import annotations

import json
from typing import Any, Final

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["BoundedHttpTools", "bounded_httptools"]

_TOO_BIG: Final = json.dumps({"error": "request headers too large"}).encode()


class BoundedHttpTools(HttpToolsProtocol):
    """:class:`HttpToolsProtocol` that stops reading a request head past :attr:`max_head_bytes`."""

    max_head_bytes: int = 16 << 10

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # between a message's first byte and the end of its headers
        self._began = False  # a message began in the chunk being fed
        self._head_bytes = 0

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

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

    def _refuse_head(self) -> None:
        if self.transport.is_closing():
            return
        head = (
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n" % len(_TOO_BIG)
        )
        self.transport.write(head + _TOO_BIG)
        self.transport.close()


def bounded_httptools(max_head_bytes: int) -> type[BoundedHttpTools]:
    """The protocol class uvicorn's ``http=`` takes, bound to ``max_head_bytes``."""
    return type("BoundedHttpTools", (BoundedHttpTools,), {"max_head_bytes": max_head_bytes})
