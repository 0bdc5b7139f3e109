"""A catalog damaged past the first rows a query reads: the row that meets the damage
raises the one-line CatalogDamaged naming the file, as a statement that meets it does."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from wherein.indexer.store.connection import _connect
from wherein.schemas.errors import CatalogDamaged

PAGE = 4096


def test_a_row_read_from_a_damaged_page_names_the_catalog(tmp_path: Path):
    path = tmp_path / "catalog.db"
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA page_size = {PAGE}")
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, blob BLOB)")
    db.executemany("INSERT INTO t (blob) VALUES (?)", [(bytes(1000),)] * 400)
    db.commit()
    db.close()
    pages = path.stat().st_size // PAGE
    with open(path, "r+b") as f:  # a leaf page well after the first rows
        f.seek((pages * 3 // 4) * PAGE)
        f.write(b"\xff" * PAGE)
    conn = _connect(str(path), path)
    rows = conn.execute("SELECT id, blob FROM t ORDER BY id")
    assert next(rows)[0] == 1  # the first page reads
    with pytest.raises(CatalogDamaged) as err:
        for _ in rows:
            pass
    assert str(path) in str(err.value) and "--rebuild-catalog" in str(err.value)
    conn.close()
