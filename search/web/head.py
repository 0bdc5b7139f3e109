"""HEAD on every GET route (RFC 9110 section 9.3.2): the GET's status and headers, no body.

FastAPI routes a GET route for GET alone, so a HEAD (a link checker's, a download
manager's before it asks for ranges) got 405. This middleware runs a HEAD as the GET it
stands for and sends only the response's start. A route that would read much to make a
body (a video) asks ``is_head`` and reads nothing.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

_HEAD = "wherein.head"


def is_head(request: Request) -> bool:
    """Whether this GET is a HEAD in fact (its body will not be sent)."""
    return bool(request.scope.get(_HEAD))


class HeadAsGet:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return
        # A copy: the server keeps its own scope, and knows the request was a HEAD.
        scope = {**scope, "method": "GET", _HEAD: True}
        ended = False

        async def start_only(message: Message) -> None:
            nonlocal ended
            if message["type"] == "http.response.body":
                if ended:
                    return
                ended = True
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        await self.app(scope, receive, start_only)
