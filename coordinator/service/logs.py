"""Structured logs for ``rhaipool serve --log-json``: one JSON object per line on stderr.

Each record carries the fields a caller passed in ``extra`` (the call log: call number, request number,
tenant, operation, script name and sha256, status, duration). Script output never reaches these logs
raw: with ``--log-json`` it is logged capped, escaped and tagged (``observer.py``), and not at all
otherwise.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, Final

__all__ = ["JsonFormatter", "configure"]

_STANDARD: Final = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "msg", ...extra}``, control characters escaped by JSON."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=repr)


def configure(*, as_json: bool) -> None:
    """Warnings and up as text; with ``as_json``, JSON lines and the per-call log at INFO."""
    handler = logging.StreamHandler(sys.stderr)
    if as_json:
        handler.setFormatter(JsonFormatter())
        logging.getLogger("rhaipool.service.calls").setLevel(logging.INFO)
        logging.getLogger("rhaipool.service.scripts").setLevel(logging.INFO)
    else:
        formatter = logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s")
        formatter.converter = time.gmtime
        handler.setFormatter(formatter)
    logging.basicConfig(level=logging.WARNING, handlers=[handler], force=True)
