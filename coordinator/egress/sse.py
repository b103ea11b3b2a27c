"""Server-sent-event framing exactly as the reference broker does it
(docs/scripts/host-functions.md#transport).

Events are split on ``"\\n\\n"`` only (a CRLF-only stream is one event until the end), each event
contributes its first non-empty ``data:`` line, ``[DONE]`` ends the stream and an unterminated tail is
flushed at the end. One improvement: a multi-byte character split across two network reads is kept
(the reference skipped any read that was not valid UTF-8 on its own); a read that holds truly
invalid UTF-8 is still skipped.
"""

from __future__ import annotations

import codecs

__all__ = ["SseFramer"]


class SseFramer:
    """Feed raw bytes, get data payloads; ``done`` turns true at ``[DONE]``."""

    def __init__(self) -> None:
        self._buffer = ""
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self.done = False

    @property
    def buffered(self) -> int:
        """Characters held while waiting for the end of an event."""
        return len(self._buffer)

    def _decode(self, data: bytes) -> str:
        """Text of one read; a read valid on its own is never lost to an unfinished character before it."""
        try:
            return self._decoder.decode(data)
        except UnicodeDecodeError:
            pass
        # The held-back bytes were not completed by this read: drop them, and judge the read alone
        # (the reference's rule: skip a read only when it is not valid UTF-8 by itself).
        self._decoder.reset()
        try:
            return self._decoder.decode(data)
        except UnicodeDecodeError:
            self._decoder.reset()
            return ""

    @staticmethod
    def _payload(event: str) -> str | None:
        for line in event.split("\n"):
            if line.startswith("data:"):
                value = line[5:].strip()
                if value:
                    return value
        return None

    def _take(self, events: list[str]) -> list[str]:
        out = []
        for event in events:
            payload = self._payload(event)
            if payload is None:
                continue
            if payload == "[DONE]":
                self.done = True
                break
            out.append(payload)
        return out

    def feed(self, data: bytes) -> list[str]:
        """Payloads completed by this read (nothing once ``done``)."""
        if self.done:
            return []
        self._buffer += self._decode(data)
        if "\n\n" not in self._buffer:
            return []
        *events, self._buffer = self._buffer.split("\n\n")
        return self._take(events)

    def close(self) -> list[str]:
        """Flush the unterminated final event at end of stream."""
        if self.done:
            return []
        tail, self._buffer = self._buffer, ""
        return self._take([tail]) if tail else []
