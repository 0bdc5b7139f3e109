"""The photos table (EXIF: when, which camera, where) and what a search hit shows: an
item, its file's row and its photo columns (hit_rows), and the items whose photos pass
search's photo filters (photo_matches).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from wherein.indexer.kinds.registry import timed
from wherein.indexer.store.base import _chunks, _marks, _path
from wherein.indexer.store.videos import VideosTable

# What an item adds to its file's row in hit_rows: its id, kind and locator (box: x0..y1).
_ITEM_COLUMNS = ("item_id", "kind", "t", "box")


# The photos table (EXIF) as hits carry it; PHOTO_COLUMNS is what store_photos takes.
_PHOTO_HIT_COLUMNS = ("taken", "taken_offset", "make", "model", "lens", "lat", "lon")


PHOTO_COLUMNS = ("image_id", "size", "mtime_ns", *_PHOTO_HIT_COLUMNS, "orientation")


# When a photo was taken, as local wall-clock text: EXIF, else the file's mtime here.
_TAKEN = (
    "COALESCE(p.taken, strftime('%Y-%m-%d %H:%M:%S', i.mtime_ns / 1000000000, "
    "'unixepoch', 'localtime'))"
)


class PhotosTable(VideosTable):
    def has_photos(self) -> bool:
        """Whether the photos table exists (a read-only catalog of an older release lacks it)."""
        return self._migrated("photos", self._db["photos"].exists)

    def photos_to_read(self, under: Sequence[str] | None = None) -> list[tuple[int, str, int, int]]:
        """(id, path, size, mtime_ns) of images whose metadata is missing, or was read
        from another state of the file (same id, new content); with ``under``, only
        those in or below these absolute folders."""
        where, args = self._under("i.path", under)
        stale = "(p.image_id IS NULL OR p.size != i.size OR p.mtime_ns != i.mtime_ns)"
        where = f"{where} AND {stale}" if where else f" WHERE {stale}"
        rows = self._conn.execute(
            "SELECT i.id, i.path, i.size, i.mtime_ns FROM images i "
            f"LEFT JOIN photos p ON p.image_id = i.id{where} ORDER BY i.id",
            args,
        )
        return [(int(r[0]), _path(r[1]), int(r[2]), int(r[3])) for r in rows]

    def store_photos(self, rows: Iterable[dict]) -> int:
        """Insert or replace metadata rows (dicts keyed by PHOTO_COLUMNS) in one transaction;
        rows of images deleted meanwhile are left out. Returns the rows written."""
        cols = ", ".join(PHOTO_COLUMNS)
        sql = (
            f"INSERT OR REPLACE INTO photos({cols}) SELECT {_marks(PHOTO_COLUMNS)} "
            "WHERE EXISTS (SELECT 1 FROM images WHERE id = ?)"
        )
        written = 0
        with self.transaction():
            for r in rows:
                values = [r.get(c) for c in PHOTO_COLUMNS]
                written += self._conn.execute(sql, [*values, r["image_id"]]).rowcount
        return written

    def hit_rows(self, ids: Iterable[int]) -> dict[int, dict]:
        """item id -> its file's row (as rows_by_ids gives it: ``id`` is the file's id) plus
        the item (item_id, kind, t, box: [x0, y0, x1, y1] or None) and the photo columns
        (taken, taken_offset, make, model, lens, lat, lon; None where unknown) and the
        video's duration (None for a photo) and timed (whether its kind yields frames at
        times, registry.timed): what a search hit shows. Item ids not in the catalog are
        left out."""
        items: dict[int, tuple] = {}
        for chunk in _chunks(ids):
            for r in self._conn.execute(
                f"SELECT id, image_id, kind, t, x0, y0, x1, y1 FROM items WHERE id IN "
                f"({_marks(chunk)})",
                chunk,
            ).fetchall():  # at once: not row by row through the cursor's damage naming
                items[int(r[0])] = r
        files = self.rows_by_ids({r[1] for r in items.values()})
        for row in files.values():
            row.update(dict.fromkeys(_PHOTO_HIT_COLUMNS))
        if files and self.has_photos():
            cols = ", ".join(_PHOTO_HIT_COLUMNS)
            for chunk in _chunks(files):
                for r in self._conn.execute(
                    f"SELECT image_id, {cols} FROM photos WHERE image_id IN ({_marks(chunk)})",
                    chunk,
                ).fetchall():
                    files[r[0]].update(zip(_PHOTO_HIT_COLUMNS, r[1:], strict=True))
        videos = self.video_rows(files)
        for file_id, row in files.items():
            row["duration"] = videos[file_id]["duration"] if file_id in videos else None
            # The kind's answer, for schemas (which cannot ask it): a timed file's taken is
            # its container's, as its kind's probe read it, never EXIF.
            row["timed"] = timed(row.get("file_kind"))
        out: dict[int, dict] = {}
        for item_id, (_, file_id, kind, t, *box) in items.items():
            if file_id in files:
                located = (item_id, kind, t, None if box[0] is None else [*box])
                out[item_id] = {**files[file_id], **dict(zip(_ITEM_COLUMNS, located))}
        return out

    def photo_matches(
        self,
        taken_from: str | None = None,
        taken_before: str | None = None,
        camera: str | None = None,
        box: tuple[float, float, float, float] | None = None,
    ) -> list[tuple[int, float | None, float | None]]:
        """(item id, lat, lon) of every embedded item whose file passes the photo filters.

        taken_from <= taken < taken_before, compared as 'YYYY-MM-DD HH:MM:SS' text, where
        taken is the EXIF time, else the file's mtime in local time; camera: a substring of
        make + ' ' + model, ASCII case folded; box: (lat_lo, lat_hi, lon_lo, lon_hi), only
        images with GPS inside it.
        """
        photos = self.has_photos()
        if not photos and (camera or box):
            return []  # nothing read yet: no image has a camera or a position
        taken = _TAKEN if photos else _TAKEN.replace("p.taken", "NULL")
        sql = (
            "SELECT it.id, "
            + ("p.lat, p.lon" if photos else "NULL, NULL")
            + " FROM images i JOIN items it ON it.image_id = i.id"
            + " JOIN embeddings e ON e.item_id = it.id"
            + (" LEFT JOIN photos p ON p.image_id = i.id" if photos else "")
            + " WHERE 1 = 1"
        )
        args: list = []
        if taken_from is not None:
            sql += f" AND {taken} >= ?"
            args.append(taken_from)
        if taken_before is not None:
            sql += f" AND {taken} < ?"
            args.append(taken_before)
        if camera:
            escaped = camera.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            sql += " AND (COALESCE(p.make, '') || ' ' || COALESCE(p.model, '')) LIKE ? ESCAPE '\\'"
            args.append(f"%{escaped}%")
        if box is not None:
            sql += " AND p.lat BETWEEN ? AND ? AND p.lon BETWEEN ? AND ?"
            args += list(box)
        return [(int(r[0]), r[1], r[2]) for r in self._conn.execute(sql, args)]
