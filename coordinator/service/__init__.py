"""``rhaipool serve``: the pool as an HTTP service (JSON, Server-Sent Events), one bearer token per tenant.

An application on top of the library: it imports ``_core``, regions, providers and egress; nothing in
those imports it (``tests/test_layering.py``). Modules: ``config`` (the ``[serve]`` and ``[tenants]``
tables), ``auth`` (tokens), ``storage`` (SQLite), ``state`` (the running service), ``regions`` (open
regions and their persistence), ``validation``, ``http`` (helpers), ``routes_*`` (the API), ``gate``
(draining and metrics per call), ``metrics``, ``app`` (the ASGI app), ``server`` (uvicorn and signals).
"""

from __future__ import annotations

from coordinator.service.app import create_app
from coordinator.service.config import ServeConfig, ServiceConfigError, load_service_config
from coordinator.service.state import Service

__all__ = ["ServeConfig", "Service", "ServiceConfigError", "create_app", "load_service_config"]
