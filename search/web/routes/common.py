"""What several route modules share: the catalog-id parameter, the OpenAPI response
descriptions, and the URLs a hit carries."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path as PathParam
from fastapi import Query

MAX_ID = 2**62  # SQLite integers are 64-bit: larger values would overflow, not miss

FileId = Annotated[int, PathParam(ge=1, le=MAX_ID, description="Catalog id of the file")]


def json_schema_response(component: str, description: str) -> dict:
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


# The moment of a video's frame, in seconds (?t=); a photo takes none.
FrameTime = Annotated[
    float | None,
    Query(ge=0, le=1e7, description="A video's moment in seconds (its frame); none for a photo"),
]


def urls(
    f_id: int, sha: str | None, time: float | None = None, plays: bool = True
) -> dict[str, str]:
    """A hit's or record's URLs; a timed file's (time: the moment shown, None: a photo) are
    of its frame at that time, and a video's (plays) add video_url."""
    v = f"v={sha[:16]}" if sha else ""
    if time is None:
        q = f"?{v}" if v else ""
        return {"thumb_url": f"/api/thumb/{f_id}{q}", "image_url": f"/api/image/{f_id}{q}"}
    at = "&".join(x for x in (f"t={round(time, 3)!r}", v) if x)
    out = {"thumb_url": f"/api/thumb/{f_id}?{at}", "image_url": f"/api/image/{f_id}?{at}"}
    if plays:
        out["video_url"] = f"/api/video/{f_id}" + (f"?{v}" if v else "")
    return out
