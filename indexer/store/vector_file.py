"""The catalog's vectors as float16 rows of one flat file beside it (``vectors.f16``).

Search re-scores its FAISS candidates against exact vectors; at 10M 768-d vectors
float32 blobs in SQLite take ~40 GB (one 3 KB row per 4 KB page), this file 15 GB
(float16: re-scoring recall measured in docs/scale.md). Row ``id - 1`` holds the
vector of catalog id ``id``: a lookup is an offset, no index, and the kernel's
page cache is the only cache (the file is memory-mapped for reads, never read whole).

Invariants (the catalog keeps them; see Catalog.use_vector_file):
- A row is written before the catalog row that points at it commits, and the file is
  fsynced before that commit: a committed row never points at a half-written vector.
- A row is written once, for an id no committed row has (ids are never reused).
  A row whose catalog insert rolled back may be written again by the next run that
  takes its id.
- Rows never written read as zeros (a hole in a sparse file).
- Dead rows (their catalog row deleted, or its vector kept elsewhere) give their disk
  blocks back: punch_dead() punches holes over every filesystem block that no live row
  touches, after the catalog committed the change that killed them. A block shared
  with a live row is never punched, so a live row's bytes never change; a dead row in
  such a block keeps its (unread) bytes.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import mmap
import os
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

VECTOR_FILE = "vectors.f16"
DTYPE = np.dtype("<f2")
_FALLOC_FL_KEEP_SIZE, _FALLOC_FL_PUNCH_HOLE = 0x01, 0x02  # linux/falloc.h
_SWEEP_BLOCKS = 1 << 18  # blocks judged per catalog query in a whole-file pass (1 GiB at 4 KiB)


@functools.cache
def _fallocate() -> Callable[..., int] | None:
    """libc's fallocate (Linux only; None elsewhere): punching holes needs no dependency."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = getattr(libc, "fallocate64", None) or libc.fallocate
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    fn.restype = ctypes.c_int
    return fn


def punch_hole(fd: int, offset: int, length: int) -> bool:
    """Deallocate [offset, offset + length) of fd, keeping the file's size; the range then
    reads as zeros. False where the OS or filesystem cannot (nothing changed)."""
    fn = _fallocate()
    if fn is None:
        return False
    if fn(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, offset, length) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EOPNOTSUPP, errno.ENOSYS):
        return False
    raise OSError(err, os.strerror(err))


class VectorFile:
    def __init__(self, path: Path, dim: int, readonly: bool = False) -> None:
        self.path, self.dim, self.readonly = path, dim, readonly
        self.row_bytes = dim * DTYPE.itemsize
        flags = os.O_RDONLY if readonly else os.O_RDWR | os.O_CREAT
        self._fd = os.open(path, flags, 0o644)
        self._map: mmap.mmap | None = None
        self._rows = np.zeros((0, dim), DTYPE)  # the mapped part of the file
        self._dirty = False
        self._punchable = not readonly  # False once the filesystem refused a punch

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

    def allocated_bytes(self) -> int:
        """Disk space the file takes (holes take none); its apparent size is st_size."""
        return os.fstat(self._fd).st_blocks * 512

    def punch_dead(
        self, live: Callable[[int, int], np.ndarray], ids: np.ndarray | None = None
    ) -> int:
        """Punch holes over every filesystem block that only dead rows touch; returns the
        bytes of disk given back (0 where the filesystem cannot punch).

        live(lo, hi): the ids in [lo, hi] whose vector is in this file, as committed. ids:
        the rows that may have died (deleted catalog rows); only blocks touching them are
        judged. None: every block of the file (an index with dead bytes from before).
        The caller must hold the index's write lock and have no write of this file
        pending commit: a row written but not yet committed is not live and would be
        punched.
        """
        if not self._punchable:
            return 0
        st = os.fstat(self._fd)
        # Whole blocks only: a punch over part of a block zeroes that part (ext4), and a
        # live row in the rest of it must keep its bytes. A page-multiple of st_blksize is
        # a multiple of the filesystem's block either way.
        block, size = max(st.st_blksize, mmap.PAGESIZE), st.st_size
        nblocks, nrows = -(-size // block), -(-size // self.row_bytes)
        if ids is None:
            spans = [(0, nblocks - 1)]
        else:
            spans = self._blocks_of(np.asarray(ids, np.int64), block, nrows)
        before = st.st_blocks
        for b0, b1 in spans:
            for c0 in range(b0, b1 + 1, _SWEEP_BLOCKS):
                c1 = min(c0 + _SWEEP_BLOCKS - 1, b1, nblocks - 1)
                for start, stop in self._dead_runs(live, c0, c1, block, nrows):
                    if not punch_hole(self._fd, start * block, (stop - start) * block):
                        self._punchable = False
                        return 0
        return max(0, before - os.fstat(self._fd).st_blocks) * 512

    def _blocks_of(self, ids: np.ndarray, block: int, nrows: int) -> list[tuple[int, int]]:
        """The blocks the rows of these ids touch, as merged inclusive spans."""
        ids = np.unique(ids[(ids >= 1) & (ids <= nrows)])
        if not len(ids):
            return []
        breaks = np.flatnonzero(np.diff(ids) != 1) + 1
        first, last = ids[np.r_[0, breaks]], ids[np.r_[breaks, len(ids)] - 1]
        starts = (first - 1) * self.row_bytes // block
        ends = (last * self.row_bytes - 1) // block  # non-decreasing, as ids are sorted
        spans: list[tuple[int, int]] = []
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            if spans and s <= spans[-1][1] + 1:
                spans[-1] = (spans[-1][0], e)
            else:
                spans.append((s, e))
        return spans

    def _dead_runs(
        self, live: Callable[[int, int], np.ndarray], b0: int, b1: int, block: int, nrows: int
    ) -> list[tuple[int, int]]:
        """Runs [start, stop) of blocks in [b0, b1] that no live row touches."""
        blocks = np.arange(b0, b1 + 1, dtype=np.int64)
        first = blocks * block // self.row_bytes  # rows (id - 1) each block touches
        last = np.minimum(((blocks + 1) * block - 1) // self.row_bytes, nrows - 1)
        r0, r1 = int(first[0]), int(last[-1])
        alive = np.zeros(r1 - r0 + 1, np.int64)
        ids = np.asarray(live(r0 + 1, r1 + 1), np.int64)
        alive[ids[(ids >= r0 + 1) & (ids <= r1 + 1)] - 1 - r0] = 1
        seen = np.r_[0, np.cumsum(alive)]
        dead = seen[last - r0 + 1] == seen[first - r0]
        edges = np.flatnonzero(np.diff(np.r_[0, dead.astype(np.int8), 0]))
        return [(b0 + int(s), b0 + int(e)) for s, e in zip(edges[::2], edges[1::2], strict=True)]

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
