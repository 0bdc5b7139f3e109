"""The SQLite catalog: the index's source of truth, and the only code that speaks SQL.

One row per indexed file in ``images``; the items it yields in ``items`` (a photo: one
item of kind 'image'; room for a video's frames and a photo's regions), each item's
embedding in ``embeddings`` (same transaction, so a row never points at a half-written
vector; rows that build-index writes keep an empty blob there and the vector in
vectors.f16, see vector_file.py);
unreadable files in ``skipped``; zero-shot label probabilities in ``labels``; settings and the
vector generation counter in ``meta``. FAISS holds a derived copy of
``embeddings`` (see vectors.py): after a crash it is brought back in line from
here, never the other way round.

Invariants:
- The only SQL. Table and column names, SQL text and the connection stay in
  this module and migrations.py; everything else calls the named methods below
  (tests/unit/test_sql_confined.py enforces it). Rows come back as plain dicts,
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
  (next_image_id), so a photo's one item has its file's id.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import sqlite_utils

from wherein.indexer.store import migrations
from wherein.indexer.store.vector_file import VECTOR_FILE, VectorFile
from wherein.schemas.errors import CatalogDamaged, IndexError_, is_damage

SCHEMA_VERSION = migrations.SCHEMA_VERSION
_CHUNK = 500  # ids per IN (...) list: far below SQLite's variable limit
_IMAGE_COLUMNS = (
    "id",
    "path",
    "size",
    "mtime_ns",
    "sha256",
    "width",
    "height",
    "format",
    "indexed_at",
    "model_id",
)
_SELECT_IMAGES = f"SELECT {', '.join(_IMAGE_COLUMNS)} FROM images"
# What an item adds to its file's row in hit_rows: its id, kind and locator (box: x0..y1).
_ITEM_COLUMNS = ("item_id", "kind", "t", "box")
# A read-only catalog from before items (schema < 4) seen as if it had them: one 'image'
# item per image, with the image's id (what the migration writes). TEMP names shadow main's.
_ITEMS_VIEWS = (
    "CREATE TEMP VIEW items AS SELECT id, id AS image_id, 'image' AS kind, NULL AS t, "
    "NULL AS x0, NULL AS y0, NULL AS x1, NULL AS y1 FROM main.images",
    "CREATE TEMP VIEW embeddings AS SELECT image_id AS item_id, vector FROM main.embeddings",
)
# The photos table (EXIF) as hits carry it; PHOTO_COLUMNS is what store_photos takes.
_PHOTO_HIT_COLUMNS = ("taken", "taken_offset", "make", "model", "lens", "lat", "lon")
PHOTO_COLUMNS = ("image_id", "size", "mtime_ns", *_PHOTO_HIT_COLUMNS, "orientation")
# When a photo was taken, as local wall-clock text: EXIF, else the file's mtime here.
_TAKEN = (
    "COALESCE(p.taken, strftime('%Y-%m-%d %H:%M:%S', i.mtime_ns / 1000000000, "
    "'unixepoch', 'localtime'))"
)


class CatalogReadOnly(IndexError_):
    """A write to a catalog that cannot be written (read-only file, folder or mount)."""


def vector_to_blob(v: np.ndarray) -> bytes:
    return np.ascontiguousarray(v, dtype="<f4").tobytes()


def blob_to_vector(b: bytes) -> np.ndarray:
    return np.frombuffer(b, dtype="<f4")


_FS_CODEC = (sys.getfilesystemencoding(), sys.getfilesystemencodeerrors())


def _key(path: str | os.PathLike[str]) -> bytes:
    """The stored form of a path: its bytes as the OS has them (os.fsencode).

    A str holding a surrogate outside U+DC80..U+DCFF cannot come from a file name (the OS
    decodes undecodable bytes into that range only): a clear error, not a UnicodeEncodeError.
    """
    try:
        return os.fsencode(path)
    except UnicodeEncodeError:
        raise IndexError_(
            f"{os.fspath(path)!a}: not a possible file name (it holds a lone surrogate)"
        ) from None


def _path(stored: bytes | str) -> str:
    """os.fsdecode without its per-call checks (known_files decodes every row).

    str: a read-only catalog still in the first release's layout (UTF-8 text)."""
    return stored.decode(*_FS_CODEC) if isinstance(stored, bytes) else stored


def _chunks(ids: Iterable[int]) -> Iterator[list[int]]:
    ids = [int(i) for i in ids]
    for start in range(0, len(ids), _CHUNK):
        yield ids[start : start + _CHUNK]


def _marks(chunk: Sequence) -> str:
    return ",".join("?" * len(chunk))


def rebuild_hint(path: Path) -> str:
    """The one command that sets a damaged catalog aside and builds a new one."""
    return f"wherein index PATHS --index {path.parent} --rebuild-catalog"


def damaged(path: Path, exc: BaseException | str) -> CatalogDamaged:
    """The one-line error for a catalog SQLite cannot read: the file and the way back."""
    code = getattr(exc, "sqlite_errorcode", 0) or 0
    if code & 0xFF == sqlite3.SQLITE_NOTADB or "not a database" in str(exc):
        what = "is not a SQLite database (a damaged catalog, or some other file)"
        back = (
            f"if it was this index's catalog, `{rebuild_hint(path)}` sets it aside and builds "
            "a new one; else use another --index"
        )
    else:
        what = f"is damaged ({exc})"
        back = (
            f"`{rebuild_hint(path)}` sets it aside and builds a new one, "
            "reusing the vectors it can still read"
        )
    return CatalogDamaged(f"{path}: the catalog {what}; nothing was written to it. {back}")


