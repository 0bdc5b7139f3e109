"""Salvage (`index --rebuild-catalog`): what a damaged catalog still gives, read rowid
range by rowid range so that a damaged page costs only the rows on it.

Each file keeps its media kind: the catalog's images.kind where it has the column, else what
migration m007 derives (a file with a videos row is a video, any other a photo). A photo
comes back with its whole-image vector; a file of a timed kind (a video, an animation) with
its videos row and the frames whose vectors survived.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from wherein.indexer.kinds.registry import timed
from wherein.indexer.store.base import _IMAGE_COLUMNS, _path
from wherein.indexer.store.connection import _uri_path
from wherein.indexer.store.migrations import stamped_version
from wherein.indexer.store.videos import VIDEO_COLUMNS

_SALVAGE_STEP = 256  # ids per range read; a range a damaged page breaks is halved down to one id

# The index's settings a rebuilt catalog takes back (meta keys): which models built it and
# how later runs cut photos into regions. The generation is bumped instead, and the rest
# (vector_file, built_from, an unfinished build's mark) describe the damaged file's rows.
SETTINGS = ("model_id", "family", "space", "dim", "model_file", "regions")


@dataclass
class Salvaged:
    """What a damaged catalog still gives: file rows, each with its media "kind" and either
    its whole image's "vector" blob (b"" for a row of the vector file) or, for a file of a
    timed kind, its "video" (the videos row) and "frames" ((item id, t, vector blob) each);
    the meta settings, and the smallest id it never handed out."""

    rows: list[dict] = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    next_id: int = 1
    unreadable_ids: int = 0  # ids in ranges no read got through
    tilings: set[str] = field(default_factory=set)  # what cut the photos the tiled table names


@dataclass
class Kept:
    """The salvaged rows a rebuilt catalog takes (their file unchanged, their vectors whole):
    whole-image files with their vectors, and files of a timed kind with their videos rows
    and frame items ((item id, file id, 'frame', t) each) and the frames' vectors."""

    files: list[dict] = field(default_factory=list)
    vectors: list[np.ndarray] = field(default_factory=list)
    timed: list[dict] = field(default_factory=list)
    videos: list[dict] = field(default_factory=list)
    frames: list[tuple[int, int, str, float]] = field(default_factory=list)
    frame_vectors: list[np.ndarray] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.files) + len(self.timed)

    def add_timed(self, row: dict, frames: list[tuple[int, float, np.ndarray]]) -> None:
        """A timed file and the frames kept: complete only when none was lost (frames is
        then the videos row's count), else the next index run samples it again and embeds
        only the frames missing (as after a run stopped mid-video)."""
        video = dict(row.pop("video"))
        complete = bool(video["complete"]) and len(frames) == video["frames"]
        video.update(frames=len(frames), complete=int(complete))
        self.timed.append(row)
        self.videos.append(video)
        self.frames += [(i, row["id"], "frame", t) for i, t, _ in frames]
        self.frame_vectors += [v for _, _, v in frames]


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
        if _has_column(conn, "tiled", "tiling"):
            tilings, _ = _salvage_ranges(
                conn, "SELECT DISTINCT tiling FROM tiled WHERE image_id BETWEEN ? AND ?", top
            )
            out.tilings = {t for (t,) in tilings if isinstance(t, str)}
        by_file = (
            "SELECT it.image_id, e.vector FROM embeddings e JOIN items it ON it.id = e.item_id "
            "WHERE it.kind = 'image' AND e.item_id BETWEEN ? AND ?"
            if itemised
            else "SELECT image_id, vector FROM embeddings WHERE image_id BETWEEN ? AND ?"
        )
        vector_rows, _ = _salvage_ranges(conn, by_file, top)
        vectors = dict(vector_rows)
        videos, frames = _timed_parts(conn, itemised, top)
        has_kind = _has_column(conn, "images", "kind")
        kind = "kind" if has_kind else "NULL"
        image_rows, out.unreadable_ids = _salvage_ranges(
            conn,
            f"SELECT {', '.join(_IMAGE_COLUMNS)}, {kind} FROM images WHERE id BETWEEN ? AND ?",
            top,
        )
        seen: set = set()
        for row in image_rows:
            rec = dict(zip((*_IMAGE_COLUMNS, "kind"), row))
            ok = (
                isinstance(rec["id"], int)
                and isinstance(rec["path"], bytes | str)
                and isinstance(rec["size"], int)
                and isinstance(rec["mtime_ns"], int)
                and isinstance(rec["sha256"], str)
                and re.fullmatch(r"[0-9a-f]{64}", rec["sha256"]) is not None
                and rec["path"] not in seen
            )
            if not ok:
                continue
            if not has_kind:  # as m007 derives it for a catalog from before kinds
                rec["kind"] = "video" if rec["id"] in videos else "photo"
            if timed(rec["kind"]):  # its frames are its items, its videos row says how many
                if rec["id"] not in videos or not frames.get(rec["id"]):
                    continue
                parts = {"video": videos[rec["id"]], "frames": frames[rec["id"]]}
            elif isinstance(vectors.get(rec["id"]), bytes):
                parts = {"vector": vectors[rec["id"]]}
            else:
                continue
            seen.add(rec["path"])
            out.rows.append({**rec, "path": _path(rec["path"]), **parts})
    return out


