"""/api/mask: where a prompt matches in one image (CLIPSeg), or in a video's frame at ?t=
seconds, and the overlay and mask files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import quote

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from wherein.search.service.mask import KINDS, clean_prompt
from wherein.search.web.responses import JSONResponse, image_response
from wherein.search.web.routes.common import FileId, FrameTime, json_schema_response
from wherein.search.web.state import Web

router = APIRouter()


@router.get(
    "/api/mask/{file_id}",
    responses=json_schema_response("MaskResponse", "Where the prompt matches"),
)
def mask(
    state: Web,
    file_id: FileId,
    prompt: Annotated[str, Query(max_length=1000)],
    t: FrameTime = None,
) -> JSONResponse:
    f = state.indexed(file_id, t)
    p = clean_prompt(prompt)
    with state.serving(f):
        entry = state.masks.get(f, p)
    at = f"&t={f.time!r}" if f.time is not None else ""
    qs = f"?prompt={quote(p)}{at}&v={f.sha256[:16]}"
    return JSONResponse(
        {
            **entry.summary,
            **({"time": f.time} if f.time is not None else {}),
            "overlay_url": f"/api/mask/{f.id}/overlay{qs}",
            "mask_url": f"/api/mask/{f.id}/mask{qs}",
        }
    )


@router.get(
    "/api/mask/{file_id}/{kind}",
    response_class=Response,
    responses={
        200: {
            "description": "overlay JPEG or mask PNG",
            "content": {"image/jpeg": {}, "image/png": {}},
        }
    },
)
def mask_file(
    state: Web,
    request: Request,
    file_id: FileId,
    kind: Literal["overlay", "mask"],
    prompt: Annotated[str, Query(max_length=1000)],
    t: FrameTime = None,
) -> Response:
    f, p = state.indexed(file_id, t), clean_prompt(prompt)

    def make() -> tuple[Path | bytes, bool]:
        if kind == "mask":
            return state.masks.mask_png(f, p)
        entry = state.masks.get(f, p)
        return entry.files[kind], bool(entry.summary.get("cached"))

    with state.serving(f):
        return image_response(state, request, make, f, f"{kind}-{p}", KINDS[kind][1])
