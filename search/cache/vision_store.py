"""CLIPSeg vision passes kept on disk, so a later process masks a photo without the vision graph.

The vision pass is ~all of a mask's cost (0.7-1.2 s of CPU per photo at full size,
the decoder ~20 ms), and the memory cache dies with its process: a second
`wherein search ... --mask --mask-prompt other` on the same hits, or a restarted
`wherein serve`, would run it again. Entries live under INDEX/cache/vision and
share that cache's size limit (limit.py):

    INDEX/cache/vision/<vision graph id>/<sha256 of the photo's bytes>.npy

- Keyed by content, not path: a moved or renamed photo keeps its entry, a changed
  one gets a new key (the photo is read anyway, to decode it for the overlay).
- A refinement's crop passes (localize/refine.py) live beside them, keyed by a hash of
  the photo's key and the crop's box (masking.crop_key).
- Keyed by the vision graph's file identity (name, size, mtime): a new or
  optimized graph never reads another graph's features.
- Stored as float16 ([3, tokens, width]: t3, t6, t9), 2.2 MB at full size. Every
  vision pass is rounded the same way before use (``rounded``), so a mask is the
  same whether its pass came from disk or was just computed.
- Written atomically (temp file + rename); an unreadable or misshapen entry is a
  miss, deleted, and computed again. A read-only cache simply stores nothing.
"""

from __future__ import annotations

import hashlib
import io
from contextlib import suppress
from pathlib import Path
from typing import Any

import numpy as np

from wherein.indexer.store.atomic import write_atomic
from wherein.indexer.store.index_store import CATALOG_FILE
from wherein.search.cache.limit import CacheJanitor, cache_limit_bytes, usable_cache

VISION_DIR = "vision"
STORED_DTYPE = np.float16


def content_key(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def graph_id(model: Any) -> str | None:
    """The vision graph's file identity, or None (a graph without a file: nothing is stored)."""
    path = getattr(getattr(model, "vision", None), "path", None)
    if path is None:
        return None
    try:
        st = Path(path).stat()
    except OSError:
        return None
    digest = hashlib.sha256(f"{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:12]
    return f"{Path(path).stem}-{digest}"


def rounded(features: Any) -> Any:
    """The features as they are stored: float16. Kept so, a pass held in memory takes half
    the bytes; the decoder widens its inputs to float32, which is exact for float16
    values, so a mask is the same to the bit whether its pass was just run, kept or read
    back from the store."""
    return type(features)(
        *(np.asarray(t, dtype=np.float32).astype(STORED_DTYPE) for t in features.in_slot_order())
    )


class VisionStore:
    """load/save of one photo's vision pass for one model; thread-safe (files only)."""

    def __init__(self, root: Path, janitor: CacheJanitor | None = None) -> None:
        self.root = Path(root)
        self.janitor = janitor
        self.loaded = 0  # vision passes read back instead of computed
        self.saved = 0

    @classmethod
    def in_index(cls, index_dir: Path, cache_mb: float | None = None) -> VisionStore | None:
        """The store of an index's cache (with its size limit), or None when there is no index
        there (a folder without a catalog gets no cache folder) or its cache cannot be
        written (read-only index, or INDEX/cache a link elsewhere)."""
        cache = Path(index_dir) / "cache"
        if not (Path(index_dir) / CATALOG_FILE).is_file() or not usable_cache(cache):
            return None
        return cls(cache / VISION_DIR, CacheJanitor(cache, cache_limit_bytes(cache_mb)))

    def _path(self, model: Any, key: str) -> Path | None:
        gid = graph_id(model)
        return self.root / gid / f"{key}.npy" if gid is not None else None

    def load(self, model: Any, key: str) -> Any | None:
        """The stored features (float32 of float16 precision), or None."""
        path = self._path(model, key)
        if path is None:
            return None
        try:
            data = path.read_bytes()
        except OSError:
            return None
        try:
            arr = np.load(io.BytesIO(data), allow_pickle=False)
            if arr.ndim != 4 or arr.shape[0] != 3 or arr.dtype != STORED_DTYPE:
                raise ValueError(f"shape {arr.shape}, dtype {arr.dtype}")
        except (ValueError, OSError, EOFError):
            with suppress(OSError):
                path.unlink()  # torn or foreign: the next pass writes it again
            return None
        if self.janitor is not None:
            self.janitor.used(path)
        self.loaded += 1
        return model.features_from(list(arr))  # float16, as rounded() keeps a fresh pass

    def save(self, model: Any, key: str, features: Any) -> None:
        """Store features; failures (full disk, read-only folder) only cost the next pass."""
        path = self._path(model, key)
        if path is None:
            return
        arr = np.stack([np.asarray(t, dtype=STORED_DTYPE) for t in features.in_slot_order()])
        buf = io.BytesIO()
        np.save(buf, arr, allow_pickle=False)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, buf.getvalue(), durable=False)  # a cache: a crash loses an entry
        except OSError:
            return
        self.saved += 1
        if self.janitor is not None:
            self.janitor.added([path])
