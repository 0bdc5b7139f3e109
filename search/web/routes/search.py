"""/api/search: one page of hits for the query algebra of `wherein search`, through the same
search service (search/service/search.py) the CLI calls; a video is one hit (its best frame's
time, its duration and moments), with the URLs the page plays it and shows its frame by."""

from __future__ import annotations

import functools
import os
import time
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request

from wherein.schemas import locations
from wherein.schemas.errors import BadRequest
from wherein.schemas.records import Hit
from wherein.search.service.search import Query as Q
from wherein.search.service.search import SearchRequest
from wherein.search.service.serve import ServeSession, plays
from wherein.search.web.headers import arrived
from wherein.search.web.responses import JSONResponse
from wherein.search.web.routes.common import MAX_ID, json_schema_response, urls
from wherein.search.web.state import Web

MAX_PER_PAGE = 200
PAGE_BLOCK = 200
MAX_RESULTS = 10_000  # page * per_page: deeper than anyone scrolls

router = APIRouter()


@router.get("/api/search", responses=json_schema_response("SearchResponse", "One page of hits"))
def search(
    state: Web,
    http: Request,
    q: Annotated[
        str, Query(max_length=1000, description="Query algebra as in `wherein search`")
    ] = "",
    like: Annotated[
        list[int], Query(description="Catalog ids whose indexed vectors join the query")
    ] = [],  # noqa: B006
    unlike: Annotated[list[int], Query(description="Catalog ids subtracted from the query")] = [],  # noqa: B006
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
    kind: Annotated[
        str | None,
        Query(max_length=40, description="Only files of this media kind (photo, video, ...)"),
    ] = None,
    sort: Literal["score", "date", "taken", "path", "size"] = "score",
    page: Annotated[int, Query(ge=1)] = 1,
    per_page: Annotated[int, Query(ge=1, le=MAX_PER_PAGE)] = 48,
) -> JSONResponse:
    began = time.perf_counter()
    if page * per_page > MAX_RESULTS:
        raise BadRequest(
            f"page: at most {MAX_RESULTS} results can be paged through; narrow the query"
        )
    if under is not None:
        under = under.strip() or None
    if under is not None and not os.path.isabs(os.path.expanduser(under)):
        raise BadRequest("under: give an absolute folder path (e.g. /home/me/Photos)")
    query = Q.parse(q) if q.strip() else Q()
    for file_id, add in [(i, True) for i in like] + [(i, False) for i in unlike]:
        _check_indexed(state, file_id)
        query = query.like_id(file_id, 1.0 if add else -1.0)
    query.validate()
    end = page * per_page
    # Fetch in blocks: pages cut from one candidate set stay consistent (no hit on two
    # pages, none skipped) even where scores tie and FAISS may pick either.
    k = (
        None
        if min_probability is not None
        else min(-(-(end + 1) // PAGE_BLOCK) * PAGE_BLOCK, MAX_RESULTS + 1)
    )

    request = SearchRequest(
        query,
        k=k,
        min_probability=min_probability,
        under=under,
        taken=taken,
        camera=camera,
        near=near,
        kind=kind,
        sort=sort,
        # Only the page's files are looked at (below), not the whole block's: each look is a
        # system call that gives up the GIL, and under load takes a while to get it back.
        check_exists=False,
    ).check()
    # The block is ranked; only this page's hits are built from their catalog rows: a new
    # search's on its search thread, a page turn's (a kept answer) here.
    result = state.search(request, shown=slice(end - per_page, end))
    hits, warnings = result.hits, result.warnings
    timings = dict(result.timings)
    total = len(hits) if min_probability is not None else None
    paging = time.perf_counter()
    chunk = [h.replace(exists=locations.exists(h.path)) for h in hits[end - per_page : end]]
    timings["page_ms"] = (time.perf_counter() - paging) * 1e3
    prompt = query.mask_prompt()
    if prompt and page == 1 and state.prefetch_masks > 0:
        first = [(h.id, _moment(h)) for h in chunk[: state.prefetch_masks]]
        state.masks.prefetch([functools.partial(state.indexed, i, t) for i, t in first], prompt)
    page_hits = [
        {**h.to_dict(), **urls(h.id, h.sha256, _moment(h), plays=plays(h.kind))} for h in chunk
    ]
    # The request's times in the server: waiting for a request thread, then this handler.
    now = time.perf_counter()
    at = arrived(http)
    if at is not None:
        timings["thread_wait_ms"] = (began - at) * 1e3
    timings["route_ms"] = (now - began) * 1e3
    return JSONResponse(
        {
            "query": str(query),
            "mask_prompt": prompt,
            "page": page,
            "per_page": per_page,
            "has_more": len(hits) > end,
            "total": total,
            "hits": page_hits,
            "timings": {k: round(v, 2) for k, v in timings.items()},
            "warnings": warnings,
            "standin": state.searcher.models.is_standin,
        }
    )


def _moment(h: Hit) -> float | None:
    """The time a hit of a timed file (a video) is shown at (its best frame's); None for a
    photo."""
    return h.time


def _check_indexed(state: ServeSession, file_id: int) -> None:
    """A "more like this" id must be a catalog row; its stored vector is used, not the file."""
    if not 1 <= file_id <= MAX_ID:
        raise BadRequest(f"like: {file_id} is not a catalog id")
    state.indexed(file_id)
