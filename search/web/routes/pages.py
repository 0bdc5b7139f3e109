"""The one page: static/index.html (its script and styles are under /static)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

STATIC_DIR = Path(__file__).resolve().parents[1] / "static"

router = APIRouter()


@router.get("/", include_in_schema=False)
def page() -> FileResponse:
    return FileResponse(
        STATIC_DIR / "index.html", media_type="text/html", headers={"Cache-Control": "no-cache"}
    )
