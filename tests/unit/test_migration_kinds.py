"""m007: each file's media kind in images.kind. A catalog of schema 6 holds photos and videos
(a videos row): the migration names each as it was, and a read-only open of a schema-6
catalog derives the same kinds without writing. Nothing is re-embedded."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

from wherein.indexer.store.catalog import Catalog

DIM = 8


def rec(path: str, i: int) -> dict:
    return {"path": path, "size": 100 + i, "mtime_ns": 1_000 + i, "sha256": f"{i:064x}",
            "width": 10, "height": 20, "format": Path(path).suffix[1:],
            "indexed_at": "2026-01-01T00:00:00+00:00", "model_id": "m"}  # fmt: skip


def schema_6(db: Path) -> tuple[int, int, list[int]]:
    """A catalog as schema 6 wrote it: a photo and a video (named like a photo) with two
    frames. Returns (photo id, video id, its frames' item ids)."""
    cat = Catalog(db)
    with cat.transaction():
        photo = cat.insert_image(rec("/p/a.png", 1), np.ones(DIM, np.float32))
        video = cat.insert_video(
            rec("/p/IMG_1.JPG", 2), {"duration": 4.0, "fps": 25.0, "codec": "h264", "rotation": 0}
        )
        frames = cat.add_frames(video, [(0.0, np.ones(DIM)), (2.0, np.ones(DIM))], done=True)
    cat.close()
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("ALTER TABLE images DROP COLUMN kind")
        conn.execute("DELETE FROM _sqlite_migrations WHERE name = 'm007_file_kinds'")
        conn.execute("UPDATE meta SET value = '6' WHERE key = 'schema_version'")
    conn.close()
    return photo, video, frames


def test_a_read_only_open_derives_the_kinds_and_the_migration_stores_them(tmp_path):
    db = tmp_path / "catalog.db"
    photo, video, frames = schema_6(db)
    vectors = sqlite3.connect(db).execute("SELECT item_id, vector FROM embeddings").fetchall()
    ro = Catalog(db, readonly=True)
    assert ro.migrated == [] and ro.schema_version == 6
    rows = ro.hit_rows([photo, frames[1]])
    assert rows[photo]["file_kind"] == "photo" and rows[frames[1]]["file_kind"] == "video"
    assert ro.embedded_ids(file_kind="video").tolist() == frames
    ro.close()
    cat = Catalog(db)
    assert cat.migrated == ["m007_file_kinds"] and cat.schema_version == 7
    assert {i: r["file_kind"] for i, r in cat.rows_by_ids([photo, video]).items()} == {
        photo: "photo",
        video: "video",
    }
    assert cat.embedded_ids(file_kind="photo").tolist() == [photo]
    cat.close()
    assert sqlite3.connect(db).execute("SELECT item_id, vector FROM embeddings").fetchall() == (
        vectors
    )
