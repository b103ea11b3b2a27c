"""The service's log formats: text (the default) and ``--log-json``, both safe from what tenants write.

Tenants control much of what gets logged: region, script, provider and node names, the messages their
scripts throw, their scripts' output. Any of it could carry a newline that forges a whole log line, a
terminal escape, or a megabyte per call. So the formatters, not the call sites, make it safe, for every
logger that reaches the root handler (the service's, the library's, uvicorn's and asyncio's):

- every argument of a message and every ``extra`` field is capped at :data:`MAX_VALUE_CHARS`, and the
  whole message at :data:`MAX_MESSAGE_CHARS`, with a marker saying how many characters were cut;
- every character that is not printable (newlines, ESC, C1 controls, bidi controls, line separators) is
  written as an escape (``\\n``, ``\\u001b``), so one record is one line of text whatever it quotes;
- a traceback keeps its lines, but the exception messages in it are escaped and capped the same way.

And a message any client can cause once per request (uvicorn's "Invalid HTTP request received.") is let
through once per interval by :class:`Throttle`, with the count of those held back.

With ``--log-json`` each record is one JSON object per line carrying the fields a caller passed in
``extra`` (the call log: call number, request number, tenant, operation, script name and sha256, status,
duration); script output is logged there only (``observer.py``).
"""

from __future__ import annotations

import json
import logging
import sys
import time
import traceback
from collections.abc import Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any, Final

__all__ = [
    "MAX_MESSAGE_CHARS",
    "MAX_TRACEBACK_CHARS",
    "MAX_VALUE_CHARS",
    "JsonFormatter",
    "TextFormatter",
    "Throttle",
    "bounded",
    "configure",
    "printable",
    "safe_message",
]

MAX_VALUE_CHARS: Final = 2048
"""One value a message quotes (a name, a thrown message, an ``extra`` field)."""
MAX_MESSAGE_CHARS: Final = 4096
"""A whole message, quotes included."""
MAX_TRACEBACK_CHARS: Final = 16384

_STANDARD: Final = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "color_message",  # uvicorn's terminal copy of its message
}
_SHORT: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_PLAIN: Final = (int, float, type(None))
_MAX_ITEMS: Final = 100
_ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]


