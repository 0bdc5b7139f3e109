"""/api/status: `wherein status --json`'s object, plus the app's caches and mask work."""

from __future__ import annotations

import os
from contextlib import suppress
from pathlib import Path

from fastapi import APIRouter

from wherein.search.cache.vision_store import VISION_DIR
from wherein.search.web.responses import JSONResponse
from wherein.search.web.routes.common import json_schema_response
from wherein.search.web.state import Web

router = APIRouter()


@router.get("/api/status", responses=json_schema_response("StatusResponse", "Index and app status"))
def status(state: Web) -> JSONResponse:
    from wherein.search.service.index import describe

    state.searcher.refresh()  # counts as of the latest commit, not the last search
    # The same object as `wherein status --json` (schemas/status.schema.json)
    info = describe(state.searcher.store, state.searcher.models).to_dict()
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


def _count(folder: Path, pattern: str) -> int:
    return sum(1 for _ in folder.glob(pattern)) if folder.is_dir() else 0


def _du(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            with suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total
