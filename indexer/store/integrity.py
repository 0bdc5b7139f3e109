"""The catalog's health (`status --check`, `index --verify`): SQLite's own checks of the
file, and counts of rows that break the files -> items -> embeddings chain.
"""

from __future__ import annotations

from wherein.indexer.store.base import CatalogBase


class IntegrityChecks(CatalogBase):
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
