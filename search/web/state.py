"""What the request handlers share, and how a route reaches it.

One WebState per app (create_app builds it, the lifespan closes it), kept on
``app.state.wherein``; a route takes it as a parameter typed ``Web``, a FastAPI
dependency that reads it from the request's app, so the route modules hold no
globals and two apps in one process (the tests make many) never share one.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Annotated

from fastapi import Depends, Request

from wherein.schemas.errors import IndexError_
from wherein.search.cache.limit import CacheJanitor, cache_limit_bytes, usable_cache
from wherein.search.cache.thumbs import ResizedCache
from wherein.search.cache.vision_store import VISION_DIR, VisionStore
from wherein.search.service.search import Template
from wherein.search.web import DEFAULT_PREFETCH_MASKS
from wherein.search.web.files import BadRequest, IndexedFile, NotFound
from wherein.search.web.masks import MaskService
from wherein.search.web.videos import frame_image, is_timed

THUMB_SIDE = 384  # grid tiles are ~200 CSS px: sharp on 2x screens
PREVIEW_SIDE = 1600
# Threads for the heavy work (decoding a photo for a thumbnail or preview; a search, whose
# query encoding allocates tensors and starts a team of OpenMP threads per calling thread):
# more than the cores only adds memory, since each holds its image or tensors and malloc
# keeps freed heap per thread. Requests hand the work to these few and wait.
WORK_THREADS = max(2, min(4, os.cpu_count() or 2))


class WebState:
    """What the request handlers share: one Searcher, a catalog connection, caches."""

    def __init__(
        self,
        index_dir: Path,
        models_dir: Path | None,
        template: str | Template | None,
        cache_bytes: int | None = None,
        prefetch_masks: int = DEFAULT_PREFETCH_MASKS,
    ) -> None:
        from wherein.search.service.search import open_index

        self.prefetch_masks = prefetch_masks

        self.searcher = open_index(index_dir, models_dir, template=template)
        self.index_dir = self.searcher.store.dir
        self.catalog = self.searcher.store.reader()
        self.db_lock = threading.Lock()
        self._closed = False
        self.cache_dir = self.index_dir / "cache"
        writable = usable_cache(self.cache_dir)
        self.decoding = ThreadPoolExecutor(WORK_THREADS, thread_name_prefix="wherein-decode")
        self.searching = ThreadPoolExecutor(WORK_THREADS, thread_name_prefix="wherein-search")
        self.thumbs = ResizedCache(
            self.cache_dir / "thumbs" if writable else None,
            THUMB_SIDE,
            pool=self.decoding,
            frames=frame_image,
        )
        self.previews = ResizedCache(
            self.cache_dir / "previews" if writable else None,
            PREVIEW_SIDE,
            85,
            pool=self.decoding,
            frames=frame_image,
        )
        self.janitor = CacheJanitor(
            self.cache_dir, cache_bytes if cache_bytes is not None else cache_limit_bytes()
        )
        self.masks = MaskService(
            self.searcher.models.root,
            self.cache_dir / "masks" if writable else None,
            on_added=self.janitor.added,
            store=VisionStore(self.cache_dir / VISION_DIR, self.janitor) if writable else None,
        )
        self._folders: tuple[tuple, list[dict]] | None = None

    def close(self) -> None:
        # The mask worker reads catalog rows (its guesses resolve hits): it stops first, and
        # the catalog closes under the lock its readers take, never under a read.
        self.masks.close()
        self.decoding.shutdown(cancel_futures=True)
        self.searching.shutdown(cancel_futures=True)
        with self.db_lock:
            self._closed = True
            self.catalog.close()
        self.searcher.close()

    def indexed(self, image_id: int, time: float | None = None) -> IndexedFile:
        """The catalog's file; for a video, its frame at `time` seconds (None: the first).
        A time given for a photo is a BadRequest."""
        with self.db_lock:
            if self._closed:
                raise IndexError_("the web app is shutting down")
            row = self.catalog.rows_by_ids([image_id]).get(image_id)
        if row is None:
            raise NotFound(f"image {image_id}: not in this index")
        f = IndexedFile.from_row(row)
        if is_timed(f):
            return f.at(time or 0.0)
        if time is not None:
            raise BadRequest(f"t: image {image_id} is a photo; only a video's frames have a time")
        return f

    def file(self, image_id: int) -> IndexedFile:
        """The catalog's file itself (a video as a whole: its bytes, not a frame)."""
        return replace(self.indexed(image_id), time=None)

    @contextmanager
    def serving(self, f: IndexedFile) -> Iterator[None]:
        """Around serving one image's derivatives: when its file turns out gone, drop what
        the caches keep of it (thumbnail, preview, masks) and answer 404."""
        try:
            yield
        except NotFound:
            self.thumbs.forget(f.id)
            self.previews.forget(f.id)
            self.masks.forget(f)
            raise

    def folders(self) -> list[dict]:
        with self.db_lock:
            if self._closed:
                raise IndexError_("the web app is shutting down")
            stamp = (
                self.catalog.generation,
                self.catalog.count_images(),
                self.catalog.max_image_id(),
            )
            if self._folders is not None and self._folders[0] == stamp:
                return self._folders[1]
            counts = Counter(os.path.dirname(p) for p in self.catalog.all_paths())
        out = [{"folder": f, "count": n} for f, n in sorted(counts.items())]
        self._folders = (stamp, out)
        return out


async def web_state(request: Request) -> WebState:
    # async: a plain lookup, run on the event loop rather than costing a threadpool hop
    return request.app.state.wherein


Web = Annotated[WebState, Depends(web_state)]
