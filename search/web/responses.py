"""The app's responses: JSON that survives any file name, the JSON error body every failure
gets (a refused Host header included), and cached images served whole."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse as _StarletteJSON
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from wherein.schemas.errors import FileChanged, IndexError_, ModelError, NotFound, WhereinError
from wherein.search.service.serve import IndexedFile, ServeSession
from wherein.search.web.validators import etag, http_date, not_modified

log = logging.getLogger("wherein.serve")


class JSONResponse(_StarletteJSON):
    """JSON with non-ASCII characters escaped.

    A file name that is not UTF-8 reaches Python as str with lone surrogates
    (os.fsdecode); as \\udcXX escapes it is valid JSON, where writing it as UTF-8
    would fail the whole response.
    """

    def render(self, content) -> bytes:
        return json.dumps(content, allow_nan=False, separators=(",", ":")).encode("ascii")


def error_response(
    status: int, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse({"error": message, "status": status}, status_code=status, headers=headers)


def _status_for(exc: WhereinError) -> int:
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, FileChanged):
        return 409
    if isinstance(exc, ModelError | IndexError_):
        return 503
    return 400


def add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(WhereinError)
    async def wherein_error(_request, exc: WhereinError):
        return error_response(_status_for(exc), str(exc))

    @app.exception_handler(RequestValidationError)
    async def bad_parameter(_request, exc: RequestValidationError):
        parts = []
        for e in exc.errors():
            where = ".".join(str(x) for x in e.get("loc", ())[1:]) or "request"
            got = e.get("input")
            shown = (
                f" (got {str(got)[:60]!r})" if got is not None and not isinstance(got, dict) else ""
            )
            parts.append(f"{where}: {e.get('msg', 'invalid')}{shown}")
        return error_response(400, "; ".join(parts) or "bad request")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request, exc: StarletteHTTPException):
        message = exc.detail if isinstance(exc.detail, str) else "request failed"
        if exc.status_code == 404 and message == "Not Found":
            message = "no such page or API endpoint"
        return error_response(exc.status_code, message)

    @app.exception_handler(Exception)
    async def unexpected(request, exc: Exception):
        log.error("error serving %s", request.url.path, exc_info=exc)
        return error_response(500, "internal error: the details are in the server's log")


def _entry_files(path: Path) -> list[Path]:
    """The files of the cache entry path belongs to (a mask's json, overlay, PNG); none when a
    concurrent prune has taken them (and their folder) already."""
    try:
        return list(path.parent.glob(path.name.split(".", 1)[0] + ".*"))
    except OSError:
        return []


def image_response(
    state: ServeSession,
    request: Request,
    make: Callable[[], tuple[Path | bytes, bool]],
    f: IndexedFile,
    what: str,
    media_type: str = "image/jpeg",
) -> Response:
    """A cached (or made-now) image of file f (what: which one, for its ETag); the cache's
    size limit applies after each new entry. A client whose copy is current (If-None-Match)
    gets 304, once the file is known to be the indexed content still.

    A cached file is read whole while pinned, so pruning never cuts a response short; if
    it was pruned between lookup and read, it is made again.
    """
    tag = etag(
        hashlib.sha256(f"{f.key}\0{what}".encode("utf-8", "surrogateescape")).hexdigest()[:32]
    )
    headers = {
        "Cache-Control": "private, max-age=86400",
        "ETag": tag,
        "Last-Modified": http_date(f.mtime_ns),
    }
    if not_modified(request.headers.get("if-none-match"), tag):
        state.check_current(f)
        return Response(status_code=304, headers=headers)
    for attempt in (1, 2):
        body, hit = make()
        if not isinstance(body, Path):
            break
        try:
            with state.janitor.pinned(body):
                data = body.read_bytes()
        except FileNotFoundError:
            if attempt == 2:
                raise
            continue
        if hit:
            state.janitor.used(body)
        else:
            state.janitor.added(_entry_files(body))
        body = data
        break
    headers["X-Wherein-Cache"] = "hit" if hit else "miss"
    return Response(body, media_type=media_type, headers=headers)