def _escape(char: str) -> str:
    code = ord(char)
    return _SHORT.get(char) or (f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")


def printable(text: str) -> str:
    """``text`` with every non-printable character (newlines, ESC, bidi controls, ...) escaped."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def bounded(text: str, limit: int = MAX_VALUE_CHARS) -> str:
    """``text`` escaped (:func:`printable`) and at most ``limit`` characters long, plus a marker of
    how many characters were cut."""
    head = text[:limit]
    if head.isprintable():
        kept = len(head)
    else:  # escapes lengthen it: keep what fits in ``limit`` once escaped
        pieces, size, kept = [], 0, 0
        for char in head:
            piece = char if char.isprintable() else _escape(char)
            if size + len(piece) > limit:
                break
            pieces.append(piece)
            size += len(piece)
            kept += 1
        head = "".join(pieces)
    cut = len(text) - kept
    return head if cut == 0 else head + _cut_marker(cut)


def _cut_marker(cut: int) -> str:
    return f"…[{cut} more characters cut]"


def _lines(text: str, limit: int) -> str:
    """Several lines of the service's own text (a traceback), each escaped, all capped at ``limit``."""
    safe = "\n".join(printable(line) for line in text.rstrip("\n").split("\n"))
    return safe if len(safe) <= limit else safe[:limit] + _cut_marker(len(safe) - limit)


class _Quoted:
    """A message argument, shown (``%s`` or ``%r``) escaped and capped."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __str__(self) -> str:
        value = self.value
        return bounded(value if isinstance(value, str) else str(value))

    def __repr__(self) -> str:
        value = self.value
        if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:  # repr of a megabyte, then cut: no
            return bounded(repr(value[:MAX_VALUE_CHARS])) + _cut_marker(len(value) - MAX_VALUE_CHARS)
        return bounded(repr(value))


def _quoted(value: Any) -> Any:
    return value if isinstance(value, _PLAIN) else _Quoted(value)


def safe_message(record: logging.LogRecord) -> str:
    """The record's message with its arguments quoted safely, escaped and capped as a whole."""
    args = record.args
    msg = record.msg if isinstance(record.msg, str) else str(record.msg)
    if args:
        try:
            if isinstance(args, Mapping):
                msg = msg % {k: _quoted(v) for k, v in args.items()}
            else:
                msg = msg % tuple(_quoted(a) for a in args)
        except (TypeError, ValueError, KeyError):  # a call site's format bug: still one safe line
            msg = f"{msg} {tuple(map(_quoted, args if isinstance(args, tuple) else (args,)))!r}"
    return bounded(msg, MAX_MESSAGE_CHARS)


def _exceptions(te: traceback.TracebackException) -> Iterator[traceback.TracebackException]:
    """``te`` and every exception chained to it (cause, context, group members)."""
    seen: set[int] = set()
    todo = [te]
    while todo:
        one = todo.pop()
        if id(one) in seen:
            continue
        seen.add(id(one))
        yield one
        todo += [e for e in (one.__cause__, one.__context__) if e is not None]
        todo += getattr(one, "exceptions", None) or []


def safe_traceback(exc_info: _ExcInfo) -> str:
    """The traceback with every exception message (and note) in it escaped and capped.

    The frames are the service's own code; only the messages quote what a tenant sent. If this Python's
    :class:`traceback.TracebackException` keeps them elsewhere, the whole text is escaped onto one line.
    """
    te = traceback.TracebackException(*exc_info)
    try:
        for one in _exceptions(te):
            one._str = bounded(one._str)  # type: ignore[attr-defined]
            notes = getattr(one, "__notes__", None)
            if notes:
                one.__notes__ = [bounded(str(n)) for n in notes]
        return _lines("".join(te.format()), MAX_TRACEBACK_CHARS)
    except AttributeError:
        return bounded("".join(traceback.format_exception(*exc_info)), MAX_TRACEBACK_CHARS)


class TextFormatter(logging.Formatter):
    """``TIME LOGGER LEVEL message`` in UTC, one line per record (a traceback adds its own lines)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(name)s %(levelname)s %(message)s")
        self.converter = time.gmtime

    def format(self, record: logging.LogRecord) -> str:
        record.message = safe_message(record)
        record.asctime = self.formatTime(record, self.datefmt)
        text = self.formatMessage(record)
        if record.exc_info and record.exc_info[1] is not None:
            text += "\n" + safe_traceback(record.exc_info)
        if record.stack_info:
            text += "\n" + _lines(record.stack_info, MAX_TRACEBACK_CHARS)
        return text


def _field(value: Any) -> Any:
    """An ``extra`` field made safe for a log line: strings escaped and capped, containers per item."""
    if isinstance(value, str):
        return bounded(value)
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, (list, tuple)):
        items: list[Any] = [v if isinstance(v, _PLAIN) else bounded(str(v)) for v in value[:_MAX_ITEMS]]
        if len(value) > _MAX_ITEMS:
            items.append(f"…[{len(value) - _MAX_ITEMS} more items cut]")
        return items
    return bounded(repr(value))


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "msg", ...extra}``: one object per line, every string made safe."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": safe_message(record),
        }
        out.update({k: _field(v) for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info and record.exc_info[1] is not None:
            out["exc"] = safe_traceback(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=repr)


class Throttle(logging.Filter):
    """Lets each of ``messages`` (a record's unformatted ``msg``) through once per ``interval`` seconds;
    the one let through says how many were held back since the last."""

    def __init__(self, messages: Iterable[str], interval: float = 10.0) -> None:
        super().__init__()
        self.messages, self.interval = frozenset(messages), interval
        self._last: dict[str, tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.msg
        if not isinstance(msg, str) or msg not in self.messages:
            return True
        now = time.monotonic()
        at, held = self._last.get(msg, (-self.interval, 0))
        if now - at < self.interval:
            self._last[msg] = (at, held + 1)
            return False
        self._last[msg] = (now, 0)
        if held:
            record.msg = f"{msg} (and {held} more like it in the last {now - at:.0f} s)"
        return True


def configure(*, as_json: bool) -> None:
    """Warnings and up as text; with ``as_json``, JSON lines and the per-call log at INFO."""
    handler = logging.StreamHandler(sys.stderr)
    if as_json:
        handler.setFormatter(JsonFormatter())
        logging.getLogger("rhaipool.service.calls").setLevel(logging.INFO)
        logging.getLogger("rhaipool.service.scripts").setLevel(logging.INFO)
    else:
        handler.setFormatter(TextFormatter())
    logging.basicConfig(level=logging.WARNING, handlers=[handler], force=True)
