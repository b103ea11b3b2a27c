"""The tenant every layer of the coordinator agrees on: the one a call, a load, an egress request or a
provider belongs to when nobody names one (single-user library use)."""

from __future__ import annotations

from typing import Final

__all__ = ["DEFAULT_TENANT"]

DEFAULT_TENANT: Final = "default"
"""The tenant of single-user library use: every entry point that takes ``tenant=`` defaults to it."""