class _Cursor(sqlite3.Cursor):
    """A cursor whose damage errors name the catalog (see _Connection)."""

    connection: _Connection

    def execute(self, sql: str, parameters=(), /):
        with self.connection.named():
            return super().execute(sql, parameters)

    def executemany(self, sql: str, seq, /):
        with self.connection.named():
            return super().executemany(sql, seq)

    def __next__(self):
        with self.connection.named():
            return super().__next__()

    def fetchone(self):
        with self.connection.named():
            return super().fetchone()

    def fetchmany(self, size: int | None = None):
        with self.connection.named():
            return super().fetchmany(self.arraysize if size is None else size)

    def fetchall(self):
        with self.connection.named():
            return super().fetchall()


class _Connection(sqlite3.Connection):
    """Every statement and every row read turns SQLite's "database disk image is malformed"
    into CatalogDamaged naming the file and the way back, wherever in the code it is hit
    (a damaged page shows only when a query reaches it)."""

    db_path: Path = Path("catalog.db")

    @contextmanager
    def named(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.DatabaseError as exc:
            if is_damage(exc):
                raise damaged(self.db_path, exc) from exc
            raise

    def cursor(self, factory=_Cursor):
        return super().cursor(factory)

    def execute(self, sql: str, parameters=(), /):
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql: str, seq, /):
        return self.cursor().executemany(sql, seq)

    def commit(self) -> None:
        with self.named():
            super().commit()


def _connect(target: str, path: Path, uri: bool = False) -> _Connection:
    conn = sqlite3.connect(target, uri=uri, check_same_thread=False, factory=_Connection)
    conn.db_path = path
    return conn


def _connect_readonly(path: Path) -> sqlite3.Connection:
    """A read-only connection, also in a read-only folder (a read-only mount, a DVD).

    A WAL database needs its -shm file, which a read-only folder cannot get; when
    the write-ahead log is empty (every commit checkpointed) the database file alone
    is the whole index, and SQLite may read it as immutable.
    """
    conn = _connect(f"file:{_uri_path(path)}?mode=ro", path, uri=True)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn
    except sqlite3.OperationalError as exc:
        conn.close()
        wal = path.with_name(path.name + "-wal")
        if wal.exists() and wal.stat().st_size:
            raise
        # No -shm to be had: the folder is read-only, or the disk is too full to make one.
        if (
            os.access(path.parent, os.W_OK)
            and "disk I/O" not in str(exc)
            and "full" not in str(exc)
        ):
            raise
    return _connect(f"file:{_uri_path(path)}?immutable=1", path, uri=True)


def _uri_path(path: Path) -> str:
    """path in a file: URI (a '?' or '#' in a folder name would end the path there)."""
    return re.sub(r"[?#%]", lambda m: f"%{ord(m.group()):02X}", str(path))


def _refuse_foreign(conn: sqlite3.Connection, path: Path) -> None:
    """A SQLite file with tables, but not a catalog's: never taken for one, never written.

    A database without any table holds nothing (a catalog created and never committed)."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if tables and not {"images", "meta"} <= tables:
        shown = ", ".join(sorted(tables)[:4])
        raise CatalogDamaged(
            f"{path}: not a wherein catalog (a SQLite database with tables {shown}); "
            "nothing was written to it: use another --index"
        )


def _refuse_empty(path: Path) -> None:
    """A 0-byte catalog.db is a lost catalog (truncated), not a new one: SQLite would take
    it for an empty database, and the next write would start an empty index over it."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return
    if size == 0:
        raise CatalogDamaged(
            f"{path}: the catalog is an empty file (0 bytes: truncated or lost); nothing was "
            f"written to it. `{rebuild_hint(path)}` sets it aside and builds a new one"
        )


# -- salvage (index --rebuild-catalog) -----------------------------------------------
_SALVAGE_STEP = 256  # ids per range read; a range a damaged page breaks is halved down to one id


@dataclass
class Salvaged:
    """What a damaged catalog still gives: image rows (each with its "vector" blob, b"" for
    a row of the vector file), the meta settings, and the smallest id it never handed out."""

    rows: list[dict] = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    next_id: int = 1
    unreadable_ids: int = 0  # ids in ranges no read got through


def salvage(path: Path) -> Salvaged:
    """Read what can be read from a damaged catalog (read-only; a damaged page costs only
    the rows on it): rows by rowid range, halving a range that fails down to single ids."""
    out = Salvaged()
    wal = path.with_name(path.name + "-wal")
    # immutable: nothing else writes a set-aside file, and SQLite then makes no -shm beside it
    mode = "mode=ro" if wal.exists() and wal.stat().st_size else "immutable=1"
    try:
        conn = sqlite3.connect(f"file:{_uri_path(path)}?{mode}", uri=True)
    except sqlite3.Error:
        return out
    with contextlib.closing(conn):
        # Before the items step (schema 5) embeddings were keyed by image id; since, by item
        # id, and a photo's one item has its file's id.
        itemised = (
            _salvage_one(
                conn, "SELECT 1 FROM pragma_table_info('embeddings') WHERE name = 'item_id'"
            )
            == 1
        )
        key = "item_id" if itemised else "image_id"
        tops = [
            _salvage_one(conn, sql)
            for sql in (
                "SELECT max(id) FROM images",
                "SELECT max(id) FROM items",
                f"SELECT max({key}) FROM embeddings",
                "SELECT seq FROM sqlite_sequence WHERE name IN ('images', 'items')",
            )
        ]
        top = max([t for t in tops if isinstance(t, int)], default=0)
        out.next_id = top + 1
        meta_top = _salvage_one(conn, "SELECT max(rowid) FROM meta")
        meta_rows, _ = _salvage_ranges(
            conn, "SELECT key, value FROM meta WHERE rowid BETWEEN ? AND ?", meta_top or 64
        )
        for key, value in meta_rows:
            with contextlib.suppress(TypeError, ValueError):
                out.meta[str(key)] = json.loads(value)
        by_file = (
            "SELECT it.image_id, e.vector FROM embeddings e JOIN items it ON it.id = e.item_id "
            "WHERE it.kind = 'image' AND e.item_id BETWEEN ? AND ?"
            if itemised
            else "SELECT image_id, vector FROM embeddings WHERE image_id BETWEEN ? AND ?"
        )
        vector_rows, _ = _salvage_ranges(conn, by_file, top)
        vectors = dict(vector_rows)
        image_rows, out.unreadable_ids = _salvage_ranges(
            conn, f"{_SELECT_IMAGES} WHERE id BETWEEN ? AND ?", top
        )
        seen: set = set()
        for row in image_rows:
            rec = dict(zip(_IMAGE_COLUMNS, row))
            ok = (
                isinstance(rec["id"], int)
                and isinstance(rec["path"], bytes | str)
                and isinstance(rec["size"], int)
                and isinstance(rec["mtime_ns"], int)
                and isinstance(rec["sha256"], str)
                and re.fullmatch(r"[0-9a-f]{64}", rec["sha256"]) is not None
                and isinstance(vectors.get(rec["id"]), bytes)
                and rec["path"] not in seen
            )
            if ok:
                seen.add(rec["path"])
                out.rows.append({**rec, "path": _path(rec["path"]), "vector": vectors[rec["id"]]})
    return out