def settings_back(got: Salvaged, sidecar: dict) -> list[str]:
    """Put into got.meta the SETTINGS its damaged meta lost, where the index folder still
    tells them: the model and dim from vectors.json (sidecar), the regions setting from the
    tiling its photos were cut by. Returns those still unknown that the rebuilding run
    cannot take from its models (as it does family, space and model_file for the model_id
    it finds): "model_id" (no vector is then kept), "regions". A meta table that was read
    (its model_id is there) is taken as it is: no regions there means none."""
    if "model_id" in got.meta:
        return []
    for key in ("model_id", "dim"):
        if sidecar.get(key) is not None:
            got.meta[key] = sidecar[key]
    if len(got.tilings) == 1:
        got.meta["regions"] = next(iter(got.tilings))
    return [k for k in ("model_id", "regions") if k not in got.meta]


def _has_column(conn: sqlite3.Connection, table: str, column: str) -> bool:
    sql = f"SELECT 1 FROM pragma_table_info('{table}') WHERE name = '{column}'"
    return _salvage_one(conn, sql) == 1


def _timed_parts(
    conn: sqlite3.Connection, itemised: bool, top: int
) -> tuple[dict[int, dict], dict[int, list[tuple[int, float, bytes]]]]:
    """The videos rows (file id -> its VIDEO_COLUMNS) and the frame items with a vector
    (file id -> (item id, t, vector blob) each, by time) that can be read."""
    if not itemised or not _has_column(conn, "videos", "image_id"):
        return {}, {}
    cols = ", ".join(VIDEO_COLUMNS)
    rows, _ = _salvage_ranges(
        conn, f"SELECT image_id, {cols} FROM videos WHERE image_id BETWEEN ? AND ?", top
    )
    videos = {r[0]: dict(zip(VIDEO_COLUMNS, r[1:], strict=True)) for r in rows}
    items, _ = _salvage_ranges(
        conn,
        "SELECT it.id, it.image_id, it.t, e.vector FROM items it JOIN embeddings e "
        "ON e.item_id = it.id WHERE it.kind = 'frame' AND it.id BETWEEN ? AND ?",
        top,
    )
    frames: dict[int, list[tuple[int, float, bytes]]] = {}
    for item_id, file_id, t, blob in items:
        if isinstance(item_id, int) and isinstance(t, int | float) and isinstance(blob, bytes):
            frames.setdefault(file_id, []).append((item_id, float(t), blob))
    for f in frames.values():
        f.sort(key=lambda x: x[1])
    return videos, frames


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
