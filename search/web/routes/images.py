"""One indexed image: its catalog record, its thumbnail and preview (cached; a video's are of
its frame at ?t= seconds), and the folders that hold images (for the folder filter)."""

from __future__ import annotations

import os

from fastapi import APIRouter
from fastapi.responses import Response

from wherein.schemas.records import iso_time
from wherein.search.web.responses import JSONResponse, image_response
from wherein.search.web.routes.common import (
    IMAGE_RESPONSES,
    FrameTime,
    ImageId,
    json_schema_response,
    urls,
)
from wherein.search.web.state import Web
from wherein.search.web.videos import is_timed, is_video

router = APIRouter()


@router.get(
    "/api/hit/{image_id}", responses=json_schema_response("ImageRecord", "One indexed image")
)
def hit(state: Web, image_id: ImageId) -> JSONResponse:
    f = state.file(image_id)
    timed = is_timed(f)
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
            "kind": f.kind,
            **urls(f.id, f.sha256, 0.0 if timed else None, plays=is_video(f)),
        }
    )


@router.get("/api/thumb/{image_id}", responses=IMAGE_RESPONSES, response_class=Response)
def thumb(state: Web, image_id: ImageId, t: FrameTime = None) -> Response:
    f = state.indexed(image_id, t)
    with state.serving(f):
        return image_response(state, lambda: state.thumbs.get(f))


@router.get("/api/image/{image_id}", responses=IMAGE_RESPONSES, response_class=Response)
def image(state: Web, image_id: ImageId, t: FrameTime = None) -> Response:
    f = state.indexed(image_id, t)
    with state.serving(f):
        return image_response(state, lambda: state.previews.get(f))


@router.get("/api/folders")
def folders(state: Web) -> JSONResponse:
    """Folders that hold indexed images (for the folder filter), with image counts."""
    return JSONResponse({"folders": state.folders()})
