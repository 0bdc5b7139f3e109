"""How a route reaches the app's ServeSession (search/service/serve.py).

One session per app (create_app opens it, the lifespan closes it), kept on
``app.state.wherein``; a route takes it as a parameter typed ``Web``, a FastAPI
dependency that reads it from the request's app, so the route modules hold no
globals and two apps in one process (the tests make many) never share one.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from wherein.search.service.serve import ServeSession


async def web_state(request: Request) -> ServeSession:
    # async: a plain lookup, run on the event loop rather than costing a threadpool hop
    return request.app.state.wherein


Web = Annotated[ServeSession, Depends(web_state)]
