"""An index directory: the SQLite catalog, the FAISS vectors, and the writer lock.

INDEX/
  catalog.db (+ -wal, -shm)   source of truth (catalog.py)
  vectors.faiss, vectors.json derived vectors, replaced atomically (vectors.py)
  vectors.f16                 float16 vectors for re-scoring, if build-index wrote them
                              (vector_file.py; part of the catalog, rows by id)
  index.lock                  held by the one process that writes
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from wherein.indexer.normalize import unit_rows
from wherein.indexer.store.catalog import Catalog
from wherein.indexer.store.vector_file import VECTOR_FILE
from wherein.indexer.store.vectors import FAISS_FILE, SIDECAR_FILE, VectorIndex, index_ids
from wherein.schemas.errors import IndexError_, IndexLocked

CATALOG_FILE = "catalog.db"
LOCK_FILE = "index.lock"
LOCK_POLL_SECONDS = 0.5


@dataclass
class CheckReport:
    ok: bool = True
    problems: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)

    def fail(self, msg: str) -> None:
        self.ok = False
        self.problems.append(msg)


class IndexStore:
    """Open with ``IndexStore.open(dir, write=...)``; use as a context manager."""

    def __init__(self, directory: Path, catalog: Catalog, lock_fd: int | None) -> None:
        self.dir = directory
        self.catalog = catalog
        self.vectors = VectorIndex(directory)
        self._lock_fd = lock_fd
        self.sync_note = ""

    @property
    def writable(self) -> bool:
        return self._lock_fd is not None

    @classmethod
    def open(
        cls,
        directory: str | Path,
        write: bool = False,
        create: bool = False,
        load_vectors: bool = True,
        wait: bool = False,
        on_wait: Callable[[str], object] | None = None,
    ) -> IndexStore:
        """Open an index; ``write`` takes the writer lock (IndexLocked if another process has it).

        wait: poll until the other writer is done instead of failing; ``on_wait`` gets
        one line saying who is waited for (and again if the holder changes).
        """
        d = Path(directory)
        db = d / CATALOG_FILE
        if not db.is_file():
            if not create:
                raise IndexError_(
                    f"{d}: no wherein index here (run `wherein index PATH --index {d}` first)"
                )
            try:
                d.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise _cannot_write(d, exc) from None
        lock_fd = _take_lock(d, wait, on_wait) if write else None
        readonly = not write and db.is_file() and not os.access(d, os.W_OK)
        try:
            catalog = Catalog(db, readonly=readonly)
        except Exception as exc:
            if lock_fd is not None:
                os.close(lock_fd)
            raise _catalog_error(db, exc, readonly) from exc
        store = cls(d, catalog, lock_fd)
        if load_vectors:
            try:
                store.vectors.load()
            except BaseException:  # an on-disk index's .ivfdata missing: release lock and catalog
                store.close()
                raise
        return store

    def reader(self) -> Catalog:
        """A second, read-only connection to this index's catalog (the caller closes it).

        For threads that should not queue behind the store's own connection (the
        web app serves thumbnails while a search runs); under WAL it never blocks a writer.
        """
        return Catalog(self.dir / CATALOG_FILE, readonly=True)

    def ensure_vectors(self, persist: bool | None = None) -> str:
        """Make the FAISS index match the catalog (after a crash it may lag); return what was done."""
        note = self.vectors.sync(self.catalog)
        if note:
            self.sync_note = note
        if self.vectors.dirty and (persist if persist is not None else self.writable):
            self.vectors.save()
        return note

    def close(self) -> None:
        self.catalog.close()
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> IndexStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- inspection -------------------------------------------------------
    def disk_usage(self) -> dict[str, int]:
        """Bytes on disk per index file; vectors.f16 by its allocated blocks (deleted rows'
        blocks are punched out), on-disk IVF lists (*.ivfdata) included."""
        sizes = {}
        names = [CATALOG_FILE, CATALOG_FILE + "-wal", FAISS_FILE, SIDECAR_FILE, VECTOR_FILE]
        names += sorted(p.name for p in self.dir.glob("*.ivfdata"))
        for name in names:
            try:
                st = (self.dir / name).stat()
            except OSError:
                continue
            sparse = name == VECTOR_FILE and hasattr(st, "st_blocks")
            sizes[name] = min(st.st_size, st.st_blocks * 512) if sparse else st.st_size
        return sizes

    def check(self) -> CheckReport:
        """Catalog and FAISS agree: same ids, same dimension, same vectors, same model."""
        rep = CheckReport()
        cat = self.catalog
        integrity = cat.integrity_problem()
        if integrity is not None:
            rep.fail(f"catalog integrity: {integrity}")
            return rep
        orphans = cat.orphan_embeddings()
        if orphans:
            rep.fail(f"{orphans} embeddings without a catalog row")
        if cat.has_items():  # a read-only catalog from before items sees one per image
            lost = cat.orphan_items()
            if lost:
                rep.fail(f"{lost} items without a file row")
            bare = cat.files_without_items()
            if bare:
                rep.fail(f"{bare} files in the catalog yield no item")
        dim = int(cat.get_meta("dim", 0) or 0)
        bad_dim = cat.misshapen_embeddings(dim)
        if cat.count_embedded() and bad_dim:
            rep.fail(f"{bad_dim} embeddings are not {dim}-dimensional")
        note = self.ensure_vectors()
        if note:
            rep.repaired.append(f"vectors were behind the catalog; {note}")
        # Re-read what is on disk, not what is in memory.
        on_disk = VectorIndex(self.dir)
        if cat.count_embedded() and not on_disk.load():
            rep.fail(f"{self.dir / FAISS_FILE}: missing or unreadable")
            return rep
        if on_disk.index is None:
            return rep
        have = np.sort(index_ids(on_disk.index))
        want = cat.embedded_ids()
        if not np.array_equal(have, want):
            extra = len(np.setdiff1d(have, want))
            missing = len(np.setdiff1d(want, have))
            rep.fail(f"FAISS ids differ from catalog: {extra} extra, {missing} missing")
        if on_disk.model_id != cat.get_meta("model_id"):
            rep.fail("FAISS vectors come from another model than the catalog")
        if on_disk.dim != dim and want.size:
            rep.fail(f"FAISS dimension {on_disk.dim} != catalog dimension {dim}")
        if want.size and cat.vector_file is not None:
            self._check_vector_file(rep, cat.vector_file, want, dim)
        if want.size and rep.ok and on_disk.choice and on_disk.choice.kind == "flat":
            sample = want[:: max(1, len(want) // 64)]
            ids, vecs = cat.vectors_for(sample)
            from_faiss = np.stack([on_disk.index.reconstruct(int(i)) for i in ids])
            # float16 rows (vectors.f16) are within half a unit in the 11th bit of FAISS' float32
            atol = 1e-5 if cat.vector_file is None else 1e-3
            if not np.allclose(from_faiss, unit_rows(vecs), atol=atol):
                rep.fail("FAISS vectors differ from the catalog's embeddings")
        return rep

    def _check_vector_file(self, rep: CheckReport, path: Path, ids: np.ndarray, dim: int) -> None:
        """vectors.f16 holds a row for every embedded id (a missing row reads as zeros, and
        search would re-score that image with a zero vector)."""
        rows = path.stat().st_size // (dim * 2) if path.exists() else 0
        if rows < int(ids.max()):
            rep.fail(f"{path}: {rows} rows, but the catalog has vectors up to id {int(ids.max())}")
            return
        sample = ids[:: max(1, len(ids) // 256)]
        _, vecs = self.catalog.vectors_for(sample)
        norms = np.linalg.norm(vecs, axis=1)
        blank = int(np.sum(~np.isfinite(norms) | (norms < 1e-6)))
        if blank:
            rep.fail(f"{path}: {blank} of {len(sample)} sampled vectors are empty or not finite")


def _take_lock(d: Path, wait: bool, on_wait: Callable[[str], object] | None) -> int:
    """The writer lock's fd; the lock file then records this PID for the next writer's message.

    flock, not the file's existence, is the lock: a writer killed with -9 releases it
    with its last fd, so a stale lock file never blocks anyone.
    """
    try:
        lock_fd = os.open(d / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise _cannot_write(d, exc) from None
    told: int | None | bool = False  # the holder last reported to on_wait
    while True:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            holder = _lock_holder(d / LOCK_FILE)
            if not wait:
                os.close(lock_fd)
                raise IndexLocked(d, holder) from None
            if on_wait is not None and holder != told:
                who = f"PID {holder}" if holder else "another process"
                on_wait(f"{d}: locked by {who}; waiting for it to finish (Ctrl-C stops)")
                told = holder
            try:
                time.sleep(LOCK_POLL_SECONDS)
            except BaseException:
                os.close(lock_fd)
                raise
    try:
        os.ftruncate(lock_fd, 0)
        os.pwrite(lock_fd, f"{os.getpid()}\n".encode(), 0)
    except OSError as exc:
        os.close(lock_fd)
        raise _cannot_write(d, exc) from None
    return lock_fd


def _cannot_write(d: Path, exc: OSError) -> IndexError_:
    reason = exc.strerror or str(exc)
    return IndexError_(
        f"{d}: cannot write to this index folder ({reason}); `wherein search` can still read it, "
        "to add images use a writable --index"
    )


def _catalog_error(db: Path, exc: Exception, readonly: bool) -> IndexError_:
    if readonly and (db.parent / (CATALOG_FILE + "-wal")).exists():
        return IndexError_(
            f"{db}: the index folder is read-only and holds an unfinished write-ahead log "
            f"({CATALOG_FILE}-wal); open it once where it is writable (e.g. `wherein status`)"
        )
    return IndexError_(f"{db}: cannot open catalog ({exc})")


def _lock_holder(lock_file: Path) -> int | None:
    try:
        return int(lock_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
