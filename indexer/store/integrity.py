"""The catalog's health (`status --check`, `index --verify`, every reader's open): SQLite's
own checks of the file, and counts of rows that break the files -> items -> embeddings chain.
"""

from __future__ import annotations

from wherein.indexer.store.base import CatalogBase

# The tables whose damaged pages lose or garble files and items without an error (a row read
# with a wrong id drops out of every join): checked page by page each time a reader opens the
# catalog. Not embeddings: at 1M files its float32 blobs are most of the file (3 GB), and a
# damaged page of it is named when a search reads it (bench/results/catalog.md).
ROW_TABLES = ("images", "items", "photos", "videos")


class IntegrityChecks(CatalogBase):
    def soundness_problem(self) -> str | None:
        """PRAGMA quick_check: every page and record readable (no index cross-check, which
        integrity_problem adds); None when sound, else its first complaint."""
        return _complaint(self._conn.execute("PRAGMA quick_check").fetchone()[0])

    def rows_problem(self) -> str | None:
        """PRAGMA quick_check of ROW_TABLES and their indexes only (a reader's check before
        it answers; its cost at 1M files: bench/results/catalog.md); None when sound, else the
        first complaint."""
        for table in ROW_TABLES:
            if self._conn.execute(
                "SELECT 1 FROM main.sqlite_master WHERE type = 'table' AND name = ?", (table,)
            ).fetchone():  # an older catalog read as it is may lack one
                problem = _complaint(
                    self._conn.execute(f"PRAGMA main.quick_check({table})").fetchone()[0]
                )
                if problem is not None:
                    return problem
        return None

    def integrity_problem(self) -> str | None:
        """SQLite's own check of the file: None when sound, else its first complaint."""
        return _complaint(self._conn.execute("PRAGMA integrity_check").fetchone()[0])

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


def _complaint(result: str) -> str | None:
    """None for "ok", else the first line of what SQLite found, without its "*** in database
    main ***" heading (one line for an `Error:` or `PROBLEM` line)."""
    if result == "ok":
        return None
    lines = [line for line in result.splitlines() if line.strip() and not line.startswith("***")]
    return lines[0] if lines else result.strip()
