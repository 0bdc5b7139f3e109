"""Versioned changes to the catalog's schema, applied in place when a catalog is opened for writing.

Each step is a ``sqlite_utils.Migrations`` function, recorded by name in
``_sqlite_migrations`` once applied; ``meta.schema_version`` holds the number
of the last one (what the first release wrote as 1). Steps never touch the
embeddings: an old index is upgraded in seconds, never re-embedded.

Invariants a step must keep:
- ids stay as they are, and so does ``sqlite_sequence`` (FAISS holds the ids;
  AUTOINCREMENT promises an id is never handed out twice);
- every row and vector survives bit for bit;
- it is idempotent on what the first release wrote (m001 runs on such catalogs,
  which have no ``_sqlite_migrations`` table yet).

``migrate`` runs all pending steps in one IMMEDIATE transaction with foreign
keys off (a table rebuild must not cascade-delete the rows that point at it):
two processes opening an old catalog at once upgrade it once, and a crash
leaves it as it was.
"""

from __future__ import annotations

import json
import sqlite3

import sqlite_utils
from sqlite_utils import Migrations

MIGRATIONS = Migrations("wherein.catalog")

# What the first release created (its catalog.py, plus the labels table that
# `wherein label` added on first use). Kept verbatim: m001 must match it.
SCHEMA_V1 = """
CREATE TABLE IF NOT EXISTS images (
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- AUTOINCREMENT: ids are never reused, FAISS relies on it
    path TEXT NOT NULL UNIQUE,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    width INTEGER,
    height INTEGER,
    format TEXT,
    indexed_at TEXT NOT NULL,
    model_id TEXT
);
CREATE INDEX IF NOT EXISTS images_sha256 ON images(sha256);
CREATE TABLE IF NOT EXISTS embeddings (
    image_id INTEGER PRIMARY KEY REFERENCES images(id) ON DELETE CASCADE,
    vector BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS skipped (
    path TEXT PRIMARY KEY,
    reason TEXT NOT NULL,
    size INTEGER,
    mtime_ns INTEGER,
    seen_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS labels (
    image_id INTEGER NOT NULL REFERENCES images(id) ON DELETE CASCADE,
    label TEXT NOT NULL,
    probability REAL NOT NULL,
    template TEXT NOT NULL,
    model_id TEXT NOT NULL,
    PRIMARY KEY (image_id, label, template, model_id)
);
CREATE INDEX IF NOT EXISTS labels_by_label ON labels(label, probability);
"""

# Paths as the bytes the OS gave (os.fsencode): any name a file system allows,
# including ones that are not UTF-8, and NFC/NFD spellings stay distinct.
_IMAGES_V2 = """
CREATE TABLE images_v2 (
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- AUTOINCREMENT: ids are never reused, FAISS relies on it
    path BLOB NOT NULL UNIQUE,             -- os.fsencode(path): lossless for any file name
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    width INTEGER,
    height INTEGER,
    format TEXT,
    indexed_at TEXT NOT NULL,
    model_id TEXT
)
"""
_SKIPPED_V2 = """
CREATE TABLE skipped_v2 (
    path BLOB PRIMARY KEY,                 -- os.fsencode(path), as in images
    reason TEXT NOT NULL,
    size INTEGER,
    mtime_ns INTEGER,
    seen_at TEXT NOT NULL
)
"""
_IMAGE_COLUMNS = "id, path, size, mtime_ns, sha256, width, height, format, indexed_at, model_id"


@MIGRATIONS()
def m001_initial(db: sqlite_utils.Database) -> None:
    """The first release's schema (a no-op on a catalog it wrote, bar the labels table)."""
    for statement in SCHEMA_V1.split(";"):
        if statement.strip():
            db.execute(statement)
    _set_version(db, 1)


@MIGRATIONS()
def m002_paths_as_bytes(db: sqlite_utils.Database) -> None:
    """images.path and skipped.path become BLOBs of the OS's bytes (UTF-8 text before).

    CAST(text AS BLOB) gives the text's UTF-8 bytes, which is what os.fsencode
    gives for every name the first release could store.
    """
    seq = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'images'").fetchone()
    db.execute(_IMAGES_V2)
    db.execute(
        f"INSERT INTO images_v2({_IMAGE_COLUMNS}) SELECT "
        + _IMAGE_COLUMNS.replace("path", "CAST(path AS BLOB)", 1)
        + " FROM images"
    )
    db.execute("DROP TABLE images")
    db.execute("ALTER TABLE images_v2 RENAME TO images")
    db.execute("CREATE INDEX images_sha256 ON images(sha256)")
    if seq is not None:  # the highest id ever handed out, which may be a deleted row's
        raise_sequence(db, "images", seq[0])
    db.execute(_SKIPPED_V2)
    db.execute(
        "INSERT INTO skipped_v2(path, reason, size, mtime_ns, seen_at) "
        "SELECT CAST(path AS BLOB), reason, size, mtime_ns, seen_at FROM skipped"
    )
    db.execute("DROP TABLE skipped")
    db.execute("ALTER TABLE skipped_v2 RENAME TO skipped")
    _check_foreign_keys(db, "path")
    _set_version(db, 2)


