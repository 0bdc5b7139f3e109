"""One indexed file: its catalog record, its thumbnail and preview (cached; a video's are of
its frame at ?t= seconds), and the folders that hold files (for the folder filter)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from wherein.search.service.serve import plays, timed
from wherein.search.web.responses import JSONResponse, image_response
from wherein.search.web.routes.common import (
    IMAGE_RESPONSES,
    FileId,
    FrameTime,
    json_schema_response,
    urls,
)
from wherein.search.web.state import Web

router = APIRouter()


@router.get(
    "/api/hit/{file_id}", responses=json_schema_response("ImageRecord", "One indexed image")
)
def hit(state: Web, file_id: FileId) -> JSONResponse:
    record = state.record(file_id)
    kind = record["kind"]
    at = 0.0 if timed(kind) else None
    return JSONResponse({**record, **urls(record["id"], record["sha256"], at, plays=plays(kind))})


@router.get("/api/thumb/{file_id}", responses=IMAGE_RESPONSES, response_class=Response)
def thumb(state: Web, request: Request, file_id: FileId, t: FrameTime = None) -> Response:
    f = state.indexed(file_id, t)
    with state.serving(f):
        return image_response(state, request, lambda: state.thumbs.get(f), f, "thumb")


@router.get("/api/image/{file_id}", responses=IMAGE_RESPONSES, response_class=Response)
def image(state: Web, request: Request, file_id: FileId, t: FrameTime = None) -> Response:
    f = state.indexed(file_id, t)
    with state.serving(f):
        return image_response(state, request, lambda: state.previews.get(f), f, "preview")


@router.get("/api/folders")
def folders(state: Web) -> JSONResponse:
    """Folders that hold indexed images (for the folder filter), with image counts."""
    return JSONResponse({"folders": state.folders()})
