"""An index directory: the SQLite catalog, the FAISS vectors, and the writer lock.

INDEX/
  catalog.db (+ -wal, -shm)   source of truth (catalog.py)
  vectors.faiss, vectors.json derived vectors, replaced atomically (vectors.py)
  vectors.f16                 float16 vectors for re-scoring, if build-index wrote them
                              (vector_file.py; part of the catalog, rows by id)
  index.lock                  held by the one process that writes
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from wherein.indexer.normalize import unit_rows
from wherein.indexer.store.catalog import (
    SCHEMA_VERSION,
    Catalog,
    CatalogTooNew,
    Kept,
    blob_to_vector,
    damaged,
    rebuild_hint,
    salvage,
    stamped_schema,
    too_new,
)
from wherein.indexer.store.salvage import settings_back
from wherein.indexer.store.vector_file import VECTOR_FILE, VectorFile
from wherein.indexer.store.vectors import FAISS_FILE, SIDECAR_FILE, VectorIndex, index_ids
from wherein.schemas.errors import (
    CatalogDamaged,
    IndexError_,
    IndexLocked,
    is_damage,
    storage_error,
)

CATALOG_FILE = "catalog.db"
LOCK_FILE = "index.lock"
LOCK_POLL_SECONDS = 0.5


@dataclass
class Rebuilt:
    """What --rebuild-catalog did: where the damaged file went, what it gave back."""

    aside: Path
    salvaged: int  # rows read from the damaged file
    reused: int  # of those, rows whose file is unchanged: their vectors are kept
    unreadable: int  # ids whose rows no read got through
    # Settings neither the damaged file nor the index folder told (salvage.settings_back):
    # "model_id", "regions".
    unknown: list[str] = field(default_factory=list)


@dataclass
class CheckReport:
    ok: bool = True
    problems: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    to_repair: list[str] = field(default_factory=list)  # derived files a --repair would save
    notes: list[str] = field(default_factory=list)  # sound, yet worth saying (a video half done)
    damaged: bool = False  # the catalog itself: nothing more could be checked (or counted)

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
        self.damage_note = ""  # the damaged vectors file this process found (and replaced?)
        self.rebuilt: Rebuilt | None = None

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
        rebuild: bool = False,
        read_only: bool = False,
        check_rows: bool = True,
    ) -> IndexStore:
        """Open an index; ``write`` takes the writer lock (IndexLocked if another process has it).

        wait: poll until the other writer is done instead of failing; ``on_wait`` gets
        one line saying who is waited for (and again if the holder changes).
        rebuild (with write): set the catalog aside (never deleted) and start a new one
        holding what could be salvaged from it (see ``rebuild_catalog``).
        read_only (without write): open the catalog read-only, so that nothing (no -wal,
        no -shm, no migration) is written; a reader falls back to it by itself when the
        disk is too full for opening it otherwise.
        check_rows (without write): refuse, with CatalogDamaged, a catalog whose tables of
        files and items have a damaged page (Catalog's verify_rows); a writer checks every
        page anyway. Off for `status --check`, which reports the damage as a problem.
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
        if lock_fd is not None:
            try:
                _probe_folder(d)
            except BaseException:
                os.close(lock_fd)
                raise
        readonly = not write and db.is_file() and (read_only or not os.access(d, os.W_OK))
        rebuilt = None
        try:
            if rebuild and write and (db.exists() or db.is_symlink()):
                rebuilt = rebuild_catalog(d)
            catalog = _open_catalog(
                db, readonly, write, verify=write and rebuilt is None, rows=check_rows and not write
            )
        except Exception as exc:
            if lock_fd is not None:
                os.close(lock_fd)
            raise _catalog_error(db, exc, readonly) from exc
        store = cls(d, catalog, lock_fd)
        store.rebuilt = rebuilt
        if load_vectors:
            try:
                store.vectors.load(catalog.generation)
            except BaseException:  # an on-disk index's .ivfdata missing: release lock and catalog
                store.close()
                raise
        return store

    def start_over(self) -> None:
        """Remove the catalog and vectors (not the lock, which this writer holds) and open an
        empty catalog: for an index whose every file a build that never finished wrote."""
        assert self.writable
        self.catalog.close()
        names = [CATALOG_FILE + s for s in ("", "-wal", "-shm")]
        names += [FAISS_FILE, SIDECAR_FILE, VECTOR_FILE]
        names += [p.name for p in self.dir.glob("*.ivfdata")]
        for name in names:
            (self.dir / name).unlink(missing_ok=True)
        self.catalog = Catalog(self.dir / CATALOG_FILE)
        self.vectors = VectorIndex(self.dir)

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
        if self.vectors.damaged:
            self.damage_note = self.vectors.damaged  # save() below forgets it once replaced
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

    def check(self, repair: bool = False) -> CheckReport:
        """Catalog and FAISS agree: same ids, same dimension, same vectors, same model.

        Reads only, unless repair: FAISS behind the catalog (a run that never reached its
        end) is then brought in line and saved; without it, the lag is compared in memory
        and reported in ``to_repair`` (search catches up the same way on every open).
        """
        rep = CheckReport()
        cat = self.catalog
        try:
            integrity = cat.integrity_problem()
        except CatalogDamaged as exc:
            rep.fail(str(exc))
            rep.damaged = True
            return rep
        if integrity is not None:
            rep.damaged = True
            rep.fail(
                f"catalog integrity: {integrity}; `{rebuild_hint(cat.path)}` sets it aside "
                "and builds a new one"
            )
            return rep
        orphans = cat.orphan_embeddings()
        if orphans:
            rep.fail(f"{orphans} embeddings without a catalog row")
        if cat.has_items():  # a read-only catalog from before items sees one per image
            lost = cat.orphan_items()
            if lost:
                rep.fail(f"{lost} items without a file row")
            empty, strays, waiting = cat.video_problems()
            bare = cat.files_without_items() - waiting  # a video whose frames are to come
            if bare:
                rep.fail(f"{bare} files in the catalog yield no item")
            if empty:
                rep.fail(f"{empty} videos marked complete have no frames")
            if strays:
                rep.fail(f"{strays} frame items belong to files that are not videos")
            unfinished = _unfinished(cat)
            if unfinished:
                rep.notes.append(
                    f"{unfinished} not indexed to their end (a run stopped midway through "
                    "them): this finishes on the next index run over them"
                )
        dim = int(cat.get_meta("dim", 0) or 0)
        bad_dim = cat.misshapen_embeddings(dim)
        if cat.count_embedded() and bad_dim:
            rep.fail(f"{bad_dim} embeddings are not {dim}-dimensional")
        note = self.ensure_vectors(persist=repair)
        on_disk = VectorIndex(self.dir)
        if note and repair:
            why = "" if self.damage_note else "vectors were behind the catalog; "
            rep.repaired.append(why + note)
        elif note and self.damage_note:
            # Searches still answer (from vectors rebuilt in memory each time), but the file
            # on disk is wrong: a problem, with the command that rebuilds it.
            rep.fail(
                f"{self.damage_note}; `wherein status --repair --index {self.dir}` rebuilds it "
                "from the catalog"
            )
            return rep
        elif note:
            rep.to_repair.append(
                f"{FAISS_FILE} is behind the catalog ({note} in memory); "
                f"`wherein status --repair --index {self.dir}` saves it"
            )
            on_disk = self.vectors  # what a search uses: the file plus its catch-up
        # Re-read what is on disk, not what is in memory.
        if (
            cat.count_embedded()
            and on_disk is not self.vectors
            and not on_disk.load(cat.generation)
        ):
            rep.fail(f"{self.dir / FAISS_FILE}: missing or unreadable")
            return rep
        if on_disk.index is None:
            return rep
        damage = on_disk.damage(cat, samples=64)
        if damage is not None:
            # Only a read-only check gets here (a writer replaced the file above).
            rep.fail(
                f"{damage}; `wherein status --repair --index {self.dir}` rebuilds it from the "
                "catalog where the index is writable and no other process writes it"
            )
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
        """vectors.f16 holds a row for every id whose vector the catalog keeps there (a
        missing row reads as zeros, and search would re-score that image with a zero vector).
        Rows `index` added later keep their vectors in the catalog: the file may end before."""
        rows = path.stat().st_size // (dim * 2) if path.exists() else 0
        top = self.catalog.max_file_row_id()
        if rows < top:
            rep.fail(f"{path}: {rows} rows, but the catalog has vectors in it up to id {top}")
            return
        sample = ids[:: max(1, len(ids) // 256)]
        _, vecs = self.catalog.vectors_for(sample)
        norms = np.linalg.norm(vecs, axis=1)
        blank = int(np.sum(~np.isfinite(norms) | (norms < 1e-6)))
        if blank:
            rep.fail(f"{path}: {blank} of {len(sample)} sampled vectors are empty or not finite")


def _open_catalog(db: Path, readonly: bool, write: bool, verify: bool, rows: bool) -> Catalog:
    try:
        return Catalog(db, readonly=readonly, verify=verify, verify_rows=rows)
    except CatalogTooNew:
        if write:
            raise
        # a reader: read as it is, nothing written
        return Catalog(db, readonly=True, verify_rows=rows)
    except sqlite3.OperationalError as exc:
        # A reader on a full disk: opening read-write wants to grow -wal/-shm (disk I/O
        # error); read-only it needs neither. A writer must fail here, with the reason.
        if verify or readonly or storage_error(exc) is None:
            raise
    return Catalog(db, readonly=True, verify_rows=rows)


def rebuild_catalog(d: Path) -> Rebuilt:
    """Set d's catalog aside as catalog.db.damaged-<time> (its -wal and -shm with it) and
    write a new one holding the salvaged rows whose file is unchanged (same size and
    mtime as recorded) and whose vector is whole; the rest is left for indexing to embed.
    Call holding the writer lock."""
    db = d / CATALOG_FILE
    stamped = stamped_schema(db)
    if stamped > SCHEMA_VERSION:  # its salvage would drop what the newer schema keeps
        raise too_new(db, stamped, SCHEMA_VERSION)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    aside = d / f"{CATALOG_FILE}.damaged-{stamp}"
    n = 1
    while aside.exists():
        n += 1
        aside = d / f"{CATALOG_FILE}.damaged-{stamp}-{n}"
    try:
        for suffix in ("", "-wal", "-shm"):
            if (d / (CATALOG_FILE + suffix)).exists():
                os.rename(d / (CATALOG_FILE + suffix), d / (aside.name + suffix))
    except OSError as exc:
        raise _cannot_write(d, exc) from None
    got = salvage(aside)
    side = VectorIndex(d).sidecar() or {}
    unknown = settings_back(got, side)
    dim = int(got.meta.get("dim", 0) or 0)
    kept = _trusted(d, got.rows, dim, got.meta.get("vector_file"))
    got.next_id = max(got.next_id, _highest_derived_id(d, dim) + 1)
    # Past the generation vectors.faiss records, whatever the salvage found: the file must
    # never pass for current with the rows lost in it.
    with contextlib.suppress(TypeError, ValueError):
        got.meta["generation"] = max(
            int(got.meta.get("generation", 0) or 0), int(side.get("generation", 0) or 0)
        )
    catalog = Catalog(db)
    try:
        catalog.restore(got, kept)
    finally:
        catalog.close()
    return Rebuilt(aside, len(got.rows), len(kept), got.unreadable_ids, unknown)


def kind_counts(cat: Catalog) -> dict[str, dict[str, int]]:
    """Every registered kind's counts (zeros where the index has none of it; a timed kind
    with frames and incomplete), in the order wherein lists kinds, then any kind the catalog
    names that this wherein does not know."""
    from wherein.indexer.kinds.registry import kinds

    untimed = [k.name for k in kinds() if not k.timed]
    found = cat.kind_counts(untimed[0] if len(untimed) == 1 else None)
    out = {}
    for k in reversed(kinds()):  # photo first, as registry.reads() lists them
        zero = {"files": 0, "frames": 0, "incomplete": 0} if k.timed else {"files": 0}
        out[k.name] = {**zero, **found.get(k.name, {})}
    return out | {name: c for name, c in found.items() if name not in out}


def _unfinished(cat: Catalog) -> str:
    """The files of each timed kind a stopped run left incomplete, in words ("1 animation,
    2 videos"; "" for none), each kind named as status counts it."""
    return ", ".join(
        f"{c['incomplete']} {kind}{'' if c['incomplete'] == 1 else 's'}"
        for kind, c in kind_counts(cat).items()
        if c.get("incomplete")
    )


def _trusted(d: Path, rows: list[dict], dim: int, vector_file: str | None) -> Kept:
    """The salvaged rows worth keeping, and their vectors: the file is still there with the
    size and mtime recorded (indexing then re-hashes it) and the vector is dim finite,
    non-zero values (from vectors.f16 where the row kept it there); a timed file keeps the
    frames whose vectors are so, and is kept when one is."""
    kept = Kept()
    if not dim:
        return kept
    f16 = None
    if vector_file and (d / VECTOR_FILE).is_file():
        with contextlib.suppress(OSError, ValueError):
            f16 = VectorFile(d / VECTOR_FILE, dim, readonly=True)
    try:
        for row in rows:
            try:
                st = os.stat(row["path"])
            except OSError:
                continue
            if (st.st_size, st.st_mtime_ns) != (row["size"], row["mtime_ns"]):
                continue
            if "frames" in row:
                frames = [
                    (i, t, v)
                    for i, t, blob in row.pop("frames")
                    if (v := _vector(blob, i, dim, f16)) is not None
                ]
                if frames:
                    kept.add_timed(row, frames)
            elif (v := _vector(row.pop("vector"), row["id"], dim, f16)) is not None:
                kept.files.append(row)
                kept.vectors.append(v)
    finally:
        if f16 is not None:
            f16.close()
    return kept


def _vector(blob: bytes, item_id: int, dim: int, f16: VectorFile | None) -> np.ndarray | None:
    """An item's salvaged vector (its blob, or its row of vectors.f16 where the blob is
    empty); None unless it is dim finite values of a non-zero length."""
    if len(blob) == dim * 4:
        v = blob_to_vector(blob)
    elif not blob and f16 is not None:
        v = f16.read(np.array([item_id], np.int64))[0]
    else:
        return None
    norm = float(np.linalg.norm(v))
    return v if np.isfinite(norm) and norm > 1e-6 else None


def _highest_derived_id(d: Path, dim: int) -> int:
    """The highest id vectors.faiss or vectors.f16 holds (0 if none can be read): ids of rows
    lost with the damaged catalog, which a new image must never be given."""
    top = 0
    with contextlib.suppress(Exception):  # a damaged derived file just tells us nothing
        on_disk = VectorIndex(d)
        if on_disk.load() and on_disk.index is not None and on_disk.ntotal:
            top = int(index_ids(on_disk.index).max())
    f16 = d / VECTOR_FILE
    if dim and f16.is_file():
        top = max(top, f16.stat().st_size // (dim * 2))
    return top


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


def _probe_folder(d: Path) -> None:
    """Refuse a writer up front where the folder takes no new file although its files are
    writable (a folder of mode 555, an immutable folder): SQLite would commit batches
    into the existing catalog and -wal, then the run fail on vectors.faiss, which is
    replaced by renaming a new file into the folder. os.access cannot tell (root passes
    it): making a file can."""
    probe = d / f".write-probe-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        os.close(fd)
        os.unlink(probe)
    except FileExistsError:  # a probe a killed process left: removing it proves as much
        try:
            os.unlink(probe)
        except OSError as exc:
            raise _cannot_write(d, exc) from None
    except OSError as exc:
        raise _cannot_write(d, exc) from None


def _cannot_write(d: Path, exc: OSError) -> IndexError_:
    reason = exc.strerror or str(exc)
    return IndexError_(
        f"{d}: cannot write to this index folder ({reason}); `wherein search` can still read it, "
        "to add images use a writable --index"
    )


def _catalog_error(db: Path, exc: Exception, readonly: bool) -> IndexError_:
    if isinstance(exc, IndexError_):
        return exc
    if is_damage(exc):
        return damaged(db, exc)
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