# Photo metadata from EXIF, one row per image, read from the file state (size, mtime)
# it records: a row whose image changed since is read again. Images without EXIF get
# a row of NULLs, so they are not read on every run.
_PHOTOS = """
CREATE TABLE IF NOT EXISTS photos (
    image_id INTEGER PRIMARY KEY REFERENCES images(id) ON DELETE CASCADE,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    taken TEXT,            -- 'YYYY-MM-DD HH:MM:SS': EXIF DateTimeOriginal, camera local time
    taken_offset TEXT,     -- '+02:00' (OffsetTimeOriginal) when the camera wrote it
    make TEXT,
    model TEXT,
    lens TEXT,
    lat REAL,              -- WGS 84 decimal degrees
    lon REAL,
    orientation INTEGER    -- EXIF 1-8
);
CREATE INDEX IF NOT EXISTS photos_taken ON photos(taken);
CREATE INDEX IF NOT EXISTS photos_lat ON photos(lat) WHERE lat IS NOT NULL;
"""


@MIGRATIONS()
def m003_photos(db: sqlite_utils.Database) -> None:
    """The photos table (EXIF metadata). Empty at first: the next index run fills it from
    the files' headers, without re-embedding anything."""
    for statement in _PHOTOS.split(";"):
        if statement.strip():
            db.execute(statement)
    _set_version(db, 3)


@MIGRATIONS()
def m004_file_identity(db: sqlite_utils.Database) -> None:
    """images.ctime_ns and images.inode: with size and mtime, the file state a row was read
    from, so a file rewritten with its old size and mtime is read again. NULL in the rows
    written before (they are trusted on size and mtime until a run reads them again)."""
    columns = {c.name for c in db["images"].columns}
    for column in ("ctime_ns", "inode"):
        if column not in columns:
            db.execute(f"ALTER TABLE images ADD COLUMN {column} INTEGER")
    _set_version(db, 4)


# A file (a row of images) yields items, each with its own vector: a photo one item of
# kind 'image'; a video's frames ('frame', at t seconds) and a photo's regions ('region',
# a box) are what other kinds are for. FAISS ids are item ids. Item ids and file ids come
# from one counter (Catalog.next_id), so a photo's item has its file's id.
_ITEMS = """
CREATE TABLE items (
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- the FAISS id, never reused (AUTOINCREMENT)
    image_id INTEGER NOT NULL REFERENCES images(id) ON DELETE CASCADE,
    kind TEXT NOT NULL,    -- 'image' | 'frame' | 'region'
    t REAL,                -- frame: seconds from the start of the video
    x0 REAL, y0 REAL, x1 REAL, y1 REAL  -- region: its box in the file's pixels
);
CREATE INDEX items_image ON items(image_id);
CREATE TABLE embeddings_v5 (
    item_id INTEGER PRIMARY KEY REFERENCES items(id) ON DELETE CASCADE,
    vector BLOB NOT NULL
)
"""


@MIGRATIONS()
def m005_items(db: sqlite_utils.Database) -> None:
    """Files yield items: each image row gets one item of kind 'image' whose id is the
    image's id, and embeddings are keyed by item id, their vectors copied as they are.
    FAISS (and vectors.f16) hold the same ids, so they stay current."""
    for statement in _ITEMS.split(";"):
        if statement.strip():
            db.execute(statement)
    db.execute("INSERT INTO items(id, image_id, kind) SELECT id, id, 'image' FROM images")
    seq = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'images'").fetchone()
    if seq is not None:  # deleted images' ids are FAISS ids that must never come back
        raise_sequence(db, "items", seq[0])
    db.execute("INSERT INTO embeddings_v5(item_id, vector) SELECT image_id, vector FROM embeddings")
    db.execute("DROP TABLE embeddings")
    db.execute("ALTER TABLE embeddings_v5 RENAME TO embeddings")
    _check_foreign_keys(db, "items")
    _set_version(db, 5)


# A video is a file whose items are frames ('frame' items at t seconds); this is what the
# file is as a video. complete = 0 while its frames are still being committed (a run stopped
# mid-video: the next one samples it again and embeds the frames whose t is not stored yet);
# damage: why the stream's rest was skipped (frames before it are kept). Taken time and GPS
# go in photos, as for a photo, so the photo filters find videos unchanged.
_VIDEOS = """
CREATE TABLE IF NOT EXISTS videos (
    image_id INTEGER PRIMARY KEY REFERENCES images(id) ON DELETE CASCADE,
    duration REAL,         -- seconds
    fps REAL,              -- average frame rate
    codec TEXT,
    rotation INTEGER,      -- degrees a player turns the stored frames (0/90/180/270)
    frames INTEGER,        -- frame items stored
    complete INTEGER NOT NULL DEFAULT 0,
    damage TEXT
)
"""


