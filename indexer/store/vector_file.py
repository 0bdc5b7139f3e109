"""The catalog's vectors as float16 rows of one flat file beside it (``vectors.f16``).

Search re-scores its FAISS candidates against exact vectors; at 10M 768-d vectors
float32 blobs in SQLite take ~40 GB (one 3 KB row per 4 KB page), this file 15 GB
(float16: re-scoring recall measured in docs/scale.md). Row ``id - 1`` holds the
vector of catalog id ``id``: a lookup is an offset, no index, and the kernel's
page cache is the only cache (the file is memory-mapped for reads, never read whole).

Invariants (the catalog keeps them; see Catalog.use_vector_file):
- A row is written before the catalog row that points at it commits, and the file is
  fsynced before that commit: a committed row never points at a half-written vector.
- A row is written once, for an id no committed row has (ids are never reused);
  deleting a catalog row leaves its file row as dead bytes. A row whose catalog
  insert rolled back may be written again by the next run that takes its id.
- Rows never written read as zeros (a hole in a sparse file).
"""

from __future__ import annotations

import contextlib
import mmap
import os
from pathlib import Path

import numpy as np

VECTOR_FILE = "vectors.f16"
DTYPE = np.dtype("<f2")


class VectorFile:
    def __init__(self, path: Path, dim: int, readonly: bool = False) -> None:
        self.path, self.dim, self.readonly = path, dim, readonly
        self.row_bytes = dim * DTYPE.itemsize
        flags = os.O_RDONLY if readonly else os.O_RDWR | os.O_CREAT
        self._fd = os.open(path, flags, 0o644)
        self._map: mmap.mmap | None = None
        self._rows = np.zeros((0, dim), DTYPE)  # the mapped part of the file
        self._dirty = False

    def close(self) -> None:
        self._rows = np.zeros((0, self.dim), DTYPE)
        if self._map is not None:
            with contextlib.suppress(BufferError):  # a caller still holds a view: the GC unmaps
                self._map.close()
            self._map = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def write(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Rows for these ids (any order); one pwrite per run of consecutive ids."""
        ids = np.asarray(ids, np.int64)
        if not len(ids):
            return
        if ids.min() < 1:
            raise ValueError("vector file rows are for ids >= 1")
        order = np.argsort(ids, kind="stable")
        ids, rows = ids[order], np.ascontiguousarray(vectors[order], dtype=DTYPE)
        breaks = np.flatnonzero(np.diff(ids) != 1) + 1
        for lo, hi in zip(np.r_[0, breaks], np.r_[breaks, len(ids)], strict=True):
            data = rows[lo:hi].tobytes()
            offset = int(ids[lo] - 1) * self.row_bytes
            while data:
                n = os.pwrite(self._fd, data, offset)
                data, offset = data[n:], offset + n
        self._dirty = True

    def sync(self) -> None:
        """Durable before the catalog commits the rows that point here."""
        if self._dirty:
            os.fsync(self._fd)
            self._dirty = False

    def read(self, ids: np.ndarray) -> np.ndarray:
        """float32 [len(ids), dim]; ids past the end of the file read as zeros."""
        ids = np.asarray(ids, np.int64)
        out = np.zeros((len(ids), self.dim), np.float32)
        if not len(ids):
            return out
        if int(ids.max()) > len(self._rows):
            self._remap()  # another process (or this one) wrote past the mapped end
        inside = (ids >= 1) & (ids <= len(self._rows))
        out[inside] = self._rows[ids[inside] - 1]
        return out

    def read_span(self, ids: np.ndarray) -> np.ndarray:
        """As read(), for ids sorted ascending and mostly consecutive (a pass over the whole
        catalog): one pread of the span, page-cache read-ahead instead of page faults."""
        ids = np.asarray(ids, np.int64)
        if not len(ids) or ids[0] < 1:
            return self.read(ids)
        lo, hi = int(ids[0]), int(ids[-1])
        data = os.pread(self._fd, (hi - lo + 1) * self.row_bytes, (lo - 1) * self.row_bytes)
        rows = np.frombuffer(data, DTYPE)
        rows = rows[: len(rows) // self.dim * self.dim].reshape(-1, self.dim)
        out = np.zeros((len(ids), self.dim), np.float32)
        inside = ids - lo < len(rows)
        out[inside] = rows[ids[inside] - lo]
        return out

    def _remap(self) -> None:
        rows = os.fstat(self._fd).st_size // self.row_bytes
        if rows <= len(self._rows):
            return
        old = self._map
        self._map = mmap.mmap(self._fd, rows * self.row_bytes, access=mmap.ACCESS_READ)
        if hasattr(mmap, "MADV_RANDOM"):  # re-scoring reads ~40 scattered rows: no read-ahead
            self._map.madvise(mmap.MADV_RANDOM)
        self._rows = np.frombuffer(self._map, DTYPE).reshape(rows, self.dim)
        if old is not None:
            with contextlib.suppress(BufferError):  # a view of it is still alive: the GC unmaps
                old.close()
