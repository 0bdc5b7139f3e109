"""What `wherein serve` keeps open between requests, and the work its routes ask for.

The web app (search/web) is a front-end like the CLI: it parses requests and renders
answers, and this module does the rest. One ``ServeSession`` per app: one Searcher over
the index, a catalog connection for the files' records, the thumbnail and preview caches,
the mask session (search/service/mask.py) and INDEX/cache's size limit.

Files are addressed by catalog id only, and served only while the file is still the
indexed content (indexer/indexed.py). What a file is comes from the catalog: the media
kind the indexer gave it by its content (wherein.indexer.kinds), whatever its name says.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from wherein.indexer.indexed import IndexedFile, check_current, frame_image, opened_verified
from wherein.indexer.kinds import registry as media
from wherein.indexer.video.detect import HEAD_BYTES, sniff
from wherein.schemas import locations
from wherein.schemas.errors import BadRequest, IndexError_, NotFound
from wherein.schemas.records import iso_time
from wherein.search.cache.limit import CacheJanitor, cache_limit_bytes, usable_cache
from wherein.search.cache.thumbs import ResizedCache
from wherein.search.cache.vision_store import VISION_DIR, VisionStore
from wherein.search.ranked import Ranked
from wherein.search.service import DEFAULT_PREFETCH_MASKS
from wherein.search.service.lanes import background_pool, search_pool
from wherein.search.service.mask import MaskSession
from wherein.search.service.recent import Recent
from wherein.search.service.search import (
    MODEL_TEMPLATE,
    SearchRequest,
    SearchResult,
    Template,
)
from wherein.search.service.search import search as search_service

__all__ = [
    "DEFAULT_PREFETCH_MASKS",
    "plays",
    "timed",
    "MODEL_TEMPLATE",
    "IndexedFile",
    "WORK_THREADS",
    "ServeSession",
    "Template",
    "VideoFile",
]

# Answers a session keeps for their request (a block of up to 200 hits, ~0.3 MB each).
RECENT_SEARCHES = 16
THUMB_SIDE = 384  # grid tiles are ~200 CSS px: sharp on 2x screens
PREVIEW_SIDE = 1600
# Threads for the heavy work (decoding a photo for a thumbnail or preview; a search, whose
# query encoding allocates tensors and starts a team of OpenMP threads per calling thread):
# more than the cores only adds memory, since each holds its image or tensors and malloc
# keeps freed heap per thread. Requests hand the work to these few and wait, each kind in
# its own lane (search/service/lanes.py).
WORK_THREADS = max(2, min(4, os.cpu_count() or 2))


def timed(kind: str | None) -> bool:
    """Whether files of this media kind have frames at times (a hit's time, ?t= frames)."""
    return media.timed(kind)


def plays(kind: str | None) -> bool:
    """Whether a browser plays files of this media kind itself (a video_url)."""
    return media.plays(kind)


@dataclass(frozen=True)
class VideoFile:
    """An indexed video opened for reading: its verified descriptor and the container its
    first bytes announce ("mp4", "mov", ...; None: unknown)."""

    file: IndexedFile
    fd: int
    container: str | None


class ServeSession:
    """What the request handlers share: one Searcher, a catalog connection, caches, masks."""

    def __init__(
        self,
        index_dir: str | Path | None,
        models_dir: str | Path | None,
        template: str | Template | None = MODEL_TEMPLATE,
        cache_mb: float | None = None,
        prefetch_masks: int = DEFAULT_PREFETCH_MASKS,
    ) -> None:
        """Opens the index now: a missing one fails here, not on the first request.
        cache_mb: size limit of INDEX/cache [env WHEREIN_CACHE_MB; default 512]."""
        from wherein.indexer import paths as P
        from wherein.indexer.models.litert_graph import run_concurrently
        from wherein.search.service.search import open_index

        # Many requests at once: graphs on the runtime whose runs let the other requests'
        # threads run Python (a new query's text encoding, a mask's vision pass).
        run_concurrently()
        self.prefetch_masks = prefetch_masks
        self.searcher = open_index(
            P.index_dir(index_dir), Path(models_dir) if models_dir else None, template=template
        )
        self.index_dir = self.searcher.store.dir
        self.catalog = self.searcher.store.reader()
        self.db_lock = threading.Lock()
        self._closed = False
        self.cache_dir = self.index_dir / "cache"
        writable = usable_cache(self.cache_dir)
        self.decoding = background_pool(WORK_THREADS, "wherein-decode")
        self.searching = search_pool(WORK_THREADS, "wherein-search")
        # One thread: the text tower encodes one text at a time, and a search whose texts
        # are known must not wait in the search lane behind one that is being encoded.
        self.encoding = ThreadPoolExecutor(1, thread_name_prefix="wherein-encode")
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
        self.janitor = CacheJanitor(self.cache_dir, cache_limit_bytes(cache_mb))
        self.masks = MaskSession(
            self.searcher.models.root,
            self.cache_dir / "masks" if writable else None,
            on_added=self.janitor.added,
            store=VisionStore(self.cache_dir / VISION_DIR, self.janitor) if writable else None,
        )
        self._folders: tuple[tuple, list[dict]] | None = None
        self._recent: Recent[tuple, SearchResult] = Recent(RECENT_SEARCHES)

    def close(self) -> None:
        # The mask worker reads catalog rows (its guesses resolve hits): it stops first, and
        # the catalog closes under the lock its readers take, never under a read.
        self.masks.close()
        self.decoding.shutdown(cancel_futures=True)
        self.encoding.shutdown(cancel_futures=True)
        self.searching.shutdown(cancel_futures=True)
        with self.db_lock:
            self._closed = True
            self.catalog.close()
        self.searcher.close()

    # -- search --------------------------------------------------------------------------------
    def search(self, request: SearchRequest, shown: slice | None = None) -> SearchResult:
        """One search, in its lanes: a text not encoded lately is encoded first on the
        encoding thread, then the search runs on the search threads. Its hits are built from
        the catalog as they are read (wherein.search.ranked); shown: the positions the caller
        will read (a page), built on the search thread with the search, under the one hold
        of the Searcher's lock it takes.

        The same request again while the index is unchanged (a page turn: pages are cut
        from one block of hits; going back to a query) reuses the answer, its files'
        existence looked at again: what a new search would answer, without its work."""
        stamp = self.searcher.stamp()  # before the search: a commit during it is a new stamp
        kept = self._recent.get((request, stamp))
        if kept is not None:
            return _rechecked(kept, request.check_exists)
        t0 = time.perf_counter()
        new = self.searcher.unencoded(request.parsed)
        if new:
            self.encoding.submit(self.searcher.encode_ahead, new).result()
        submitted = time.perf_counter()
        started: list[float] = []

        def run() -> SearchResult:
            started.append(time.perf_counter())
            try:
                # A page reads a few hits of the block: only theirs are built.
                result = search_service(self.searcher, request, lazy=True)
                if shown is not None and isinstance(result.hits, Ranked):
                    result.hits.build(shown)
                return result
            finally:
                started.append(time.perf_counter())

        result = self.searching.submit(run).result()
        if request.mask is None and request.export is None:  # an answer only, nothing written
            self._recent.put((request, stamp), result)
        # What it waited for: a new text's encoding, then a search thread.
        waits = {
            "encode_wait_ms": (submitted - t0) * 1e3,
            "queued_ms": (started[0] - submitted) * 1e3,
            "lane_ms": (started[1] - started[0]) * 1e3,
        }
        return replace(result, timings={**result.timings, **waits})

    # -- files ---------------------------------------------------------------------------------
    def indexed(self, file_id: int, time: float | None = None) -> IndexedFile:
        """The catalog's file; for a video, its frame at `time` seconds (None: the first).
        A time given for a photo is a BadRequest."""
        with self.db_lock:
            if self._closed:
                raise IndexError_("the web app is shutting down")
            row = self.catalog.rows_by_ids([file_id]).get(file_id)
        if row is None:
            raise NotFound(f"image {file_id}: not in this index")
        f = IndexedFile.from_row(row)
        if f.timed:
            return f.at(time or 0.0)
        if time is not None:
            raise BadRequest(f"t: image {file_id} is a photo; only a video's frames have a time")
        return f

    def file(self, file_id: int) -> IndexedFile:
        """The catalog's file itself (a video as a whole: its bytes, not a frame)."""
        return replace(self.indexed(file_id), time=None)

    def record(self, file_id: int) -> dict[str, Any]:
        """One file's catalog record (schemas/api.image.schema.json, less its URLs)."""
        f = self.file(file_id)
        return {
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
        }

    def check_current(self, f: IndexedFile) -> None:
        """NotFound / FileChanged unless f's file is still the indexed content (one stat)."""
        check_current(f)

    @contextmanager
    def video(self, file_id: int) -> Iterator[VideoFile]:
        """An indexed video's verified descriptor, open while the context lasts; NotFound for
        a photo's id (or one not in the index), FileChanged for a changed file."""
        f = self.file(file_id)
        if not f.plays:
            raise NotFound(f"image {f.id}: not a video in this index")
        with self.serving(f), opened_verified(f) as fd:
            yield VideoFile(f, fd, sniff(os.pread(fd, HEAD_BYTES, 0)))

    @contextmanager
    def serving(self, f: IndexedFile) -> Iterator[None]:
        """Around serving one file's derivatives: when its file turns out gone, drop what
        the caches keep of it (thumbnail, preview, masks) and answer NotFound."""
        try:
            yield
        except NotFound:
            self.thumbs.forget(f.id)
            self.previews.forget(f.id)
            self.masks.forget(f)
            raise

    def folders(self) -> list[dict]:
        """Folders that hold indexed files, with their counts (for the folder filter)."""
        with self.db_lock:
            if self._closed:
                raise IndexError_("the web app is shutting down")
            stamp = (
                self.catalog.generation,
                self.catalog.count_images(),
                self.catalog.max_id(),
            )
            if self._folders is not None and self._folders[0] == stamp:
                return self._folders[1]
            counts = Counter(os.path.dirname(p) for p in self.catalog.all_paths())
        out = [{"folder": f, "count": n} for f, n in sorted(counts.items())]
        self._folders = (stamp, out)
        return out

    # -- status --------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """`wherein status --json`'s object, plus the caches and the mask work
        (schemas/api.status.schema.json)."""
        from wherein.search.service.index import describe

        self.searcher.refresh()  # counts as of the latest commit, not the last search
        info = describe(self.searcher.store, self.searcher.models).to_dict()
        info.pop("skipped", None)  # can be long; `wherein status` lists them
        cache = self.cache_dir
        info.update(
            standin=self.searcher.models.is_standin,
            cache={
                "dir": str(cache),
                "writable": self.thumbs.dir is not None,
                "thumbs": _count(cache / "thumbs", "*.jpg"),
                "previews": _count(cache / "previews", "*.jpg"),
                "masks": _count(cache / "masks", "*/*.json"),
                "vision_passes": _count(cache / VISION_DIR, "*/*.npy"),
                "bytes": _du(cache),
                "limit_bytes": self.janitor.limit,
                "pruned_files": self.janitor.pruned,
            },
            masks={
                "vision_passes": self.masks.vision_passes,
                "vision_passes_loaded": self.masks.store.loaded if self.masks.store else 0,
                "decoder_runs": self.masks.decoder_runs,
                "prefetched": self.masks.prefetched,
                "prefetch_queued": self.masks.prefetch_queued,
            },
        )
        return info


def _rechecked(result: SearchResult, check_exists: bool) -> SearchResult:
    """A kept answer as a search now gives it: each hit's file looked at again."""
    t0 = time.perf_counter()
    hits = (
        [h.replace(exists=locations.exists(h.path)) for h in result.hits]
        if check_exists
        else result.hits
    )
    ms = (time.perf_counter() - t0) * 1e3
    timings = {"sync_ms": 0.0, "encode_ms": 0.0, "ann_ms": 0.0, "join_ms": ms, "total_ms": ms}
    return replace(result, hits=hits, timings={**timings, "reused": 1.0})


def _count(folder: Path, pattern: str) -> int:
    return sum(1 for _ in folder.glob(pattern)) if folder.is_dir() else 0


def _du(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            with suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total
