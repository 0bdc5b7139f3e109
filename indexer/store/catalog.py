"""The SQLite catalog: the index's source of truth. Only indexer/store/ speaks SQL.

One row per indexed file in ``images``; the items it yields in ``items`` (a photo: one
item of kind 'image'; room for a video's frames and a photo's regions), each item's
embedding in ``embeddings`` (same transaction, so a row never points at a half-written
vector; rows that build-index writes keep an empty blob there and the vector in
vectors.f16, see vector_file.py);
unreadable files in ``skipped``; zero-shot label probabilities in ``labels``; settings and the
vector generation counter in ``meta``. FAISS holds a derived copy of
``embeddings`` (see vectors.py): after a crash it is brought back in line from
here, never the other way round.

The methods live by table, one module each: files.py (images), items.py (items and
embeddings), skips.py, labels.py, photos.py (and a hit's row), meta.py, integrity.py,
vector_rows.py (the vectors.f16 lifecycle and transaction()), videos.py, regions.py (a
photo's region items and the tiled table), beside connection.py
(opening, refusing, naming damage) and salvage.py. Each is a mixin over base.py's
CatalogBase, and Catalog below joins them and opens the connection. Mixins rather than
composed parts: callers keep one object with the same methods (a part per table would
need a forwarding method for each), and the methods that span tables (delete_images:
files, items and the vector file's dead rows; hit_rows: items, files and photos) reach
the others through ``self``: each mixin derives from the ones it calls, so mypy checks
those calls. A new table is a new module with its mixin, added to Catalog's bases.

Invariants:
- The only SQL. Table and column names, SQL text and the connection stay in
  indexer/store/ (these modules and migrations.py); everything else calls the named
  methods (tests/unit/test_sql_confined.py enforces it). Rows come back as plain dicts,
  tuples and numpy arrays.
- Migrations. Opening a catalog for writing applies the pending steps of
  migrations.py in place (an index written by an older release keeps its rows,
  ids and vectors; nothing is re-embedded). A read-only open (read-only media)
  migrates nothing and reads the older layout as it is.
- Path encoding. Methods take and return paths as Python str in the form
  os.walk / os.fsdecode give it (undecodable bytes as lone surrogates, by
  surrogateescape); the catalog stores os.fsencode(path), so any name the OS
  allows round-trips exactly, and names that differ only in Unicode
  normalisation (NFC/NFD) stay distinct rows. Callers never see the encoding.
- Ids are never reused (AUTOINCREMENT): FAISS and cached files are keyed by id.
- Files and items. FAISS ids are item ids. Methods about vectors (embedded_ids,
  vectors_for, iter_vectors, set_embedding, embedded_paths, photo_matches, hit_rows,
  count_embedded) speak item ids; methods about files (known_files, ids_for_paths,
  rows_by_ids, row_by_path, embedded_with_hash, relink, touch, delete_images,
  record_skip, photos, labels) speak file ids. File and item ids come from one counter
  (next_id), so a photo's one item has its file's id.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import sqlite_utils

from wherein.indexer.store import checked, migrations
from wherein.indexer.store.base import blob_to_vector, vector_to_blob
from wherein.indexer.store.connection import (
    CatalogReadOnly,
    CatalogTooNew,
    _connect,
    _connect_readonly,
    _refuse_empty,
    _refuse_foreign,
    damaged,
    rebuild_hint,
    too_new,
)
from wherein.indexer.store.integrity import IntegrityChecks
from wherein.indexer.store.labels import LabelsTable
from wherein.indexer.store.photos import PHOTO_COLUMNS
from wherein.indexer.store.regions import RegionsTable
from wherein.indexer.store.salvage import SETTINGS, Kept, Salvaged, salvage, stamped_schema
from wherein.indexer.store.skips import SkipsTable

# Importers of this module's names from before the split keep working.
__all__ = [
    "PHOTO_COLUMNS",
    "SCHEMA_VERSION",
    "Catalog",
    "CatalogReadOnly",
    "CatalogTooNew",
    "Kept",
    "Salvaged",
    "blob_to_vector",
    "damaged",
    "rebuild_hint",
    "salvage",
    "stamped_schema",
    "too_new",
    "vector_to_blob",
]

SCHEMA_VERSION = migrations.SCHEMA_VERSION


# A read-only catalog from before items (schema < 4) seen as if it had them: one 'image'
# item per image, with the image's id (what the migration writes). TEMP names shadow main's.
_ITEMS_VIEWS = (
    "CREATE TEMP VIEW items AS SELECT id, id AS image_id, 'image' AS kind, NULL AS t, "
    "NULL AS x0, NULL AS y0, NULL AS x1, NULL AS y1 FROM main.images",
    "CREATE TEMP VIEW embeddings AS SELECT image_id AS item_id, vector FROM main.embeddings",
)


def _kind_column(db: sqlite_utils.Database) -> str:
    """A file's kind as a SELECT of images i: the column, or (a read-only catalog from before
    kinds) what m007 would write."""
    if migrations.has_file_kinds(db):
        return "i.kind"
    if migrations.has_videos(db):
        return (
            "CASE WHEN EXISTS (SELECT 1 FROM videos v WHERE v.image_id = i.id) "
            "THEN 'video' ELSE 'photo' END"
        )
    return "'photo'"


class Catalog(RegionsTable, SkipsTable, LabelsTable, IntegrityChecks):
    def __init__(
        self, path: Path, readonly: bool = False, verify: bool = False, verify_rows: bool = False
    ) -> None:
        """verify: check every page (PRAGMA quick_check) before anything is written, so a
        damaged catalog is refused before a run writes into it (about 0.7 s per 100k rows).
        verify_rows: check the pages of the tables of files and items (rows_problem), so a
        reader never answers from a catalog that silently lost rows."""
        self.path = path
        self.readonly = readonly
        _refuse_empty(path)
        conn: sqlite3.Connection = (
            _connect_readonly(path) if readonly else _connect(str(path), path)
        )
        self._conn = conn
        self._depth = 0
        self._vfile = None
        self._dying = []
        self._dying_all = False
        self.migrated: list[str] = []  # steps this open applied
        try:
            conn.execute("PRAGMA busy_timeout = 10000")
            _refuse_foreign(conn, path)
            stamped = migrations.stamped_version(conn)
            if stamped > SCHEMA_VERSION:
                self.too_new = too_new(path, stamped, SCHEMA_VERSION)
                if not readonly:  # before any write, WAL mode included
                    raise self.too_new
            if verify and (problem := self.soundness_problem()) is not None:
                raise damaged(path, problem)
            if verify_rows and not verify:
                self._check_rows(path)
            self._db = sqlite_utils.Database(conn, execute_plugins=False)
            if not readonly:
                # WAL: readers (search, status) never block the indexer; FULL: a committed
                # batch survives power loss, and the fsync is nothing next to embedding time.
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = FULL")
                self.migrated = migrations.migrate(self._db)  # foreign keys still off here
            # Paths are bound as bytes; a read-only catalog in the first layout holds
            # them as UTF-8 text, which CAST(? AS TEXT) matches (SQLite compares both
            # byte by byte, so equality and ranges work the same).
            self._p = "?" if migrations.paths_are_bytes(self._db) else "CAST(? AS TEXT)"
            # A read-only catalog of an older release has no ctime_ns/inode: unknown there.
            self._identity = (
                "i.ctime_ns, i.inode" if migrations.has_file_identity(self._db) else "NULL, NULL"
            )
            self._kind = _kind_column(self._db)
            if readonly and not migrations.has_items(self._db):
                for view in _ITEMS_VIEWS:
                    conn.execute(view)
            conn.execute("PRAGMA foreign_keys = ON")
            if self.get_meta("vector_file"):
                self._open_vector_file()
        except BaseException:
            conn.close()
            raise

    def _check_rows(self, path: Path) -> None:
        """A reader's check (rows_problem), skipped while the catalog is unchanged since one
        passed (checked.py); CatalogDamaged when it finds damage."""
        before = checked.stamp(path)
        if checked.still_checked(path, before):
            return
        if (problem := self.rows_problem()) is not None:
            raise damaged(path, problem)
        if not self.readonly:  # a read-only open writes nothing, this record neither
            checked.remember_checked(path, before)

    def close(self) -> None:
        if self._vfile is not None:
            self._vfile.close()
        self._conn.close()

    def restore(self, salvaged: Salvaged, kept: Kept) -> None:
        """Fill a new, empty catalog from a damaged one's salvage: its settings (model, dim),
        the rows kept with their ids, kinds and vectors (a timed file with its videos row and
        frames), and an id counter past every id the old catalog (or FAISS) may have handed
        out, so no id ever names two images."""
        with self.transaction():
            for key in SETTINGS:
                if key in salvaged.meta:
                    self.set_meta(key, salvaged.meta[key])
            self.set_meta("generation", int(salvaged.meta.get("generation", 0) or 0) + 1)
            if kept.files:
                self.insert_images(kept.files, np.array(kept.vectors, np.float32))
            if kept.timed:
                self.insert_videos(kept.timed, kept.videos)
                self.insert_items(kept.frames, np.array(kept.frame_vectors, np.float32))
            seq = max(salvaged.next_id - 1, self.max_id())
            for table in ("images", "items"):  # ids of files and items share one counter
                migrations.raise_sequence(self._conn, table, seq)