@MIGRATIONS()
def m006_videos(db: sqlite_utils.Database) -> None:
    """The videos table. Empty at first: no earlier release indexed videos, so nothing moves
    and nothing is re-embedded."""
    db.execute(_VIDEOS)
    _set_version(db, 6)


@MIGRATIONS()
def m007_file_kinds(db: sqlite_utils.Database) -> None:
    """images.kind: each file's media kind (indexer/kinds names them). A file with a videos
    row is a video, every other one a photo: what the code before kinds took them for.
    Nothing is re-embedded."""
    db.execute("ALTER TABLE images ADD COLUMN kind TEXT NOT NULL DEFAULT 'photo'")
    db.execute("UPDATE images SET kind = 'video' WHERE id IN (SELECT image_id FROM videos)")
    _set_version(db, 7)


# A photo cut into regions ('region' items, each with its box): which tiling cut it and
# how many regions it gave (0: too small, or flat all over). A photo without a row here was
# never cut: a run with regions on cuts it then, adding its region items beside its whole
# image's item, which stays as it is (no re-embedding).
_TILED = """
CREATE TABLE IF NOT EXISTS tiled (
    image_id INTEGER PRIMARY KEY REFERENCES images(id) ON DELETE CASCADE,
    tiling TEXT NOT NULL,  -- indexer/regions.py's Tiling.name
    regions INTEGER NOT NULL
)
"""


@MIGRATIONS()
def m008_tiled(db: sqlite_utils.Database) -> None:
    """The tiled table. Empty at first: no photo of an older index was cut into regions, and
    nothing else moves."""
    db.execute(_TILED)
    _set_version(db, 8)


SCHEMA_VERSION = 8  # the number of the last step above


def stamped_version(conn: sqlite3.Connection) -> int:
    """The schema_version the catalog's meta records (0 where there is none to read)."""
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        return int(json.loads(row[0])) if row else 0
    except (sqlite3.OperationalError, TypeError, ValueError):
        return 0


def pending(db: sqlite_utils.Database) -> list[str]:
    """Names of the steps not yet applied (reads only)."""
    return [m.name for m in MIGRATIONS.pending(db)]


def has_items(db: sqlite_utils.Database) -> bool:
    """Whether files yield items (m004 applied) rather than one image row being one vector."""
    return m005_items.__name__ not in pending(db)


def has_videos(db: sqlite_utils.Database) -> bool:
    """Whether the videos table exists (m006 applied): a read-only older catalog has none."""
    return m006_videos.__name__ not in pending(db)


def has_file_kinds(db: sqlite_utils.Database) -> bool:
    """Whether images has the kind column (m007 applied)."""
    return m007_file_kinds.__name__ not in pending(db)


def has_tiled(db: sqlite_utils.Database) -> bool:
    """Whether the tiled table exists (m008 applied): a read-only older catalog has none."""
    return m008_tiled.__name__ not in pending(db)


def paths_are_bytes(db: sqlite_utils.Database) -> bool:
    """Whether paths are stored as BLOBs (m002 applied) rather than the first release's text."""
    return m002_paths_as_bytes.__name__ not in pending(db)


def has_file_identity(db: sqlite_utils.Database) -> bool:
    """Whether images has ctime_ns and inode (m004 applied)."""
    return m004_file_identity.__name__ not in pending(db)


def migrate(db: sqlite_utils.Database) -> list[str]:
    """Apply the pending steps; return their names. Call with foreign keys off, outside a transaction."""
    if not pending(db):
        return []
    conn = db.conn
    assert not conn.in_transaction, "migrate() runs its own transaction"
    assert not conn.execute("PRAGMA foreign_keys").fetchone()[0], "foreign keys must be off"
    conn.execute("BEGIN IMMEDIATE")  # another opener waits here, then finds nothing to do
    try:
        todo = pending(db)
        MIGRATIONS.apply(db)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return todo


def raise_sequence(db: sqlite_utils.Database | sqlite3.Connection, table: str, seq: int) -> None:
    """AUTOINCREMENT's counter of `table` at least `seq`: ids up to it (deleted rows' ones
    too, which FAISS may still name) are never handed out again."""
    if not db.execute(
        "UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?", (seq, table)
    ).rowcount:
        db.execute("INSERT INTO sqlite_sequence(name, seq) VALUES (?, ?)", (table, seq))


def _check_foreign_keys(db: sqlite_utils.Database, step: str) -> None:
    """A step that rebuilt tables must leave every reference whole (else it rolls back)."""
    broken = db.execute("PRAGMA foreign_key_check").fetchall()
    if broken:
        raise sqlite3.IntegrityError(f"foreign keys broken by the {step} migration: {broken[:3]}")


def _set_version(db: sqlite_utils.Database, version: int) -> None:
    db.execute(
        "INSERT INTO meta(key, value) VALUES ('schema_version', ?) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (json.dumps(version),),
    )
