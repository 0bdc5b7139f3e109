"""/api/status: `wherein status --json`'s object, plus the app's caches and mask work."""

from __future__ import annotations

from fastapi import APIRouter

from wherein.search.web.responses import JSONResponse
from wherein.search.web.routes.common import json_schema_response
from wherein.search.web.state import Web

router = APIRouter()


@router.get("/api/status", responses=json_schema_response("StatusResponse", "Index and app status"))
def status(state: Web) -> JSONResponse:
    return JSONResponse(state.status())
