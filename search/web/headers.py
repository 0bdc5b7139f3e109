"""Headers every response gets (no sniffing, no referrer, the page's CSP), and the time each
request arrived (a search reports how long it waited for a request thread).

A plain ASGI middleware: Starlette's ``@app.middleware("http")`` runs each request's
response through a task group and a memory stream on the event loop, work that every
thumbnail under load paid for and that delayed every other request on the loop.
"""

from __future__ import annotations

import time

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# The page needs nothing from elsewhere; /docs loads Swagger UI from a CDN, so it is exempt.
CSP = "default-src 'self'; img-src 'self' data:; object-src 'none'; frame-ancestors 'none'; base-uri 'none'"
_ARRIVED = "wherein.arrived"


def arrived(request: Request) -> float | None:
    """When the request reached the app (time.perf_counter()); None outside the middleware."""
    return request.scope.get(_ARRIVED)


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope[_ARRIVED] = time.perf_counter()
        csp = not scope["path"].startswith(("/docs", "/redoc"))

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.setdefault("X-Content-Type-Options", "nosniff")
                headers.setdefault("Referrer-Policy", "no-referrer")
                if csp:
                    headers.setdefault("Content-Security-Policy", CSP)
            await send(message)

        await self.app(scope, receive, with_headers)
