"""/api/video/{id}: an indexed video's bytes, by HTTP range, for the page's <video>."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Request
from fastapi.responses import Response, StreamingResponse

from wherein.search.web import videos
from wherein.search.web.head import is_head
from wherein.search.web.ranges import Unsatisfiable
from wherein.search.web.responses import error_response
from wherein.search.web.routes.common import FileId
from wherein.search.web.state import Web
from wherein.search.web.validators import not_modified

router = APIRouter()

VIDEO_RESPONSES: dict[int | str, dict] = {
    200: {"description": "The whole video", "content": {"video/mp4": {}}},
    206: {"description": "The byte range asked for (Content-Range)", "content": {"video/mp4": {}}},
    304: {"description": "If-None-Match names the video as it is"},
    404: {"description": "No such video in the index, or its file is gone"},
    409: {"description": "The file changed since it was indexed: refused"},
    416: {"description": "The range starts past the end of the file"},
}


@router.get("/api/video/{file_id}", response_class=Response, responses=VIDEO_RESPONSES)
def video(
    state: Web,
    request: Request,
    file_id: FileId,
    range_: Annotated[str | None, Header(alias="range")] = None,
    if_range: Annotated[str | None, Header(alias="if-range")] = None,
    if_none_match: Annotated[str | None, Header(alias="if-none-match")] = None,
) -> Response:
    try:
        out = videos.body(state.video(file_id), range_, if_range, head=is_head(request))
    except Unsatisfiable as exc:
        return error_response(416, str(exc), {"Content-Range": f"bytes */{exc.size}"})
    if not_modified(if_none_match, out.headers["ETag"]):
        out.close()
        kept = ("ETag", "Last-Modified", "Cache-Control")
        return Response(status_code=304, headers={k: out.headers[k] for k in kept})
    return _RangeResponse(out)


class _RangeResponse(StreamingResponse):
    """Streams a video Body and closes its file when the response ends, also when the client
    hangs up mid-way (a player does at every seek): the generator is not left to the
    garbage collector, which could hold many descriptors for a long time."""

    def __init__(self, body: videos.Body) -> None:
        super().__init__(body.chunks, status_code=body.status, headers=body.headers)
        self._body = body

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            # No chunk is being read now: Starlette waits for its worker thread to return.
            self._body.close()
