"""The images table: one row per indexed file (path bytes, size, mtime, hash, ctime and
inode), and the id counter its files and their items share. A file deleted, moved over
or skipped here takes its items and their vectors with it (foreign keys), so the vector
file rows of those items are doomed first (vector_rows.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from wherein.indexer.store.base import _CHUNK, _chunks, _key, _marks, _path
from wherein.indexer.store.vector_rows import VectorFileRows


class FilesTable(VectorFileRows):
    def count_images(self) -> int:
        return self._conn.execute("SELECT count(*) FROM images").fetchone()[0]

    def max_id(self) -> int:
        """The largest file or item id in use (0 when empty)."""
        return self._conn.execute(
            "SELECT max(coalesce((SELECT max(id) FROM images), 0), "
            "coalesce((SELECT max(id) FROM items), 0))"
        ).fetchone()[0]

    def next_id(self) -> int:
        """The smallest id no file or item ever had: past AUTOINCREMENT's counters (which
        remember ids of deleted rows) and past every id in use. A new file and its first item
        take it; bulk inserts with chosen ids start here."""
        rows = self._conn.execute(
            "SELECT seq FROM sqlite_sequence WHERE name IN ('images', 'items')"
        ).fetchall()
        return max([int(r[0]) for r in rows] + [self.max_id()]) + 1

    def ids_for_paths(self, paths: Iterable[str]) -> dict[str, int]:
        """path -> id, for those of the paths that have a row."""
        keys = [_key(p) for p in paths]
        out: dict[str, int] = {}
        for start in range(0, len(keys), _CHUNK):
            chunk = keys[start : start + _CHUNK]
            marks = ",".join([self._p] * len(chunk))
            for path, file_id in self._conn.execute(
                f"SELECT path, id FROM images WHERE path IN ({marks})", chunk
            ):
                out[_path(path)] = int(file_id)
        return out

    def known_files(
        self, under: Sequence[str] | None = None
    ) -> dict[str, tuple[int, int, int, str, bool, int | None, int | None]]:
        """path -> (id, size, mtime_ns, sha256, has_embedding, ctime_ns, inode); with
        ``under`` (absolute folders), only the paths that are one of them or below one of
        them. ctime_ns and inode are None for rows written before they were recorded."""
        where, args = self._under("i.path", under)
        rows = self._conn.execute(
            "SELECT i.path, i.id, i.size, i.mtime_ns, i.sha256, EXISTS (SELECT 1 FROM items it "
            "JOIN embeddings e ON e.item_id = it.id WHERE it.image_id = i.id), "
            f"{self._identity} FROM images i{where}",
            args,
        )
        return {_path(r[0]): (r[1], r[2], r[3], r[4], bool(r[5]), r[6], r[7]) for r in rows}

    def embedded_with_hash(self, sha256: str) -> list[tuple[int, str]]:
        """(file id, path) of the files with an embedded item whose bytes hash to sha256, by id."""
        rows = self._conn.execute(
            "SELECT i.id, i.path FROM images i WHERE i.sha256 = ? AND EXISTS (SELECT 1 FROM "
            "items it JOIN embeddings e ON e.item_id = it.id WHERE it.image_id = i.id) "
            "ORDER BY i.id",
            (sha256,),
        )
        return [(int(i), _path(p)) for i, p in rows]

    def rows_by_ids(self, ids: Iterable[int]) -> dict[int, dict]:
        """id -> the file's row (id, path, size, mtime_ns, sha256, width, height, format,
        indexed_at, model_id, file_kind); ids not in the catalog are left out."""
        out: dict[int, dict] = {}
        for chunk in _chunks(ids):
            sql = f"{self._select_files()} WHERE i.id IN ({_marks(chunk)})"
            for row in self._conn.execute(sql, chunk).fetchall():  # not row by row (hit_rows)
                out[row[0]] = self._row(row)
        return out

    def row_by_path(self, path: str) -> dict | None:
        """The row of the image at this exact path (as rows_by_ids gives it), or None."""
        row = self._conn.execute(
            f"{self._select_files()} WHERE i.path = {self._p}", (_key(path),)
        ).fetchone()
        return self._row(row) if row else None

    def paths_maybe_of(self, inode: int, size: int) -> list[str]:
        """Paths of the rows that may be the file with this inode: recorded with it, or (rows
        from before inodes were recorded) with this size. The caller stats each path and
        compares device and inode: a candidate list, not an answer."""
        if self._identity.startswith("NULL"):
            rows = self._conn.execute("SELECT path FROM images WHERE size = ?", (size,))
        else:
            rows = self._conn.execute(
                "SELECT path FROM images WHERE inode = ? OR (inode IS NULL AND size = ?)",
                (inode, size),
            )
        return [_path(p) for (p,) in rows]

    def all_paths(self) -> list[str]:
        return [_path(p) for (p,) in self._conn.execute("SELECT path FROM images")]

    def sample_paths(self, n: int) -> list[str]:
        """Up to n paths spread over the catalog, the same on every call.

        A multiplicative hash of the id orders them: a spread over folders and time.
        """
        rows = self._conn.execute(
            "SELECT path FROM images ORDER BY (id * 2654435761) % 4294967291 LIMIT ?", (n,)
        )
        return [_path(p) for (p,) in rows]

    def exact_duplicate_groups(self) -> list[list[int]]:
        """File ids of the files with the same content hash that yield items, a group per hash
        (ids ascending). A photo's file id is its one item's id; a video's names the file."""
        rows = self._conn.execute(
            "SELECT i.sha256, i.id FROM images i WHERE i.sha256 IN (SELECT sha256 FROM images "
            "GROUP BY sha256 HAVING count(*) > 1) AND EXISTS (SELECT 1 FROM items it "
            "WHERE it.image_id = i.id) ORDER BY i.sha256, i.id"
        )
        groups: dict[str, list[int]] = {}
        for sha, file_id in rows:
            groups.setdefault(sha, []).append(int(file_id))
        return list(groups.values())

    def _items_of(self, file_ids: Iterable[int]) -> list[int]:
        """The ids of these files' items."""
        out: list[int] = []
        for chunk in _chunks(file_ids):
            rows = self._conn.execute(
                f"SELECT id FROM items WHERE image_id IN ({_marks(chunk)})", chunk
            )
            out.extend(int(r[0]) for r in rows)
        return out

    def relink(
        self,
        file_id: int,
        path: str,
        size: int,
        mtime_ns: int,
        ctime_ns: int | None = None,
        inode: int | None = None,
    ) -> None:
        """The file moved (same content): the row keeps its id and vector under the new path."""
        key = _key(path)
        other = self._conn.execute(
            "SELECT id FROM images WHERE path = ? AND id != ?", (key, file_id)
        ).fetchall()
        self._doom(self._items_of(r[0] for r in other))
        self._conn.execute("DELETE FROM images WHERE path = ? AND id != ?", (key, file_id))
        self._conn.execute(
            "UPDATE images SET path = ?, size = ?, mtime_ns = ?, ctime_ns = ?, inode = ? "
            "WHERE id = ?",
            (key, size, mtime_ns, ctime_ns, inode, file_id),
        )
        self._conn.execute("DELETE FROM skipped WHERE path = ?", (key,))

    def touch(
        self,
        file_id: int,
        size: int,
        mtime_ns: int,
        ctime_ns: int | None = None,
        inode: int | None = None,
    ) -> None:
        """The file's bytes are the row's: only its recorded state (stat) changes."""
        self._conn.execute(
            "UPDATE images SET size = ?, mtime_ns = ?, ctime_ns = ?, inode = ? WHERE id = ?",
            (size, mtime_ns, ctime_ns, inode, file_id),
        )

    def delete_images(self, ids: Iterable[int]) -> int:
        """Delete these files' rows, with their items and the items' embeddings."""
        n = 0
        ids = list(ids)
        self._doom(self._items_of(ids))
        for chunk in _chunks(ids):
            self._conn.execute(
                "DELETE FROM embeddings WHERE item_id IN "
                f"(SELECT id FROM items WHERE image_id IN ({_marks(chunk)}))",
                chunk,
            )
            n += self._conn.execute(
                f"DELETE FROM images WHERE id IN ({_marks(chunk)})", chunk
            ).rowcount
        return n
