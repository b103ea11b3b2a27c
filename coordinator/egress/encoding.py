"""Content-Encoding decoding of response bodies, done here rather than by the HTTP library.

The transport reads raw bytes (``auto_decompress=False``) and this module decodes them, so what a
script receives does not depend on which optional codecs happen to be installed: ``gzip`` and
``deflate`` (zlib-wrapped or raw) are decoded, any other coding (``br``, ``zstd``, unknown names) is
passed through as it arrived and then judged by the "is this really text?" check (``body.py``).
These are the bodies egress returned when it ran on httpx without brotli or zstandard; only those
two codings are advertised in ``Accept-Encoding`` (``ACCEPT_ENCODING``).

A body that claims gzip/deflate but does not decompress is a failed body read (``BodyDecodeError``,
a transport error for the script, docs/scripts/host-functions.md#transport).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

from coordinator.egress.errors import BodyDecodeError

__all__ = ["ACCEPT_ENCODING", "BodyDecodeError", "BodyDecoder"]

ACCEPT_ENCODING = "gzip, deflate"


class _Gzip:
    def __init__(self) -> None:
        self._inner = zlib.decompressobj(zlib.MAX_WBITS | 16)

    def decode(self, data: bytes) -> bytes:
        return self._inner.decompress(data)

    def flush(self) -> bytes:
        return self._inner.flush()


class _Deflate:
    """zlib-wrapped deflate, or raw deflate when the first bytes say so (servers send both)."""

    def __init__(self) -> None:
        self._first = True
        self._inner = zlib.decompressobj()

    def decode(self, data: bytes) -> bytes:
        first, self._first = self._first, False
        try:
            return self._inner.decompress(data)
        except zlib.error:
            if not first:
                raise
            self._inner = zlib.decompressobj(-zlib.MAX_WBITS)
            return self._inner.decompress(data)

    def flush(self) -> bytes:
        return self._inner.flush()


_CODECS: dict[str, type[_Gzip] | type[_Deflate]] = {"gzip": _Gzip, "deflate": _Deflate}


class BodyDecoder:
    """Decodes one response body, chunk by chunk, per its Content-Encoding header values."""

    def __init__(self, content_encodings: Iterable[str]) -> None:
        names = [part.strip().lower() for value in content_encodings for part in value.split(",")]
        # Codings are listed in the order they were applied: undo them last first.
        self._stages = [_CODECS[name]() for name in reversed(names) if name in _CODECS]

    def decode(self, data: bytes) -> bytes:
        """The decoded bytes of one raw chunk (possibly empty while a codec buffers)."""
        try:
            for stage in self._stages:
                data = stage.decode(data)
        except zlib.error as exc:
            raise BodyDecodeError(str(exc)) from exc
        return data

    def flush(self) -> bytes:
        """Whatever the codecs still hold at the end of the body."""
        data = b""
        try:
            for stage in self._stages:
                data = stage.decode(data) + stage.flush()
        except zlib.error as exc:
            raise BodyDecodeError(str(exc)) from exc
        return data
