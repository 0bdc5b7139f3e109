"""The labels table (`wherein label`): zero-shot label probabilities, stored per file and
per model and prompt template.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from wherein.indexer.store.base import CatalogBase, _chunks, _marks, _path
from wherein.indexer.store.connection import CatalogReadOnly


class LabelsTable(CatalogBase):
    def has_labels(self) -> bool:
        """Whether the labels table exists (a read-only catalog of the first release may lack it)."""
        return self._db["labels"].exists()

    def store_labels(self, rows: Iterable[tuple[int, str, float, str, str]]) -> int:
        """(item_id, label, probability, template, model_id) rows, stored for the item's
        file (labels are per file) and replacing earlier ones with the same key; rows of
        items no longer in the catalog are dropped. Returns
        the number written. Call inside transaction()."""
        if self.too_new is not None:
            raise self.too_new
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
