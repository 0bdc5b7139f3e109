"""The SQLite catalog: the index's source of truth.

One row per indexed file in ``images``; its embedding in ``embeddings`` (same
transaction, so a row never points at a half-written vector); unreadable files
in ``skipped``; settings and the vector generation counter in ``meta``.
FAISS holds a derived copy of ``embeddings`` (see vectors.py): after a crash it
is brought back in line from here, never the other way round.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import sqlite_utils

SCHEMA_VERSION = 1

_SCHEMA = """
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
"""


def vector_to_blob(v: np.ndarray) -> bytes:
    return np.ascontiguousarray(v, dtype="<f4").tobytes()


def blob_to_vector(b: bytes) -> np.ndarray:
    return np.frombuffer(b, dtype="<f4")


def _connect_readonly(path: Path) -> sqlite3.Connection:
    """A read-only connection, also in a read-only folder (a read-only mount, a DVD).

    A WAL database needs its -shm file, which a read-only folder cannot get; when
    the write-ahead log is empty (every commit checkpointed) the database file alone
    is the whole index, and SQLite may read it as immutable.
    """
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn
    except sqlite3.OperationalError:
        conn.close()
        wal = path.with_name(path.name + "-wal")
        if os.access(path.parent, os.W_OK) or (wal.exists() and wal.stat().st_size):
            raise
    return sqlite3.connect(f"file:{path}?immutable=1", uri=True, check_same_thread=False)


class Catalog:
    def __init__(self, path: Path, readonly: bool = False) -> None:
        self.path = path
        if readonly:
            conn = _connect_readonly(path)
        else:
            conn = sqlite3.connect(str(path), check_same_thread=False)
        self.conn = conn
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA busy_timeout = 10000")
        if not readonly:
            # WAL: readers (search, status) never block the indexer; FULL: a committed
            # batch survives power loss, and the fsync is nothing next to embedding time.
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            conn.executescript(_SCHEMA)
            if self.get_meta("schema_version") is None:
                with conn:
                    self.set_meta("schema_version", SCHEMA_VERSION)
        self.db = sqlite_utils.Database(conn)

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic unit: all of it lands, or (crash, Ctrl-C, error) none of it."""
        with self.conn:
            yield self.conn

    # -- meta -------------------------------------------------------------
    def get_meta(self, key: str, default=None):
        try:
            row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        except sqlite3.OperationalError:
            return default
        return json.loads(row[0]) if row else default

    def set_meta(self, key: str, value) -> None:
        self.conn.execute(
            "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, json.dumps(value)),
        )

    @property
    def generation(self) -> int:
        return int(self.get_meta("generation", 0))

    def bump_generation(self) -> int:
        gen = self.generation + 1
        self.set_meta("generation", gen)
        return gen

    # -- images -----------------------------------------------------------
    def count_images(self) -> int:
        return self.conn.execute("SELECT count(*) FROM images").fetchone()[0]

    def count_embedded(self) -> int:
        return self.conn.execute("SELECT count(*) FROM embeddings").fetchone()[0]

    def known_files(self) -> dict[str, tuple[int, int, int, str, bool]]:
        """path -> (id, size, mtime_ns, sha256, has_embedding)."""
        rows = self.conn.execute(
            "SELECT i.path, i.id, i.size, i.mtime_ns, i.sha256, e.image_id IS NOT NULL "
            "FROM images i LEFT JOIN embeddings e ON e.image_id = i.id"
        )
        return {r[0]: (r[1], r[2], r[3], r[4], bool(r[5])) for r in rows}

    def rows_by_ids(self, ids: Iterable[int]) -> dict[int, dict]:
        ids = [int(i) for i in ids]
        out: dict[int, dict] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            cur = self.conn.execute(
                f"SELECT id, path, size, mtime_ns, sha256, width, height, format, indexed_at, model_id "
                f"FROM images WHERE id IN ({marks})",
                chunk,
            )
            cols = [c[0] for c in cur.description]
            for row in cur:
                out[row[0]] = dict(zip(cols, row))
        return out

    def embedded_ids(self) -> np.ndarray:
        rows = self.conn.execute("SELECT image_id FROM embeddings ORDER BY image_id").fetchall()
        return np.array([r[0] for r in rows], dtype=np.int64)

    def vectors_for(self, ids: Iterable[int]) -> tuple[np.ndarray, np.ndarray]:
        """(ids, vectors [n, d]) for those ids that have an embedding."""
        ids = [int(i) for i in ids]
        got_ids, vecs = [], []
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for image_id, blob in self.conn.execute(
                f"SELECT image_id, vector FROM embeddings WHERE image_id IN ({marks})", chunk
            ):
                got_ids.append(image_id)
                vecs.append(blob_to_vector(blob))
        if not vecs:
            return np.zeros(0, dtype=np.int64), np.zeros((0, 0), dtype=np.float32)
        return np.array(got_ids, dtype=np.int64), np.stack(vecs)

    def iter_vectors(self, batch: int = 4096) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """All embeddings in id order, batch by batch (never all in memory at once)."""
        last = -1
        while True:
            rows = self.conn.execute(
                "SELECT image_id, vector FROM embeddings WHERE image_id > ? ORDER BY image_id LIMIT ?",
                (last, batch),
            ).fetchall()
            if not rows:
                return
            last = rows[-1][0]
            yield (
                np.array([r[0] for r in rows], dtype=np.int64),
                np.stack([blob_to_vector(r[1]) for r in rows]),
            )

    # -- writes (call inside transaction()) --------------------------------
    def insert_image(self, record: dict, vector: np.ndarray | None) -> int:
        cur = self.conn.execute(
            "INSERT INTO images(path, size, mtime_ns, sha256, width, height, format, indexed_at, model_id) "
            "VALUES (:path, :size, :mtime_ns, :sha256, :width, :height, :format, :indexed_at, :model_id)",
            record,
        )
        image_id = int(cur.lastrowid)
        if vector is not None:
            self.conn.execute(
                "INSERT INTO embeddings(image_id, vector) VALUES (?, ?)",
                (image_id, vector_to_blob(vector)),
            )
        self.conn.execute("DELETE FROM skipped WHERE path = ?", (record["path"],))
        return image_id

    def set_embedding(self, image_id: int, vector: np.ndarray) -> None:
        self.conn.execute(
            "INSERT INTO embeddings(image_id, vector) VALUES (?, ?) "
            "ON CONFLICT(image_id) DO UPDATE SET vector = excluded.vector",
            (image_id, vector_to_blob(vector)),
        )

    def relink(self, image_id: int, path: str, size: int, mtime_ns: int) -> None:
        self.conn.execute("DELETE FROM images WHERE path = ? AND id != ?", (path, image_id))
        self.conn.execute(
            "UPDATE images SET path = ?, size = ?, mtime_ns = ? WHERE id = ?",
            (path, size, mtime_ns, image_id),
        )
        self.conn.execute("DELETE FROM skipped WHERE path = ?", (path,))

    def touch(self, image_id: int, size: int, mtime_ns: int) -> None:
        self.conn.execute(
            "UPDATE images SET size = ?, mtime_ns = ? WHERE id = ?", (size, mtime_ns, image_id)
        )

    def delete_images(self, ids: Iterable[int]) -> int:
        ids = [int(i) for i in ids]
        n = 0
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            self.conn.execute(f"DELETE FROM embeddings WHERE image_id IN ({marks})", chunk)
            n += self.conn.execute(f"DELETE FROM images WHERE id IN ({marks})", chunk).rowcount
        return n

    def clear_embeddings(self) -> int:
        return self.conn.execute("DELETE FROM embeddings").rowcount

    def record_skip(
        self, path: str, reason: str, size: int | None, mtime_ns: int | None, when: str
    ) -> None:
        self.conn.execute(
            "INSERT INTO skipped(path, reason, size, mtime_ns, seen_at) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT(path) DO UPDATE SET reason = excluded.reason, size = excluded.size, "
            "mtime_ns = excluded.mtime_ns, seen_at = excluded.seen_at",
            (path, reason, size, mtime_ns, when),
        )
        self.conn.execute("DELETE FROM images WHERE path = ?", (path,))

    def skipped(self) -> list[dict]:
        cur = self.conn.execute(
            "SELECT path, reason, size, mtime_ns, seen_at FROM skipped ORDER BY path"
        )
        cols = [c[0] for c in cur.description]
        return [dict(zip(cols, r)) for r in cur]

    def forget_skips(self, paths: Iterable[str]) -> None:
        self.conn.executemany("DELETE FROM skipped WHERE path = ?", [(p,) for p in paths])
