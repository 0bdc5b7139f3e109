"""Resized JPEGs of indexed images (grid thumbnails, detail previews), made once and kept on disk.

INDEX/cache/thumbs/<id>-<sha256[:16]>.jpg: keyed by the indexed content, so a
file that changes and is re-indexed gets a new entry (old ones are just unused); a
video's frame is <id>-<sha256[:16]>-t<ms>.jpg, one per moment shown.
Entries are written to a temporary name and renamed, so a reader never sees a
half-written JPEG. A kept entry is served only while the photo is still the indexed
content (indexed.check_current: one stat); ``forget`` drops an image's entries. When the
index folder is read-only, images are made per request and not kept.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from contextlib import suppress
from pathlib import Path

from PIL import Image

from wherein.indexer.imaging import DecodeError, decode
from wherein.indexer.indexed import IndexedFile, check_current, read_verified
from wherein.indexer.store.atomic import write_atomic
from wherein.schemas.errors import FileChanged

LOCK_STRIPES = 64  # per-entry locks, shared by hash: a lock per image ever asked would grow


class ResizedCache:
    def __init__(
        self,
        directory: Path | None,
        max_side: int,
        quality: int = 82,
        pool: Executor | None = None,
        frames: Callable[[IndexedFile], Image.Image] | None = None,
    ) -> None:
        """pool: the few threads that read and decode photos (a 12-MP photo is ~36 MB
        decoded: 32 request threads at once would hold a gigabyte, and malloc keeps freed
        heap per thread); shared by the thumbnail and preview caches. None: the caller's.
        frames: how a video's frame (an IndexedFile with a time) is read; None: no videos."""
        self.dir = directory
        self.frames = frames
        self.max_side = max_side
        self.quality = quality
        self.pool = pool
        self._locks = [threading.Lock() for _ in range(LOCK_STRIPES)]

    def path_for(self, f: IndexedFile) -> Path | None:
        return self.dir / f"{f.key}.jpg" if self.dir is not None else None

    def get(self, f: IndexedFile) -> tuple[Path | bytes, bool]:
        """(cached file, True) or (made now: the file, or bytes when it cannot be kept; False)."""
        path = self.path_for(f)
        if path is not None and path.is_file():
            check_current(f)  # never the thumbnail of a photo deleted or replaced since
            return path, True
        with self._lock_for(f.key):  # two requests for one new thumbnail make it once
            if path is not None and path.is_file():
                check_current(f)
                return path, True
            pool = self.pool
            data = self._make(f) if pool is None else pool.submit(self._make, f).result()
            if path is None:
                return data, False
            try:
                _write_atomic(path, data)
            except OSError:
                self.dir = None  # read-only index: stop trying, serve from memory
                return data, False
            return path, False

    def forget(self, file_id: int) -> None:
        """Drop every kept entry of one catalog id (any content it was indexed with)."""
        if self.dir is None:
            return
        with suppress(OSError):
            for path in self.dir.glob(f"{file_id}-*.jpg"):
                with suppress(FileNotFoundError):
                    path.unlink()

    def _make(self, f: IndexedFile) -> bytes:
        if f.time is not None and self.frames is not None:
            return self.render(self.frames(f))
        return self.render(read_verified(f))

    def render(self, data: bytes | Image.Image) -> bytes:
        """The resized JPEG of an image file's bytes, or of a decoded image (a video's frame)."""
        if isinstance(data, Image.Image):
            img = data
        else:
            try:
                img, _ = decode(data, draft_size=self.max_side)
            except DecodeError as exc:
                raise FileChanged(f"the indexed file no longer decodes ({exc})") from None
        img.thumbnail((self.max_side, self.max_side), Image.Resampling.LANCZOS)
        buf = io.BytesIO()
        img.save(buf, "JPEG", quality=self.quality, optimize=True)
        return buf.getvalue()

    def _lock_for(self, key: str) -> threading.Lock:
        return self._locks[hash(key) % LOCK_STRIPES]


def _write_atomic(path: Path, data: bytes) -> None:
    write_atomic(path, data, durable=False)  # a cache: an entry lost to a crash is made again
