"""The standard fronts of ``rhaipool serve``: the OpenAI Chat Completions and Anthropic Messages wire
formats over a tenant's provider scripts, so a runtime or SDK uses them by changing its base URL.

    openai.py     POST /v1/chat/completions, GET /v1/models
    anthropic.py  POST /v1/messages, POST /v1/messages/count_tokens
    common.py     model names, provider lookup, failures by status, streams, the models cache
    schemas.py    the request bodies (validation and openapi.json)
    gate.py       x-api-key, and every /v1 error in the API's own shape

Each route translates its body into the provider contract's request and calls the runtime the native
``/api/providers/{name}/…`` routes call; only the translation is the front's own.
"""

from __future__ import annotations

from typing import Final

from starlette.routing import Route

from coordinator.service.front.anthropic import ROUTES_ANTHROPIC
from coordinator.service.front.common import ModelsCache
from coordinator.service.front.gate import FrontGate
from coordinator.service.front.openai import ROUTES_OPENAI

__all__ = ["ROUTES", "FrontGate", "ModelsCache"]

ROUTES: Final = [
    Route(path, handler, methods=[method]) for path, handler, method in (*ROUTES_OPENAI, *ROUTES_ANTHROPIC)
]
"""The fronts' routes (after the native inference routes, before the regions': the router tries
routes in order, coordinator/service/app.py)."""
