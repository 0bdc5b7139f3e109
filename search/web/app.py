"""The web app: a FastAPI JSON API over one index, and the static page that uses it.

This module only builds the app (state, middleware, error handlers, the routers of
routes/, the static files, the OpenAPI document); the routes live in routes/, one
module per concern, and reach the shared state through state.py's ``Web`` parameter.

    from wherein.search.web.app import create_app
    app = create_app("~/.local/share/wherein/index")      # then: uvicorn.run(app, port=8765)

API (all GET, HEAD too, all read-only apart from INDEX/cache; JSON bodies follow
schemas/api.*.schema.json and hit.schema.json, errors schemas/api.error.schema.json):

- /api/status                      index counts, models, caches
- /api/search?q=&like=&unlike=&min_probability=&under=&taken=&camera=&near=&sort=&page=&per_page=
- /api/hit/{id}                    one indexed file's catalog record
- /api/thumb/{id}, /api/image/{id} JPEG thumbnail / large preview (cached)
- /api/mask/{id}?prompt=           CLIPSeg mask summary (bbox, area, score) + URLs
- /api/mask/{id}/overlay|mask?prompt=  the overlay JPEG / binary mask PNG
- /api/video/{id}                  a video's bytes, by HTTP range
- /api/folders                     folders holding indexed files, for the folder filter

Files are addressed by catalog id only, and served only while the file is still the
indexed content (indexer/indexed.py), with an ETag and Last-Modified. The app writes
nothing outside INDEX/cache, which is kept under a size limit (search/cache/limit.py;
512 MB unless ``cache_mb`` / WHEREIN_CACHE_MB say otherwise). Every error that reaches
the app, a refused Host header included, is a JSON body ``{"error", "status"}``. Commits
made by `wherein index` while the app runs show up in the next search, without a restart.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from wherein.search.service.serve import (
    DEFAULT_PREFETCH_MASKS,
    MODEL_TEMPLATE,
    WORK_THREADS,
    ServeSession,
    Template,
)
from wherein.search.web import schemas
from wherein.search.web.head import HeadAsGet
from wherein.search.web.headers import SecurityHeaders
from wherein.search.web.hosts import LOOPBACK_HOSTS, TrustedHosts, host_name
from wherein.search.web.responses import add_error_handlers
from wherein.search.web.routes import ROUTERS
from wherein.search.web.routes.pages import STATIC_DIR

__all__ = [
    "LOOPBACK_HOSTS",
    "WORK_THREADS",
    "ServeSession",
    "TrustedHosts",
    "create_app",
    "host_name",
]


def create_app(
    index_dir: str | Path | None = None,
    models_dir: str | Path | None = None,
    template: str | Template | None = MODEL_TEMPLATE,
    allowed_hosts: list[str] | None = None,
    cache_mb: float | None = None,
    prefetch_masks: int = DEFAULT_PREFETCH_MASKS,
) -> FastAPI:
    """The app over one index (opened now: a missing index fails here, not on the first request).

    allowed_hosts: Host header values accepted; default the loopback names, which
    stops DNS-rebinding pages from reading the API. ["*"] accepts any.
    cache_mb: size limit of INDEX/cache [env WHEREIN_CACHE_MB; default 512].
    prefetch_masks: after a search, make the masks of this many first hits in the
    background (the page opens a hit on its mask); 0: only on request.
    """
    state = ServeSession(index_dir, models_dir, template, cache_mb, prefetch_masks)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        yield
        state.close()

    app = FastAPI(
        title="wherein",
        summary="Find images by what is in them, and see where in each image the match is.",
        version=_version(),
        lifespan=lifespan,
    )
    app.state.wherein = state  # what the routes' `Web` parameter reads (state.py)
    app.add_middleware(TrustedHosts, allowed=allowed_hosts or LOOPBACK_HOSTS)

    app.add_middleware(SecurityHeaders)  # outside TrustedHosts: its refusals get them too

    app.add_middleware(HeadAsGet)  # outermost: every layer inside sees the GET it stands for
    add_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    _add_schemas_to_openapi(app)
    return app


def _add_schemas_to_openapi(app: FastAPI) -> None:
    def openapi() -> dict:
        if app.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            doc = get_openapi(
                title=app.title,
                version=app.version,
                summary=app.summary,
                routes=app.routes,
                description=(__doc__ or "").split("\n\n", 1)[0],
            )
            doc.setdefault("components", {}).setdefault("schemas", {}).update(
                schemas.openapi_components()
            )
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("wherein")
    except Exception:  # noqa: BLE001 - a source checkout without metadata
        return "0"
