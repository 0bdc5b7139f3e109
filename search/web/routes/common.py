"""What several route modules share: the catalog-id parameter, the OpenAPI response
descriptions, and the URLs a hit carries."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path as PathParam

MAX_ID = 2**62  # SQLite integers are 64-bit: larger values would overflow, not miss

ImageId = Annotated[int, PathParam(ge=1, le=MAX_ID, description="Catalog id of the image")]


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


def urls(f_id: int, sha: str | None) -> dict[str, str]:
    v = f"?v={sha[:16]}" if sha else ""
    return {"thumb_url": f"/api/thumb/{f_id}{v}", "image_url": f"/api/image/{f_id}{v}"}
