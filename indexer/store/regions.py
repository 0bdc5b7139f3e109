"""A photo's regions: 'region' items, each with its box (x0, y0, x1, y1) in the photo's pixels
and its own vector, beside the photo's whole 'image' item (indexer/regions.py cuts them).

A mixin of ``Catalog`` (catalog.py, over base.CatalogBase; it derives from PhotosTable, whose
methods it calls). The ``tiled`` table says which files were cut, by which tiling, into how
many regions (0: small, or flat all over), so a photo is cut once: a run with regions on cuts
what is not in it yet, and nothing else. A read-only catalog older than schema 7 has no tiled
table: no photo of it was cut.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from wherein.indexer.store import migrations
from wherein.indexer.store.base import _chunks, _marks, _path, vector_to_blob
from wherein.indexer.store.photos import PhotosTable

# A region item: (box, vector); box in the photo's pixels as a viewer shows it.
Region = tuple[tuple[float, float, float, float], np.ndarray]


class RegionsTable(PhotosTable):
    def has_tiled(self) -> bool:
        return self._migrated("tiled", lambda: migrations.has_tiled(self._db))

    def holds_regions(self) -> bool:
        """Whether any photo has a region item (a search folds a photo's items only then)."""
        if not self.has_tiled():
            return False
        return bool(
            self._conn.execute("SELECT EXISTS (SELECT 1 FROM tiled WHERE regions > 0)").fetchone()[
                0
            ]
        )

    def count_tiled(self) -> tuple[int, int]:
        """(photos cut, region items) in the catalog."""
        if not self.has_tiled():
            return 0, 0
        n, regions = self._conn.execute(
            "SELECT count(*), coalesce(sum(regions), 0) FROM tiled"
        ).fetchone()
        return int(n), int(regions)

    def files_to_tile(
        self, kinds: Sequence[str], under: Sequence[str] | None = None
    ) -> list[tuple[int, str, int, int, str]]:
        """(id, path, size, mtime_ns, kind) of the files of these kinds not cut yet (their
        whole 'image' item embedded, no tiled row), by id; with ``under``, only those in or
        below these absolute folders."""
        where, args = self._under("i.path", under)
        cond = (
            f"i.kind IN ({_marks(kinds)}) "
            "AND NOT EXISTS (SELECT 1 FROM tiled t WHERE t.image_id = i.id) "
            "AND EXISTS (SELECT 1 FROM items it JOIN embeddings e ON e.item_id = it.id "
            "WHERE it.image_id = i.id AND it.kind = 'image')"
        )
        where = f"{where} AND {cond}" if where else f" WHERE {cond}"
        rows = self._conn.execute(
            f"SELECT i.id, i.path, i.size, i.mtime_ns, i.kind FROM images i{where} ORDER BY i.id",
            [*args, *kinds],  # the folders' clause comes first
        )
        return [(int(r[0]), _path(r[1]), int(r[2]), int(r[3]), str(r[4])) for r in rows]

    def photo_regions(self, file_ids: Iterable[int]) -> dict[int, list[tuple[int, list | None]]]:
        """file id -> (item id, box or None for the whole photo) of each embedded item of the
        photos among these files that have regions, by item id; others are left out."""
        out: dict[int, list[tuple[int, list | None]]] = {}
        if not self.has_tiled():
            return out
        for chunk in _chunks(file_ids):
            rows = self._conn.execute(
                "SELECT it.image_id, it.id, it.kind, it.x0, it.y0, it.x1, it.y1 FROM items it "
                "JOIN embeddings e ON e.item_id = it.id JOIN tiled t ON t.image_id = it.image_id "
                f"WHERE t.regions > 0 AND it.kind IN ('image', 'region') AND it.image_id IN "
                f"({_marks(chunk)}) ORDER BY it.image_id, it.id",
                chunk,
            )
            for file_id, item_id, kind, *box in rows:
                located = [*box] if kind == "region" else None
                out.setdefault(int(file_id), []).append((int(item_id), located))
        return out

    # -- writes (inside transaction()) ------------------------------------------------
    def mark_tiled(self, file_id: int, tiling: str, regions: int) -> None:
        """Record that a photo was cut (its region items go in with this, or already are)."""
        self.mark_tiled_many([(file_id, tiling, regions)])

    def mark_tiled_many(self, rows: Iterable[tuple[int, str, int]]) -> None:
        """mark_tiled in bulk: (file id, tiling, regions) each (build-index's photos)."""
        self._conn.executemany(
            "INSERT INTO tiled(image_id, tiling, regions) VALUES (?, ?, ?) "
            "ON CONFLICT(image_id) DO UPDATE SET tiling = excluded.tiling, "
            "regions = excluded.regions",
            rows,
        )

    def add_regions(self, file_id: int, tiling: str, regions: Sequence[Region]) -> list[int]:
        """A photo already in the catalog gets its region items (with ids no file or item
        ever had) and its tiled row; its whole item is left as it is. Returns the new ids."""
        start = self.next_id()
        ids = list(range(start, start + len(regions)))
        self._conn.executemany(
            "INSERT INTO items(id, image_id, kind, x0, y0, x1, y1) "
            "VALUES (?, ?, 'region', ?, ?, ?, ?)",
            [(i, file_id, *map(float, box)) for i, (box, _) in zip(ids, regions, strict=True)],
        )
        self._conn.executemany(
            "INSERT INTO embeddings(item_id, vector) VALUES (?, ?)",
            [(i, vector_to_blob(v)) for i, (_, v) in zip(ids, regions, strict=True)],
        )
        self.mark_tiled(file_id, tiling, len(regions))
        return ids
