"""Salvage (`index --rebuild-catalog`): what a damaged catalog still gives, read rowid
range by rowid range so that a damaged page costs only the rows on it.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from wherein.indexer.store.base import _IMAGE_COLUMNS, _SELECT_IMAGES, _path
from wherein.indexer.store.connection import _uri_path
from wherein.indexer.store.migrations import stamped_version

_SALVAGE_STEP = 256  # ids per range read; a range a damaged page breaks is halved down to one id


@dataclass
class Salvaged:
    """What a damaged catalog still gives: image rows (each with its "vector" blob, b"" for
    a row of the vector file), the meta settings, and the smallest id it never handed out."""

    rows: list[dict] = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    next_id: int = 1
    unreadable_ids: int = 0  # ids in ranges no read got through


def _open_damaged(path: Path) -> sqlite3.Connection | None:
    """A read-only connection to a catalog that may be damaged (None if none opens)."""
    wal = path.with_name(path.name + "-wal")
    # immutable: nothing else writes a set-aside file, and SQLite then makes no -shm beside it
    mode = "mode=ro" if wal.exists() and wal.stat().st_size else "immutable=1"
    try:
        return sqlite3.connect(f"file:{_uri_path(path)}?{mode}", uri=True)
    except sqlite3.Error:
        return None


def stamped_schema(path: Path) -> int:
    """The schema_version a (possibly damaged) catalog records; 0 where none can be read."""
    conn = _open_damaged(path)
    if conn is None:
        return 0
    with contextlib.closing(conn):
        try:
            return stamped_version(conn)
        except sqlite3.DatabaseError:
            return 0


def salvage(path: Path) -> Salvaged:
    """Read what can be read from a damaged catalog (read-only; a damaged page costs only
    the rows on it): rows by rowid range, halving a range that fails down to single ids."""
    out = Salvaged()
    conn = _open_damaged(path)
    if conn is None:
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
