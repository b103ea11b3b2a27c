"""The per-call data plane dispatched straight to its route function, ahead of Starlette's router.

A render, a write or an inference is the service's whole per-call cost beyond the pool, and Starlette
spent ~9 us of CPU on each (a third of the service's own layers) before the route function ran: its
app, two error middlewares, the router trying each route's regex, the route's own exception wrapper,
three ``send`` wrappers. This lane
parses the path once, sets what the router would have set in the scope (``app``, ``router``,
``endpoint``, ``path_params``) and maps an exception to the same handler the router's middlewares
would have used, so status codes, bodies and headers are the router's; any other request (another
method or path, a ``root_path``) goes to the router untouched.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Final

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

__all__ = ["FastLane", "Handler"]

Endpoint = Callable[[Request], Awaitable[Response]]
Handler = Callable[[Request, Exception], Awaitable[Response]]
_POST: Final = "POST"


class FastLane:
    """ASGI app: ``POST /api/{area}/{param}/{operation}`` of the given routes straight to the route; the
    rest to ``router``. ``handlers`` is the router's exception table (``Exception`` answers a 500 and the
    exception propagates, as Starlette's ``ServerErrorMiddleware`` does, so the server logs it)."""

    def __init__(
        self, router: Starlette, handlers: Mapping[type[Exception], Handler], routes: Iterable[Route]
    ) -> None:
        self.router = router
        self._handlers = dict(handlers)
        self._lanes: dict[tuple[str, str], tuple[Endpoint, str]] = {}
        for route in routes:
            _, api, area, param, operation = route.path.split("/")
            assert api == "api" and param[0] == "{" and param[-1] == "}" and route.methods == {_POST}
            self._lanes[(area, operation)] = (route.endpoint, param[1:-1])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        lane = self._lane(scope)
        if lane is None:
            await self.router(scope, receive, send)
            return
        endpoint, params = lane
        scope["app"] = scope["router"] = self.router
        scope["endpoint"], scope["path_params"] = endpoint, params
        request = Request(scope, receive, send)
        try:
            response = await endpoint(request)
        except Exception as exc:  # noqa: BLE001 - mapped as the router's middlewares map it
            await self._answer_error(request, exc, send)
            return
        await response(scope, receive, send)

    def _lane(self, scope: Scope) -> tuple[Endpoint, dict[str, str]] | None:
        """The route and its path parameter, or None for anything the router must decide."""
        if scope["type"] != "http" or scope["method"] != _POST or scope.get("root_path"):
            return None
        parts = scope["path"].split("/")
        if len(parts) != 5 or parts[1] != "api" or not parts[3]:
            return None
        found = self._lanes.get((parts[2], parts[4]))
        if found is None:
            return None
        endpoint, name = found
        return endpoint, {name: parts[3]}

    async def _answer_error(self, request: Request, exc: Exception, send: Send) -> None:
        handler = next((self._handlers[c] for c in type(exc).__mro__ if c in self._handlers), None)
        if handler is None:
            raise exc
        response = await handler(request, exc)
        await response(request.scope, request.receive, send)
        if self._handlers.get(Exception) is handler:  # the 500: the server logs it, as behind the router
            raise exc
        exc.__traceback__ = None  # as Starlette: a reused exception would accumulate tracebacks
