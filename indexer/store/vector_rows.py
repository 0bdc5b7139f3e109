"""The vectors.f16 lifecycle: which items keep their vector as a float16 row of the vector
file (vector_file.py) rather than a float32 blob, how readers get them, and when a dead
row's disk blocks are given back.

Rows written by insert_images (build-index) keep their vector in the file and an empty
blob in ``embeddings`` (the row still says "embedded"); every other write keeps float32
blobs. Readers take the file's row wherever the blob is empty. transaction() is here
because a commit is where the file takes part: its rows are synced before the rows that
point at them commit, and dead rows are punched only after the commit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Self

import numpy as np

from wherein.indexer.store.base import blob_to_vector
from wherein.indexer.store.meta import MetaTable
from wherein.indexer.store.vector_file import VECTOR_FILE, VectorFile
from wherein.schemas.errors import IndexError_


class VectorFileRows(MetaTable):
    _depth: int  # nesting of transaction()
    # Ids whose file rows this transaction may have killed (_dying_all: maybe every
    # row); their disk blocks are given back once it commits (_punch_dead).
    _dying: list[int]
    _dying_all: bool

    def use_vector_file(self, dim: int) -> None:
        """From now on insert_images keeps vectors as float16 in vectors.f16 (call in a
        transaction, before the first insert_images)."""
        self.set_meta("vector_file", VECTOR_FILE)
        if self._vfile is None:
            self._open_vector_file(dim)

    @property
    def vector_file(self) -> Path | None:
        return self._vfile.path if self._vfile is not None else None

    def _open_vector_file(self, dim: int | None = None) -> None:
        dim = dim or int(self.get_meta("dim", 0) or 0)
        path = self.path.parent / VECTOR_FILE
        if self.readonly and not path.is_file():
            raise IndexError_(f"{path}: missing (the catalog keeps its vectors there)")
        self._vfile = VectorFile(path, dim, readonly=self.readonly)

    def _file_ids_between(self, lo: int, hi: int) -> np.ndarray:
        """The ids in [lo, hi] whose committed vector is a row of the vector file."""
        rows = self._conn.execute(
            "SELECT item_id FROM embeddings WHERE item_id BETWEEN ? AND ? AND length(vector) = 0",
            (lo, hi),
        ).fetchall()
        return np.array([r[0] for r in rows], np.int64)

    def max_file_row_id(self) -> int:
        """The highest id whose vector is a row of the vector file (0 if none): rows that
        `index` added to an index build-index made keep float32 blobs, past the file's end."""
        row = self._conn.execute(
            "SELECT max(item_id) FROM embeddings WHERE length(vector) = 0"
        ).fetchone()
        return int(row[0] or 0)

    def _doom(self, ids: Iterable[int]) -> None:
        """These ids' file rows may be dead once the transaction commits."""
        if self._vfile is not None and not self._dying_all:
            self._dying.extend(int(i) for i in ids)

    def _punch_dead(self) -> None:
        """Give back the disk blocks of file rows the committed transaction killed.

        Only after the commit: until then a rollback (crash, error) brings the rows back,
        and a hole punched under them would have lost their vectors. A crash between the
        commit and the punch leaves dead bytes allocated, never a hole under a live row:
        liveness is read from the committed catalog, a dead id never lives again (ids are
        never reused), and the writer lock keeps every other write of the file out.
        A search that still reads an older snapshot may see a just-deleted row as zeros.
        """
        dying, every = self._dying, self._dying_all
        self._dying, self._dying_all = [], False
        if self._vfile is None or self.readonly or not (dying or every):
            return
        ids = None if every else np.array(dying, np.int64)
        with contextlib.suppress(OSError):  # best effort: the commit stands either way
            self._vfile.punch_dead(self._file_ids_between, ids)

    def reclaim_vector_file(self) -> int:
        """Punch every disk block of the vector file that no live row touches (files with
        dead bytes from before deletions punched them); returns the bytes given back.
        Call outside a transaction, holding the index's write lock."""
        if self._vfile is None or self.readonly:
            return 0
        return self._vfile.punch_dead(self._file_ids_between)

    def vector_file_usage(self) -> dict | None:
        """vectors.f16's apparent and allocated bytes, the bytes of its live rows, and
        about how many allocated bytes are dead (allocated - live: blocks a live row
        shares are counted dead but never given back). None without the file."""
        if self._vfile is None:
            return None
        live = self._conn.execute(
            "SELECT count(*) FROM embeddings WHERE length(vector) = 0"
        ).fetchone()[0]
        allocated = self._vfile.allocated_bytes()
        live_bytes = int(live) * self._vfile.row_bytes
        return {
            "file": str(self._vfile.path),
            "apparent_bytes": self._vfile.path.stat().st_size,
            "allocated_bytes": allocated,
            "live_bytes": live_bytes,
            "dead_bytes": max(0, allocated - live_bytes),
        }

    def _from_file(self, ids: list[int], blobs: list[bytes], span: bool = False) -> np.ndarray:
        """[n, dim] float32: the blobs, and the file's rows where a blob is empty."""
        empty = [j for j, b in enumerate(blobs) if not b]
        if not empty:
            return _stacked(blobs)
        if self._vfile is None:
            raise IndexError_(f"{self.path}: vectors kept in {VECTOR_FILE}, which is not set up")
        want = np.array([ids[j] for j in empty], np.int64)
        from_file = self._vfile.read_span(want) if span else self._vfile.read(want)
        if len(empty) == len(blobs):
            return from_file
        out = np.zeros((len(blobs), self._vfile.dim), np.float32)
        out[empty] = from_file
        full = [j for j, b in enumerate(blobs) if b]
        out[full] = np.stack([blob_to_vector(blobs[j]) for j in full])
        return out

    @contextmanager
    def transaction(self) -> Iterator[Self]:
        """One atomic unit: all of it lands, or (crash, Ctrl-C, error) none of it.

        Nested calls join the outermost unit.
        """
        if self._depth:
            self._depth += 1
            try:
                yield self
            finally:
                self._depth -= 1
            return
        self._depth = 1
        try:
            with self._conn:
                yield self
                if self._vfile is not None:
                    self._vfile.sync()  # its rows are durable before the rows pointing at them
            self._depth = 0
            self._punch_dead()
        finally:
            self._depth = 0
            self._dying, self._dying_all = [], False  # rolled back: nothing died


def _stacked(blobs: list[bytes]) -> np.ndarray:
    """[n, dim] float32 of equal-length vector blobs: one buffer, not n arrays stacked (a
    search reads its 200 candidates' vectors); np.stack's answer, and its error for blobs
    of unequal length."""
    size = len(blobs[0])
    if any(len(b) != size for b in blobs):
        return np.stack([blob_to_vector(b) for b in blobs])
    return np.frombuffer(bytearray(b"".join(blobs)), dtype="<f4").reshape(len(blobs), -1)