def _salvage_one(conn: sqlite3.Connection, sql: str):
    try:
        row = conn.execute(sql).fetchone()
    except sqlite3.DatabaseError:
        return None
    return row[0] if row else None


def _salvage_ranges(conn: sqlite3.Connection, sql: str, top: int) -> tuple[list, int]:
    """The rows of sql (bound to an id range) over ids 1..top, and how many ids no read
    got through."""
    rows, lost = [], 0
    todo = [(lo, min(lo + _SALVAGE_STEP - 1, top)) for lo in range(1, top + 1, _SALVAGE_STEP)]
    while todo:
        lo, hi = todo.pop()
        try:
            rows += conn.execute(sql, (lo, hi)).fetchall()
        except sqlite3.DatabaseError:
            if lo == hi:
                lost += 1
            else:
                mid = (lo + hi) // 2
                todo += [(mid + 1, hi), (lo, mid)]
    return rows, lost


class Catalog:
    def __init__(self, path: Path, readonly: bool = False, verify: bool = False) -> None:
        """verify: check every page (PRAGMA quick_check) before anything is written, so a
        damaged catalog is refused before a run writes into it (about 0.7 s per 100k rows)."""
        self.path = path
        self.readonly = readonly
        _refuse_empty(path)
        conn: sqlite3.Connection = (
            _connect_readonly(path) if readonly else _connect(str(path), path)
        )
        self._conn = conn
        self._depth = 0  # nesting of transaction()
        self._vfile: VectorFile | None = None  # float16 vectors beside the catalog, if it has one
        # Ids whose file rows this transaction may have killed (_dying_all: maybe every
        # row); their disk blocks are given back once it commits (_punch_dead).
        self._dying: list[int] = []
        self._dying_all = False
        self.migrated: list[str] = []  # steps this open applied
        try:
            conn.execute("PRAGMA busy_timeout = 10000")
            _refuse_foreign(conn, path)
            if verify and (problem := self.soundness_problem()) is not None:
                raise damaged(path, problem)
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
            if readonly and not migrations.has_items(self._db):
                for view in _ITEMS_VIEWS:
                    conn.execute(view)
            conn.execute("PRAGMA foreign_keys = ON")
            if self.get_meta("vector_file"):
                self._open_vector_file()
        except BaseException:
            conn.close()
            raise

    def close(self) -> None:
        if self._vfile is not None:
            self._vfile.close()
        self._conn.close()

    # -- float16 vector file (vector_file.py) -----------------------------------
    # Rows written by insert_images (build-index) keep their vector in the file and an empty
    # blob in ``embeddings`` (the row still says "embedded"); every other write keeps float32
    # blobs. Readers take the file's row wherever the blob is empty.
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
            return np.stack([blob_to_vector(b) for b in blobs])
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
    def transaction(self) -> Iterator[Catalog]:
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

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """One read transaction (a consistent view under WAL), unless one is already open."""
        if self._conn.in_transaction:
            yield
            return
        self._conn.execute("BEGIN")
        try:
            yield
        finally:
            self._conn.execute("COMMIT")  # nothing was written: this only ends the snapshot

    # -- meta -------------------------------------------------------------
    def get_meta(self, key: str, default=None):
        try:
            row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        except sqlite3.OperationalError:
            return default
        return json.loads(row[0]) if row else default

    def set_meta(self, key: str, value) -> None:
        self._conn.execute(
            "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, json.dumps(value)),
        )

    @property
    def schema_version(self) -> int:
        return int(self.get_meta("schema_version", 0) or 0)

    @property
    def generation(self) -> int:
        return int(self.get_meta("generation", 0))

    def bump_generation(self) -> int:
        gen = self.generation + 1
        self.set_meta("generation", gen)
        return gen

    # -- images -----------------------------------------------------------
    def count_images(self) -> int:
        return self._conn.execute("SELECT count(*) FROM images").fetchone()[0]

    def count_embedded(self) -> int:
        """Items with a vector (what FAISS holds)."""
        return self._conn.execute("SELECT count(*) FROM embeddings").fetchone()[0]

    def has_items(self) -> bool:
        """Whether the catalog stores items (schema 4), not a read-only older one seen
        through views."""
        return migrations.has_items(self._db)

    def count_items(self, kind: str | None = None) -> int:
        """Items (of this kind), embedded or not."""
        if kind is None:
            return self._conn.execute("SELECT count(*) FROM items").fetchone()[0]
        return self._conn.execute("SELECT count(*) FROM items WHERE kind = ?", (kind,)).fetchone()[
            0
        ]

    def max_image_id(self) -> int:
        """The largest file or item id in use (0 when empty)."""
        return self._conn.execute(
            "SELECT max(coalesce((SELECT max(id) FROM images), 0), "
            "coalesce((SELECT max(id) FROM items), 0))"
        ).fetchone()[0]

    def next_image_id(self) -> int:
        """The smallest id no file or item ever had: past AUTOINCREMENT's counters (which
        remember ids of deleted rows) and past every id in use. A new file and its first item
        take it; bulk inserts with chosen ids start here."""
        rows = self._conn.execute(
            "SELECT seq FROM sqlite_sequence WHERE name IN ('images', 'items')"
        ).fetchall()
        return max([int(r[0]) for r in rows] + [self.max_image_id()]) + 1

    def ids_for_paths(self, paths: Iterable[str]) -> dict[str, int]:
        """path -> id, for those of the paths that have a row."""
        keys = [_key(p) for p in paths]
        out: dict[str, int] = {}
        for start in range(0, len(keys), _CHUNK):
            chunk = keys[start : start + _CHUNK]
            marks = ",".join([self._p] * len(chunk))
            for path, image_id in self._conn.execute(
                f"SELECT path, id FROM images WHERE path IN ({marks})", chunk
            ):
                out[_path(path)] = int(image_id)
        return out

    def known_files(
        self, under: Sequence[str] | None = None
    ) -> dict[str, tuple[int, int, int, str, bool, int | None, int | None]]:
        """path -> (id, size, mtime_ns, sha256, has_embedding, ctime_ns, inode); with
        ``under`` (absolute folders), only the paths that are one of them or below one of
        them. ctime_ns and inode are None for rows written before they were recorded."""
        where, args = self._under("i.path", under)
        rows = self._conn.execute(
            "SELECT i.path, i.id, i.size, i.mtime_ns, i.sha256, EXISTS (SELECT 1 FROM items it "
            "JOIN embeddings e ON e.item_id = it.id WHERE it.image_id = i.id), "
            f"{self._identity} FROM images i{where}",
            args,
        )
        return {_path(r[0]): (r[1], r[2], r[3], r[4], bool(r[5]), r[6], r[7]) for r in rows}

    def embedded_with_hash(self, sha256: str) -> list[tuple[int, str]]:
        """(file id, path) of the files with an embedded item whose bytes hash to sha256, by id."""
        rows = self._conn.execute(
            "SELECT i.id, i.path FROM images i WHERE i.sha256 = ? AND EXISTS (SELECT 1 FROM "
            "items it JOIN embeddings e ON e.item_id = it.id WHERE it.image_id = i.id) "
            "ORDER BY i.id",
            (sha256,),
        )
        return [(int(i), _path(p)) for i, p in rows]

    def _under(self, column: str, under: Sequence[str] | None) -> tuple[str, list[bytes]]:
        """A WHERE clause (with its leading space; empty for None): column is one of these
        absolute folders or a path below one. Paths are bytes, so a range scan of the index."""
        if not under:
            return "", []
        conds, args = [], []
        sep = os.sep.encode()
        for folder in under:
            base = _key(folder).rstrip(sep)
            # Below base: base + "/" <= path < base + "0" ("0" follows "/" in every encoding).
            conds.append(
                f"({column} = {self._p} OR ({column} >= {self._p} AND {column} < {self._p}))"
            )
            args += [base, base + sep, base + bytes([sep[0] + 1])]
        return " WHERE (" + " OR ".join(conds) + ")", args  # parenthesised: callers add AND

    def rows_by_ids(self, ids: Iterable[int]) -> dict[int, dict]:
        """id -> the image's row (id, path, size, mtime_ns, sha256, width, height, format,
        indexed_at, model_id); ids not in the catalog are left out."""
        out: dict[int, dict] = {}
        for chunk in _chunks(ids):
            for row in self._conn.execute(f"{_SELECT_IMAGES} WHERE id IN ({_marks(chunk)})", chunk):
                out[row[0]] = self._row(row)
        return out

    def row_by_path(self, path: str) -> dict | None:
        """The row of the image at this exact path (as rows_by_ids gives it), or None."""
        row = self._conn.execute(
            f"{_SELECT_IMAGES} WHERE path = {self._p}", (_key(path),)
        ).fetchone()
        return self._row(row) if row else None

    def all_paths(self) -> list[str]:
        return [_path(p) for (p,) in self._conn.execute("SELECT path FROM images")]

    def embedded_paths(self, under: Sequence[str] | None = None) -> list[tuple[int, str]]:
        """(item id, path of its file) of every embedded item; with ``under`` (absolute
        folders), only those whose file is one of them or below one of them."""
        where, args = self._under("i.path", under)
        sql = (
            "SELECT it.id, i.path FROM images i JOIN items it ON it.image_id = i.id "
            f"JOIN embeddings e ON e.item_id = it.id{where}"
        )
        return [(int(i), _path(p)) for i, p in self._conn.execute(sql, args)]

    def sample_paths(self, n: int) -> list[str]:
        """Up to n paths spread over the catalog, the same on every call.

        A multiplicative hash of the id orders them: a spread over folders and time.
        """
        rows = self._conn.execute(
            "SELECT path FROM images ORDER BY (id * 2654435761) % 4294967291 LIMIT ?", (n,)
        )
        return [_path(p) for (p,) in rows]

    def exact_duplicate_groups(self) -> list[list[int]]:
        """File ids of the files with the same content hash that yield items, a group per hash
        (ids ascending). A photo's file id is its one item's id; a video's names the file."""
        rows = self._conn.execute(
            "SELECT i.sha256, i.id FROM images i WHERE i.sha256 IN (SELECT sha256 FROM images "
            "GROUP BY sha256 HAVING count(*) > 1) AND EXISTS (SELECT 1 FROM items it "
            "WHERE it.image_id = i.id) ORDER BY i.sha256, i.id"
        )
        groups: dict[str, list[int]] = {}
        for sha, image_id in rows:
            groups.setdefault(sha, []).append(int(image_id))
        return list(groups.values())

    def frame_items(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(item ids ascending, their file ids, their times in seconds) of every 'frame' item,
        embedded or not: the videos' frames (empty arrays in an index without videos)."""
        rows = self._conn.execute(
            "SELECT id, image_id, t FROM items WHERE kind = 'frame' ORDER BY id"
        ).fetchall()
        if not rows:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64)
        ids, files, times = zip(*rows, strict=True)
        return (
            np.array(ids, np.int64),
            np.array(files, np.int64),
            np.array([np.nan if t is None else t for t in times], np.float64),
        )

    def embedded_ids(self) -> np.ndarray:
        """Ids of the items with a vector, ascending (what FAISS must hold)."""
        rows = self._conn.execute("SELECT item_id FROM embeddings ORDER BY item_id").fetchall()
        return np.array([r[0] for r in rows], dtype=np.int64)

    def vectors_for(self, ids: Iterable[int]) -> tuple[np.ndarray, np.ndarray]:
        """(item ids, vectors [n, d]) for those item ids that have an embedding."""
        got_ids, blobs = [], []
        for chunk in _chunks(ids):
            for item_id, blob in self._conn.execute(
                f"SELECT item_id, vector FROM embeddings WHERE item_id IN ({_marks(chunk)})",
                chunk,
            ):
                got_ids.append(item_id)
                blobs.append(blob)
        if not blobs:
            return np.zeros(0, dtype=np.int64), np.zeros((0, 0), dtype=np.float32)
        return np.array(got_ids, dtype=np.int64), self._from_file(got_ids, blobs)

    def iter_vectors(self, batch: int = 4096) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """All embeddings in item id order, batch by batch (never all in memory at once)."""
        last = -1
        while True:
            rows = self._conn.execute(
                "SELECT item_id, vector FROM embeddings WHERE item_id > ? ORDER BY item_id LIMIT ?",
                (last, batch),
            ).fetchall()
            if not rows:
                return
            last = rows[-1][0]
            ids = [r[0] for r in rows]
            yield (
                np.array(ids, dtype=np.int64),
                self._from_file(ids, [r[1] for r in rows], span=True),
            )

    # -- writes (call inside transaction()) --------------------------------
    def insert_image(
        self,
        record: dict,
        vector: np.ndarray | None,
        items: Sequence[tuple[str, float | None, Sequence[float] | None, np.ndarray | None]] = (),
    ) -> int:
        """A new file row (record: path, size, mtime_ns, sha256, width, height, format,
        indexed_at, model_id, and optionally ctime_ns, inode), its one 'image' item and that
        item's embedding (vector; None: not embedded yet); clears a skip of that path.
        Returns the id (the file's and its first item's). items, when given, are what the
        file yields instead of the one whole image: (kind, t, box or None, vector) each, ids
        in that order."""
        key = _key(record["path"])
        image_id = self.next_image_id()
        self._conn.execute(
            "INSERT INTO images(id, path, size, mtime_ns, sha256, width, height, format, "
            "indexed_at, model_id, ctime_ns, inode) VALUES (:id, :key, :size, :mtime_ns, "
            ":sha256, :width, :height, :format, :indexed_at, :model_id, :ctime_ns, :inode)",
            {"ctime_ns": None, "inode": None, **record, "key": key, "id": image_id},
        )
        located = list(items) or [("image", None, None, vector)]  # a photo
        for n, (kind, t, box, vec) in enumerate(located):
            item_id = image_id + n  # next_image_id: no id at or past image_id was ever used
            x0, y0, x1, y1 = box if box is not None else (None, None, None, None)
            self._conn.execute(
                "INSERT INTO items(id, image_id, kind, t, x0, y0, x1, y1) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (item_id, image_id, kind, t, x0, y0, x1, y1),
            )
            if vec is not None:
                self._conn.execute(
                    "INSERT INTO embeddings(item_id, vector) VALUES (?, ?)",
                    (item_id, vector_to_blob(vec)),
                )
        self._conn.execute("DELETE FROM skipped WHERE path = ?", (key,))
        return image_id

    def insert_images(self, records: Sequence[dict], vectors: np.ndarray) -> None:
        """Rows with the ids given (``id`` in each record: the file's and its one 'image'
        item's) and their embeddings, in bulk."""
        self._conn.executemany(
            "INSERT INTO images(id, path, size, mtime_ns, sha256, width, height, format, "
            "indexed_at, model_id) VALUES (:id, :key, :size, :mtime_ns, :sha256, :width, "
            ":height, :format, :indexed_at, :model_id)",
            ({**r, "key": _key(r["path"])} for r in records),
        )
        self._conn.executemany(
            "INSERT INTO items(id, image_id, kind) VALUES (?, ?, 'image')",
            ((int(r["id"]), int(r["id"])) for r in records),
        )
        if self._vfile is not None:
            # Rows first: an id clash fails here, before the file row of a committed id is touched.
            self._conn.executemany(
                "INSERT INTO embeddings(item_id, vector) VALUES (?, ?)",
                ((int(r["id"]), b"") for r in records),
            )
            self._vfile.write(np.array([int(r["id"]) for r in records], np.int64), vectors)
            return
        self._conn.executemany(
            "INSERT INTO embeddings(item_id, vector) VALUES (?, ?)",
            ((int(r["id"]), vector_to_blob(v)) for r, v in zip(records, vectors, strict=True)),
        )

    def restore(self, salvaged: Salvaged, rows: Sequence[dict], vectors: np.ndarray) -> None:
        """Fill a new, empty catalog from a damaged one's salvage: its settings (model, dim),
        these rows with their ids and vectors, and an id counter past every id the old
        catalog (or FAISS) may have handed out, so no id ever names two images."""
        with self.transaction():
            for key in ("model_id", "space", "dim", "model_file"):
                if key in salvaged.meta:
                    self.set_meta(key, salvaged.meta[key])
            self.set_meta("generation", int(salvaged.meta.get("generation", 0) or 0) + 1)
            if len(rows):
                self.insert_images(rows, vectors)
            seq = max(salvaged.next_id - 1, self.max_image_id())
            for table in ("images", "items"):  # ids of files and items share one counter
                migrations.raise_sequence(self._conn, table, seq)

    def set_embedding(self, item_id: int, vector: np.ndarray) -> None:
        self._doom([item_id])  # a float32 blob from now on: a file row it had is dead
        self._conn.execute(
            "INSERT INTO embeddings(item_id, vector) VALUES (?, ?) "
            "ON CONFLICT(item_id) DO UPDATE SET vector = excluded.vector",
            (item_id, vector_to_blob(vector)),
        )

    def _items_of(self, file_ids: Iterable[int]) -> list[int]:
        """The ids of these files' items."""
        out: list[int] = []
        for chunk in _chunks(file_ids):
            rows = self._conn.execute(
                f"SELECT id FROM items WHERE image_id IN ({_marks(chunk)})", chunk
            )
            out.extend(int(r[0]) for r in rows)
        return out

    def file_vectors(self, file_ids: Iterable[int]) -> dict[int, np.ndarray]:
        """file id -> the vector of its 'image' item, for the files that have one (what a
        copy of the same bytes reuses instead of embedding them again)."""
        item_of: dict[int, int] = {}
        for chunk in _chunks(file_ids):
            for item_id, image_id in self._conn.execute(
                f"SELECT id, image_id FROM items WHERE kind = 'image' AND image_id IN "
                f"({_marks(chunk)})",
                chunk,
            ):
                item_of[int(item_id)] = int(image_id)
        ids, vecs = self.vectors_for(item_of)
        return {item_of[int(i)]: v for i, v in zip(ids, vecs, strict=True)}

    def relink(
        self,
        image_id: int,
        path: str,
        size: int,
        mtime_ns: int,
        ctime_ns: int | None = None,
        inode: int | None = None,
    ) -> None:
        """The file moved (same content): the row keeps its id and vector under the new path."""
        key = _key(path)
        other = self._conn.execute(
            "SELECT id FROM images WHERE path = ? AND id != ?", (key, image_id)
        ).fetchall()
        self._doom(self._items_of(r[0] for r in other))
        self._conn.execute("DELETE FROM images WHERE path = ? AND id != ?", (key, image_id))
        self._conn.execute(
            "UPDATE images SET path = ?, size = ?, mtime_ns = ?, ctime_ns = ?, inode = ? "
            "WHERE id = ?",
            (key, size, mtime_ns, ctime_ns, inode, image_id),
        )
        self._conn.execute("DELETE FROM skipped WHERE path = ?", (key,))

    def touch(
        self,
        image_id: int,
        size: int,
        mtime_ns: int,
        ctime_ns: int | None = None,
        inode: int | None = None,
    ) -> None:
        """The file's bytes are the row's: only its recorded state (stat) changes."""
        self._conn.execute(
            "UPDATE images SET size = ?, mtime_ns = ?, ctime_ns = ?, inode = ? WHERE id = ?",
            (size, mtime_ns, ctime_ns, inode, image_id),
        )

    def delete_images(self, ids: Iterable[int]) -> int:
        """Delete these files' rows, with their items and the items' embeddings."""
        n = 0
        ids = list(ids)
        self._doom(self._items_of(ids))
        for chunk in _chunks(ids):
            self._conn.execute(
                "DELETE FROM embeddings WHERE item_id IN "
                f"(SELECT id FROM items WHERE image_id IN ({_marks(chunk)}))",
                chunk,
            )
            n += self._conn.execute(
                f"DELETE FROM images WHERE id IN ({_marks(chunk)})", chunk
            ).rowcount
        return n

    def clear_embeddings(self) -> int:
        self._dying_all = True
        return self._conn.execute("DELETE FROM embeddings").rowcount

    def record_skip(
        self, path: str, reason: str, size: int | None, mtime_ns: int | None, when: str
    ) -> None:
        """Remember an unreadable file (and drop its row, if it had one)."""
        key = _key(path)
        self._conn.execute(
            "INSERT INTO skipped(path, reason, size, mtime_ns, seen_at) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT(path) DO UPDATE SET reason = excluded.reason, size = excluded.size, "
            "mtime_ns = excluded.mtime_ns, seen_at = excluded.seen_at",
            (key, reason, size, mtime_ns, when),
        )
        gone = self._conn.execute("SELECT id FROM images WHERE path = ?", (key,)).fetchall()
        self._doom(self._items_of(r[0] for r in gone))
        self._conn.execute("DELETE FROM images WHERE path = ?", (key,))

    def record_skips(self, skips: Iterable[tuple[str, str, int | None, int | None, str]]) -> None:
        """Bulk record_skip for (path, reason, size, mtime_ns, when) of files with no row."""
        self._conn.executemany(
            "INSERT OR REPLACE INTO skipped(path, reason, size, mtime_ns, seen_at) VALUES (?, ?, ?, ?, ?)",
            ((_key(p), *rest) for p, *rest in skips),
        )

    def skipped(self, under: Sequence[str] | None = None) -> list[dict]:
        """Skipped files (path, reason, size, mtime_ns, seen_at), by path; with ``under``,
        only those in or below these absolute folders."""
        where, args = self._under("path", under)
        cur = self._conn.execute(
            f"SELECT path, reason, size, mtime_ns, seen_at FROM skipped{where} ORDER BY path", args
        )
        cols = [c[0] for c in cur.description]
        return [{**dict(zip(cols, r)), "path": _path(r[0])} for r in cur]

    def forget_skips(self, paths: Iterable[str]) -> None:
        self._conn.executemany("DELETE FROM skipped WHERE path = ?", [(_key(p),) for p in paths])

    # -- labels (wherein label) -------------------------------------------
    def has_labels(self) -> bool:
        """Whether the labels table exists (a read-only catalog of the first release may lack it)."""
        return self._db["labels"].exists()

    def store_labels(self, rows: Iterable[tuple[int, str, float, str, str]]) -> int:
        """(item_id, label, probability, template, model_id) rows, stored for the item's
        file (labels are per file) and replacing earlier ones with the same key; rows of
        items no longer in the catalog are dropped. Returns
        the number written. Call inside transaction()."""
        if self.readonly:
            raise CatalogReadOnly(f"{self.path}: opened read-only")
        before = self._conn.total_changes
        try:
            self._conn.executemany(
                "INSERT OR REPLACE INTO labels(image_id, label, probability, template, model_id) "
                "SELECT image_id, ?, ?, ?, ? FROM items WHERE id = ?",
                ((label, p, t, m, i) for i, label, p, t, m in rows),
            )
        except sqlite3.OperationalError as exc:
            if "readonly" in str(exc) or "read-only" in str(exc):
                raise CatalogReadOnly(f"{self.path}: {exc}") from exc
            raise
        return self._conn.total_changes - before

    def read_labels(
        self, label: str | None = None, template: str | None = None, model_id: str | None = None
    ) -> list[dict]:
        """Stored label rows (image_id, path, label, probability, template, model_id), by path
        then label; each filter given narrows them."""
        if not self.has_labels():
            return []
        sql = (
            "SELECT l.image_id, i.path, l.label, l.probability, l.template, l.model_id "
            "FROM labels l JOIN images i ON i.id = l.image_id WHERE 1=1"
        )
        args: list = []
        for column, value in (("label", label), ("template", template), ("model_id", model_id)):
            if value is not None:
                sql += f" AND l.{column} = ?"
                args.append(value)
        cur = self._conn.execute(sql + " ORDER BY i.path, l.label", args)
        cols = [c[0] for c in cur.description]
        return [{**dict(zip(cols, r)), "path": _path(r[1])} for r in cur]

    def label_names(self, model_id: str) -> list[str]:
        """The distinct labels stored for this model, sorted ([] without a labels table)."""
        if not self.has_labels():
            return []
        rows = self._conn.execute(
            "SELECT DISTINCT label FROM labels WHERE model_id = ? ORDER BY label", (model_id,)
        )
        return [r[0] for r in rows]

    def best_labels(self, ids: Iterable[int], model_id: str) -> dict[int, str]:
        """id -> its most probable stored label for this model (ids without one left out)."""
        out: dict[int, str] = {}
        if not self.has_labels():
            return out
        for chunk in _chunks(ids):
            rows = self._conn.execute(
                # SQLite: with MAX(), the bare column comes from the row holding the maximum.
                f"SELECT image_id, label, MAX(probability) FROM labels WHERE model_id = ? "
                f"AND image_id IN ({_marks(chunk)}) GROUP BY image_id",
                [model_id, *chunk],
            )
            out.update({int(r[0]): r[1] for r in rows})
        return out

    # -- photo metadata (EXIF) --------------------------------------------
    def has_photos(self) -> bool:
        """Whether the photos table exists (a read-only catalog of an older release lacks it)."""
        return self._db["photos"].exists()

    def photos_to_read(self, under: Sequence[str] | None = None) -> list[tuple[int, str, int, int]]:
        """(id, path, size, mtime_ns) of images whose metadata is missing, or was read
        from another state of the file (same id, new content); with ``under``, only
        those in or below these absolute folders."""
        where, args = self._under("i.path", under)
        stale = "(p.image_id IS NULL OR p.size != i.size OR p.mtime_ns != i.mtime_ns)"
        where = f"{where} AND {stale}" if where else f" WHERE {stale}"
        rows = self._conn.execute(
            "SELECT i.id, i.path, i.size, i.mtime_ns FROM images i "
            f"LEFT JOIN photos p ON p.image_id = i.id{where} ORDER BY i.id",
            args,
        )
        return [(int(r[0]), _path(r[1]), int(r[2]), int(r[3])) for r in rows]

    def store_photos(self, rows: Iterable[dict]) -> int:
        """Insert or replace metadata rows (dicts keyed by PHOTO_COLUMNS) in one transaction;
        rows of images deleted meanwhile are left out. Returns the rows written."""
        cols = ", ".join(PHOTO_COLUMNS)
        sql = (
            f"INSERT OR REPLACE INTO photos({cols}) SELECT {_marks(PHOTO_COLUMNS)} "
            "WHERE EXISTS (SELECT 1 FROM images WHERE id = ?)"
        )
        written = 0
        with self.transaction():
            for r in rows:
                values = [r.get(c) for c in PHOTO_COLUMNS]
                written += self._conn.execute(sql, [*values, r["image_id"]]).rowcount
        return written

    def hit_rows(self, ids: Iterable[int]) -> dict[int, dict]:
        """item id -> its file's row (as rows_by_ids gives it: ``id`` is the file's id) plus
        the item (item_id, kind, t, box: [x0, y0, x1, y1] or None) and the photo columns
        (taken, taken_offset, make, model, lens, lat, lon; None where unknown): what a search
        hit shows. Item ids not in the catalog are left out."""
        items: dict[int, tuple] = {}
        for chunk in _chunks(ids):
            for r in self._conn.execute(
                f"SELECT id, image_id, kind, t, x0, y0, x1, y1 FROM items WHERE id IN "
                f"({_marks(chunk)})",
                chunk,
            ):
                items[int(r[0])] = r
        files = self.rows_by_ids({r[1] for r in items.values()})
        for row in files.values():
            row.update(dict.fromkeys(_PHOTO_HIT_COLUMNS))
        if files and self.has_photos():
            cols = ", ".join(_PHOTO_HIT_COLUMNS)
            for chunk in _chunks(files):
                for r in self._conn.execute(
                    f"SELECT image_id, {cols} FROM photos WHERE image_id IN ({_marks(chunk)})",
                    chunk,
                ):
                    files[r[0]].update(zip(_PHOTO_HIT_COLUMNS, r[1:], strict=True))
        out: dict[int, dict] = {}
        for item_id, (_, file_id, kind, t, *box) in items.items():
            if file_id in files:
                located = (item_id, kind, t, None if box[0] is None else [*box])
                out[item_id] = {**files[file_id], **dict(zip(_ITEM_COLUMNS, located))}
        return out

    def photo_matches(
        self,
        taken_from: str | None = None,
        taken_before: str | None = None,
        camera: str | None = None,
        box: tuple[float, float, float, float] | None = None,
    ) -> list[tuple[int, float | None, float | None]]:
        """(item id, lat, lon) of every embedded item whose file passes the photo filters.

        taken_from <= taken < taken_before, compared as 'YYYY-MM-DD HH:MM:SS' text, where
        taken is the EXIF time, else the file's mtime in local time; camera: a substring of
        make + ' ' + model, ASCII case folded; box: (lat_lo, lat_hi, lon_lo, lon_hi), only
        images with GPS inside it.
        """
        photos = self.has_photos()
        if not photos and (camera or box):
            return []  # nothing read yet: no image has a camera or a position
        taken = _TAKEN if photos else _TAKEN.replace("p.taken", "NULL")
        sql = (
            "SELECT it.id, "
            + ("p.lat, p.lon" if photos else "NULL, NULL")
            + " FROM images i JOIN items it ON it.image_id = i.id"
            + " JOIN embeddings e ON e.item_id = it.id"
            + (" LEFT JOIN photos p ON p.image_id = i.id" if photos else "")
            + " WHERE 1 = 1"
        )
        args: list = []
        if taken_from is not None:
            sql += f" AND {taken} >= ?"
            args.append(taken_from)
        if taken_before is not None:
            sql += f" AND {taken} < ?"
            args.append(taken_before)
        if camera:
            escaped = camera.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            sql += " AND (COALESCE(p.make, '') || ' ' || COALESCE(p.model, '')) LIKE ? ESCAPE '\\'"
            args.append(f"%{escaped}%")
        if box is not None:
            sql += " AND p.lat BETWEEN ? AND ? AND p.lon BETWEEN ? AND ?"
            args += list(box)
        return [(int(r[0]), r[1], r[2]) for r in self._conn.execute(sql, args)]

    # -- health (status --check) ------------------------------------------
    def soundness_problem(self) -> str | None:
        """PRAGMA quick_check: every page and record readable (no index cross-check, which
        integrity_problem adds); None when sound, else its first complaint."""
        result = self._conn.execute("PRAGMA quick_check").fetchone()[0]
        return None if result == "ok" else result

    def integrity_problem(self) -> str | None:
        """SQLite's own check of the file: None when sound, else its first complaint."""
        result = self._conn.execute("PRAGMA integrity_check").fetchone()[0]
        return None if result == "ok" else result

    def orphan_embeddings(self) -> int:
        """Embeddings whose item, or the item's file row, is gone (foreign keys should make
        this 0)."""
        return self._conn.execute(
            "SELECT count(*) FROM embeddings e LEFT JOIN items it ON it.id = e.item_id "
            "LEFT JOIN images i ON i.id = it.image_id WHERE i.id IS NULL"
        ).fetchone()[0]

    def orphan_items(self) -> int:
        """Items whose file row is gone (foreign keys should make this 0)."""
        return self._conn.execute(
            "SELECT count(*) FROM items it LEFT JOIN images i ON i.id = it.image_id "
            "WHERE i.id IS NULL"
        ).fetchone()[0]

    def files_without_items(self) -> int:
        """File rows that yield no item (every indexed file yields at least one)."""
        return self._conn.execute(
            "SELECT count(*) FROM images i WHERE NOT EXISTS "
            "(SELECT 1 FROM items it WHERE it.image_id = i.id)"
        ).fetchone()[0]

    def misshapen_embeddings(self, dim: int) -> int:
        """Embeddings that are not dim float32 values (nor an empty blob, whose vector is in
        the catalog's vector file, when it has one)."""
        empty_ok = dim * 4 if self._vfile is None else 0
        return self._conn.execute(
            "SELECT count(*) FROM embeddings WHERE length(vector) NOT IN (?, ?)",
            (dim * 4, empty_ok),
        ).fetchone()[0]

    def _row(self, row: Sequence) -> dict:
        out = dict(zip(_IMAGE_COLUMNS, row))
        out["path"] = _path(out["path"])
        return out
