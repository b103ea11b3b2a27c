"""Fixtures: one real service per module (``tests/support/service_fixtures.py``)."""

from __future__ import annotations

from postgres_server import postgres
from service_fixtures import no_stray_children, service, standin

__all__ = ["no_stray_children", "postgres", "service", "standin"]
