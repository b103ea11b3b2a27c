"""Rust's idea of text that both sides need to copy exactly: the worker's helpers (``trim``,
``is_empty``, SSE lines) and the coordinator (region entries, provider metadata) strip the same set.
"""

from __future__ import annotations

from typing import Final

__all__ = ["RUST_WHITESPACE"]

RUST_WHITESPACE: Final = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
"""Unicode ``White_Space``, what Rust's ``char::is_whitespace`` and ``str::trim`` use (Python's
``str.isspace`` and ``strip()`` also take U+001C..U+001F)."""
