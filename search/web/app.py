"""The web app: a FastAPI JSON API over one index, and the static page that uses it.

    from wherein.search.web.app import create_app
    app = create_app("~/.local/share/wherein/index")      # then: uvicorn.run(app, port=8765)

API (all GET, all read-only apart from INDEX/cache; JSON bodies follow
schemas/api.*.schema.json and hit.schema.json, errors schemas/api.error.schema.json):

- /api/status                      index counts, models, caches
- /api/search?q=&like=&unlike=&min_probability=&under=&taken=&camera=&near=&sort=&page=&per_page=
- /api/hit/{id}                    one indexed image's catalog record
- /api/thumb/{id}, /api/image/{id} JPEG thumbnail / large preview (cached)
- /api/mask/{id}?prompt=           CLIPSeg mask summary (bbox, area, score) + URLs
- /api/mask/{id}/overlay|mask?prompt=  the overlay JPEG / binary mask PNG
- /api/folders                     folders holding indexed images, for the folder filter

Images are addressed by catalog id only, and served only while the file is
still the indexed content (see files.py). The app writes nothing outside
INDEX/cache, which is kept under a size limit (search/cache/limit.py; 512 MB unless
``cache_mb`` / WHEREIN_CACHE_MB say otherwise). Every error, a refused Host header
included, is a JSON body ``{"error", "status"}``. Commits made by `wherein index`
while the app runs show up in the next search, without a restart.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import logging
import os
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager, suppress
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import quote

from fastapi import FastAPI, Query
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, Response
from fastapi.responses import JSONResponse as _StarletteJSON
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException

from wherein.schemas.errors import IndexError_, ModelError, WhereinError
from wherein.schemas.records import iso_time
from wherein.search.api import MODEL_TEMPLATE, Template
from wherein.search.cache.limit import CacheJanitor, cache_limit_bytes, usable_cache
from wherein.search.cache.thumbs import ResizedCache
from wherein.search.cache.vision_store import VISION_DIR, VisionStore
from wherein.search.web import DEFAULT_PREFETCH_MASKS, schemas
from wherein.search.web.files import FileChanged, IndexedFile, NotFound
from wherein.search.web.masks import KINDS, MaskService, clean_prompt

log = logging.getLogger("wherein.serve")

STATIC_DIR = Path(__file__).resolve().parent / "static"
THUMB_SIDE = 384  # grid tiles are ~200 CSS px: sharp on 2x screens
PREVIEW_SIDE = 1600
MAX_PER_PAGE = 200
PAGE_BLOCK = 200
MAX_RESULTS = 10_000  # page * per_page: deeper than anyone scrolls
MAX_ID = 2**62  # SQLite integers are 64-bit: larger values would overflow, not miss
# Threads for the heavy work (decoding a photo for a thumbnail or preview; a search, whose
# query encoding allocates tensors and starts a team of OpenMP threads per calling thread):
# more than the cores only adds memory, since each holds its image or tensors and malloc
# keeps freed heap per thread. Requests hand the work to these few and wait.
WORK_THREADS = max(2, min(4, os.cpu_count() or 2))
LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "::1", "[::1]"]
# The page needs nothing from elsewhere; /docs loads Swagger UI from a CDN, so it is exempt.
CSP = "default-src 'self'; img-src 'self' data:; object-src 'none'; frame-ancestors 'none'; base-uri 'none'"

ImageId = Annotated[int, PathParam(ge=1, le=MAX_ID, description="Catalog id of the image")]


def _json_schema_response(component: str, description: str) -> dict:
    ref = {"$ref": f"#/components/schemas/{component}"}
    err = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    return {
        200: {"description": description, "content": {"application/json": {"schema": ref}}},
        400: {"description": "Bad parameter", **err},
        404: {"description": "No such image, or its file is gone", **err},
    }


IMAGE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "JPEG", "content": {"image/jpeg": {}}},
    404: {"description": "No such image, or its file is gone"},
    409: {"description": "The file changed since it was indexed: refused"},
}


class WebState:
    """What the request handlers share: one Searcher, a catalog connection, caches."""

    def __init__(
        self,
        index_dir: Path,
        models_dir: Path | None,
        template: str | Template | None,
        cache_bytes: int | None = None,
        prefetch_masks: int = DEFAULT_PREFETCH_MASKS,
    ) -> None:
        from wherein.search.api import open_index

        self.prefetch_masks = prefetch_masks

        self.searcher = open_index(index_dir, models_dir, template=template)
        self.index_dir = self.searcher.store.dir
        self.catalog = self.searcher.store.reader()
        self.db_lock = threading.Lock()
        self._closed = False
        self.cache_dir = self.index_dir / "cache"
        writable = usable_cache(self.cache_dir)
        self.decoding = ThreadPoolExecutor(WORK_THREADS, thread_name_prefix="wherein-decode")
        self.searching = ThreadPoolExecutor(WORK_THREADS, thread_name_prefix="wherein-search")
        self.thumbs = ResizedCache(
            self.cache_dir / "thumbs" if writable else None, THUMB_SIDE, pool=self.decoding
        )
        self.previews = ResizedCache(
            self.cache_dir / "previews" if writable else None, PREVIEW_SIDE, 85, pool=self.decoding
        )
        self.janitor = CacheJanitor(
            self.cache_dir, cache_bytes if cache_bytes is not None else cache_limit_bytes()
        )
        self.masks = MaskService(
            self.searcher.models.root,
            self.cache_dir / "masks" if writable else None,
            on_added=self.janitor.added,
            store=VisionStore(self.cache_dir / VISION_DIR, self.janitor) if writable else None,
        )
        self._folders: tuple[tuple, list[dict]] | None = None

    def close(self) -> None:
        # The mask worker reads catalog rows (its guesses resolve hits): it stops first, and
        # the catalog closes under the lock its readers take, never under a read.
        self.masks.close()
        self.decoding.shutdown(cancel_futures=True)
        self.searching.shutdown(cancel_futures=True)
        with self.db_lock:
            self._closed = True
            self.catalog.close()
        self.searcher.close()

    def indexed(self, image_id: int) -> IndexedFile:
        with self.db_lock:
            if self._closed:
                raise IndexError_("the web app is shutting down")
            row = self.catalog.rows_by_ids([image_id]).get(image_id)
        if row is None:
            raise NotFound(f"image {image_id}: not in this index")
        return IndexedFile.from_row(row)

    @contextmanager
    def serving(self, f: IndexedFile) -> Iterator[None]:
        """Around serving one image's derivatives: when its file turns out gone, drop what
        the caches keep of it (thumbnail, preview, masks) and answer 404."""
        try:
            yield
        except NotFound:
            self.thumbs.forget(f.id)
            self.previews.forget(f.id)
            self.masks.forget(f)
            raise

    def folders(self) -> list[dict]:
        with self.db_lock:
            if self._closed:
                raise IndexError_("the web app is shutting down")
            stamp = (
                self.catalog.generation,
                self.catalog.count_images(),
                self.catalog.max_image_id(),
            )
            if self._folders is not None and self._folders[0] == stamp:
                return self._folders[1]
            counts = Counter(os.path.dirname(p) for p in self.catalog.all_paths())
        out = [{"folder": f, "count": n} for f, n in sorted(counts.items())]
        self._folders = (stamp, out)
        return out


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
    from wherein.indexer import paths as P

    state = WebState(
        P.index_dir(index_dir),
        Path(models_dir) if models_dir else None,
        template,
        cache_limit_bytes(cache_mb),
        prefetch_masks,
    )

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
    app.state.wherein = state
    app.add_middleware(TrustedHosts, allowed=allowed_hosts or LOOPBACK_HOSTS)

    @app.middleware("http")
    async def security_headers(request, call_next):
        response = await call_next(request)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "no-referrer")
        if not request.url.path.startswith(("/docs", "/redoc")):
            response.headers.setdefault("Content-Security-Policy", CSP)
        return response

    _add_error_handlers(app)
    _add_routes(app, state)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    _add_schemas_to_openapi(app)
    return app


# -- errors --------------------------------------------------------------------------------
class JSONResponse(_StarletteJSON):
    """JSON with non-ASCII characters escaped.

    A file name that is not UTF-8 reaches Python as str with lone surrogates
    (os.fsdecode); as \\udcXX escapes it is valid JSON, where writing it as UTF-8
    would fail the whole response.
    """

    def render(self, content) -> bytes:
        return json.dumps(content, allow_nan=False, separators=(",", ":")).encode("ascii")


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message, "status": status}, status_code=status)


_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_HOSTNAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")  # also matches an IPv4 literal
_PORT = re.compile(r"[0-9]{1,5}")
_IPV6 = re.compile(r"[0-9a-f:.]+")  # no zone id ("%eth0"): never a loopback name


def host_name(header: str) -> str | None:
    """The host of a Host header, lower-cased: 'localhost:8765' -> 'localhost',
    '[::1]:8765' -> '[::1]'; None unless the header is exactly a host name or IP literal
    and an optional port of digits (no spaces, quotes, user info, paths or second ports).
    """
    header = header.lower()
    if header.startswith("["):
        end = header.find("]")
        host, rest = header[: end + 1], header[end + 1 :]
        if end < 0 or not _IPV6.fullmatch(host[1:-1]):
            return None
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return None
    else:
        host, colon, port = header.partition(":")
        rest = colon + port
        if len(host) > 253 or not _HOSTNAME.fullmatch(host):
            return None
    if rest and not (rest[0] == ":" and _PORT.fullmatch(rest[1:]) and int(rest[1:]) <= 65535):
        return None
    return host


class TrustedHosts:
    """Answer only requests whose Host header names an allowed host (else a JSON 400).

    A DNS-rebinding page reaches 127.0.0.1 under its own host name; refusing that name
    keeps it from reading the API. Starlette's TrustedHostMiddleware does the same with
    a plain-text body, unlike every other error here (and cannot match "[::1]:port").
    """

    def __init__(self, app, allowed: list[str]) -> None:
        self.app = app
        self.any = "*" in allowed
        self.allowed = {h.lower() for h in allowed}

    async def __call__(self, scope, receive, send) -> None:
        if self.any or scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        header = Headers(scope=scope).get("host", "")
        host = host_name(header)
        if host is not None and host in self.allowed:
            await self.app(scope, receive, send)
            return
        response = _error(
            400,
            f"host {header[:80]!r} is not served here: open the address `wherein serve` printed "
            "(it answers loopback names only unless started with --host)",
        )
        await response(scope, receive, send)


def _status_for(exc: WhereinError) -> int:
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, FileChanged):
        return 409
    if isinstance(exc, ModelError | IndexError_):
        return 503
    return 400


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(WhereinError)
    async def wherein_error(_request, exc: WhereinError):
        return _error(_status_for(exc), str(exc))

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
        return _error(400, "; ".join(parts) or "bad request")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request, exc: StarletteHTTPException):
        message = exc.detail if isinstance(exc.detail, str) else "request failed"
        if exc.status_code == 404 and message == "Not Found":
            message = "no such page or API endpoint"
        return _error(exc.status_code, message)

    @app.exception_handler(Exception)
    async def unexpected(request, exc: Exception):
        log.error("error serving %s", request.url.path, exc_info=exc)
        return _error(500, "internal error: the details are in the server's log")


# -- routes --------------------------------------------------------------------------------
def _urls(f_id: int, sha: str | None) -> dict[str, str]:
    v = f"?v={sha[:16]}" if sha else ""
    return {"thumb_url": f"/api/thumb/{f_id}{v}", "image_url": f"/api/image/{f_id}{v}"}


def _entry_files(path: Path) -> list[Path]:
    """The files of the cache entry path belongs to (a mask's json, overlay, PNG); none when a
    concurrent prune has taken them (and their folder) already."""
    try:
        return list(path.parent.glob(path.name.split(".", 1)[0] + ".*"))
    except OSError:
        return []


def _image_response(
    state: WebState,
    make: Callable[[], tuple[Path | bytes, bool]],
    media_type: str = "image/jpeg",
) -> Response:
    """A cached (or made-now) image; the cache's size limit applies after each new entry.

    A cached file is read whole while pinned, so pruning never cuts a response short; if
    it was pruned between lookup and read, it is made again.
    """
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
    headers = {
        "Cache-Control": "private, max-age=86400",
        "X-Wherein-Cache": "hit" if hit else "miss",
    }
    return Response(body, media_type=media_type, headers=headers)


def _add_routes(app: FastAPI, state: WebState) -> None:
    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(
            STATIC_DIR / "index.html", media_type="text/html", headers={"Cache-Control": "no-cache"}
        )

    @app.get(
        "/api/status", responses=_json_schema_response("StatusResponse", "Index and app status")
    )
    def status() -> JSONResponse:
        from wherein.indexer.store.status import index_status, models_report

        state.searcher.refresh()  # counts as of the latest commit, not the last search
        st = index_status(state.searcher.store)
        # The same object as `wherein status --json` (schemas/status.schema.json)
        st.models = models_report(state.searcher.models, st.model_id)
        info = st.to_dict()
        info.pop("skipped", None)  # can be long; `wherein status` lists them
        cache = state.cache_dir
        thumbs = _count(cache / "thumbs", "*.jpg")
        previews = _count(cache / "previews", "*.jpg")
        masks = _count(cache / "masks", "*/*.json")
        vision = _count(cache / VISION_DIR, "*/*.npy")
        info.update(
            standin=state.searcher.models.is_standin,
            cache={
                "dir": str(cache),
                "writable": state.thumbs.dir is not None,
                "thumbs": thumbs,
                "previews": previews,
                "masks": masks,
                "vision_passes": vision,
                "bytes": _du(cache),
                "limit_bytes": state.janitor.limit,
                "pruned_files": state.janitor.pruned,
            },
            masks={
                "vision_passes": state.masks.vision_passes,
                "vision_passes_loaded": state.masks.store.loaded if state.masks.store else 0,
                "decoder_runs": state.masks.decoder_runs,
                "prefetched": state.masks.prefetched,
                "prefetch_queued": state.masks.prefetch_queued,
            },
        )
        return JSONResponse(info)

    @app.get("/api/search", responses=_json_schema_response("SearchResponse", "One page of hits"))
    def search(
        q: Annotated[
            str, Query(max_length=1000, description="Query algebra as in `wherein search`")
        ] = "",
        like: Annotated[
            list[int], Query(description="Catalog ids whose indexed vectors join the query")
        ] = [],  # noqa: B006
        unlike: Annotated[
            list[int], Query(description="Catalog ids subtracted from the query")
        ] = [],  # noqa: B006
        min_probability: Annotated[float | None, Query(gt=0, lt=1)] = None,
        under: Annotated[str | None, Query(max_length=4096, description="Absolute folder")] = None,
        taken: Annotated[
            str | None, Query(max_length=100, description="Dates FROM..TO, e.g. 2024-06..2024-08")
        ] = None,
        camera: Annotated[
            str | None, Query(max_length=200, description="Part of the EXIF camera make/model")
        ] = None,
        near: Annotated[
            str | None, Query(max_length=100, description="LAT,LON[,KM] (GPS, default 10 km)")
        ] = None,
        sort: Literal["score", "date", "taken", "path", "size"] = "score",
        page: Annotated[int, Query(ge=1)] = 1,
        per_page: Annotated[int, Query(ge=1, le=MAX_PER_PAGE)] = 48,
    ) -> JSONResponse:
        from wherein.search.api import Query as Q

        if page * per_page > MAX_RESULTS:
            raise _BadRequest(
                f"page: at most {MAX_RESULTS} results can be paged through; narrow the query"
            )
        if under is not None:
            under = under.strip() or None
        if under is not None and not os.path.isabs(os.path.expanduser(under)):
            raise _BadRequest("under: give an absolute folder path (e.g. /home/me/Photos)")
        query = Q.parse(q) if q.strip() else Q()
        for image_id, add in [(i, True) for i in like] + [(i, False) for i in unlike]:
            _check_indexed(state, image_id)
            query = query.like_id(image_id, 1.0 if add else -1.0)
        query.validate()
        end = page * per_page
        # Fetch in blocks: pages cut from one candidate set stay consistent (no hit on two
        # pages, none skipped) even where scores tie and FAISS may pick either.
        k = (
            None
            if min_probability is not None
            else min(-(-(end + 1) // PAGE_BLOCK) * PAGE_BLOCK, MAX_RESULTS + 1)
        )

        def run() -> tuple[list, dict, list]:
            hits = state.searcher.search(
                query,
                k=k,
                min_probability=min_probability,
                under=under,
                sort=sort,
                taken=taken,
                camera=camera,
                near=near,
            )
            timings = {k: round(v, 2) for k, v in state.searcher.last_timings.items()}
            return hits, timings, list(state.searcher.last_warnings)

        hits, timings, warnings = state.searching.submit(run).result()
        total = len(hits) if min_probability is not None else None
        chunk = hits[end - per_page : end]
        prompt = query.mask_prompt()
        if prompt and page == 1 and state.prefetch_masks > 0:
            first = [h.id for h in chunk[: state.prefetch_masks]]
            state.masks.prefetch([functools.partial(state.indexed, i) for i in first], prompt)
        return JSONResponse(
            {
                "query": str(query),
                "mask_prompt": prompt,
                "page": page,
                "per_page": per_page,
                "has_more": len(hits) > end,
                "total": total,
                "hits": [{**h.to_dict(), **_urls(h.id, h.sha256)} for h in chunk],
                "timings": timings,
                "warnings": warnings,
                "standin": state.searcher.models.is_standin,
            }
        )

    @app.get(
        "/api/hit/{image_id}", responses=_json_schema_response("ImageRecord", "One indexed image")
    )
    def hit(image_id: ImageId) -> JSONResponse:
        f = state.indexed(image_id)
        return JSONResponse(
            {
                "id": f.id,
                "path": f.path,
                "folder": os.path.dirname(f.path),
                "width": f.width,
                "height": f.height,
                "size": f.size,
                "mtime": iso_time(f.mtime_ns),
                "indexed_at": f.indexed_at,
                "sha256": f.sha256,
                "format": f.format,
                "exists": os.path.exists(f.path),
                **_urls(f.id, f.sha256),
            }
        )

    @app.get("/api/thumb/{image_id}", responses=IMAGE_RESPONSES, response_class=Response)
    def thumb(image_id: ImageId) -> Response:
        f = state.indexed(image_id)
        with state.serving(f):
            return _image_response(state, lambda: state.thumbs.get(f))

    @app.get("/api/image/{image_id}", responses=IMAGE_RESPONSES, response_class=Response)
    def image(image_id: ImageId) -> Response:
        f = state.indexed(image_id)
        with state.serving(f):
            return _image_response(state, lambda: state.previews.get(f))

    @app.get(
        "/api/mask/{image_id}",
        responses=_json_schema_response("MaskResponse", "Where the prompt matches"),
    )
    def mask(image_id: ImageId, prompt: Annotated[str, Query(max_length=1000)]) -> JSONResponse:
        f = state.indexed(image_id)
        p = clean_prompt(prompt)
        with state.serving(f):
            entry = state.masks.get(f, p)
        qs = f"?prompt={quote(p)}&v={f.sha256[:16]}"
        return JSONResponse(
            {
                **entry.summary,
                "overlay_url": f"/api/mask/{f.id}/overlay{qs}",
                "mask_url": f"/api/mask/{f.id}/mask{qs}",
            }
        )

    @app.get(
        "/api/mask/{image_id}/{kind}",
        response_class=Response,
        responses={
            200: {
                "description": "overlay JPEG or mask PNG",
                "content": {"image/jpeg": {}, "image/png": {}},
            }
        },
    )
    def mask_file(
        image_id: ImageId,
        kind: Literal["overlay", "mask"],
        prompt: Annotated[str, Query(max_length=1000)],
    ) -> Response:
        f, p = state.indexed(image_id), clean_prompt(prompt)

        def make() -> tuple[Path | bytes, bool]:
            if kind == "mask":
                return state.masks.mask_png(f, p)
            entry = state.masks.get(f, p)
            return entry.files[kind], bool(entry.summary.get("cached"))

        with state.serving(f):
            return _image_response(state, make, KINDS[kind][1])

    @app.get("/api/folders")
    def folders() -> JSONResponse:
        """Folders that hold indexed images (for the folder filter), with image counts."""
        return JSONResponse({"folders": state.folders()})


class _BadRequest(WhereinError):
    pass


def _check_indexed(state: WebState, image_id: int) -> None:
    """A "more like this" id must be a catalog row; its stored vector is used, not the file."""
    if not 1 <= image_id <= MAX_ID:
        raise _BadRequest(f"like: {image_id} is not a catalog id")
    state.indexed(image_id)


def _count(folder: Path, pattern: str) -> int:
    return sum(1 for _ in folder.glob(pattern)) if folder.is_dir() else 0


def _du(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            with suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


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
