"""What the tests of indexes written by older code share: test_migrations.py (the first
release's, tests/fixtures/index_v1) and test_migration_items.py (schema 3's, index_v3)."""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def raw(db: Path, sql: str, args=()) -> list[tuple]:
    """Rows as SQLite has them (read-only, beside Catalog): what is stored, not what the
    catalog makes of it."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def new_file(path: str = "/new.png") -> dict:
    """The record of a file indexed after the migration (insert_image's first argument)."""
    return {
        "path": path,
        "size": 1,
        "mtime_ns": 1,
        "sha256": "x",
        "width": 1,
        "height": 1,
        "format": "png",
        "indexed_at": "t",
        "model_id": "m",
    }


def by_score(pairs) -> list[set[str]]:
    """Paths grouped by equal score, in score order: ties may come in any order."""
    return [
        {p for p, _ in group}
        for _, group in itertools.groupby(pairs, key=lambda ps: round(ps[1], 6))
    ]
