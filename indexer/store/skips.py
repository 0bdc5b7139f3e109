"""The skipped table: files that could not be read, with the reason, kept so that an
unchanged one is not tried again on every run and `status` can list them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from wherein.indexer.store.base import _key, _path
from wherein.indexer.store.files import FilesTable


class SkipsTable(FilesTable):
    def record_skip(
        self, path: str, reason: str, size: int | None, mtime_ns: int | None, when: str
    ) -> None:
        """Remember an unreadable file (and drop its row, if it had one)."""
        key = _key(path)
        self._conn.execute(
            "INSERT INTO skipped(path, reason, size, mtime_ns, seen_at) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT(path) DO UPDATE SET reason = excluded.reason, size = excluded.size, "
            "mtime_ns = excluded.mtime_ns, seen_at = excluded.seen_at",
            (key, reason, size, mtime_ns, when),
        )
        gone = self._conn.execute("SELECT id FROM images WHERE path = ?", (key,)).fetchall()
        self._doom(self._items_of(r[0] for r in gone))
        self._conn.execute("DELETE FROM images WHERE path = ?", (key,))

    def record_skips(self, skips: Iterable[tuple[str, str, int | None, int | None, str]]) -> None:
        """Bulk record_skip for (path, reason, size, mtime_ns, when) of files with no row."""
        self._conn.executemany(
            "INSERT OR REPLACE INTO skipped(path, reason, size, mtime_ns, seen_at) VALUES (?, ?, ?, ?, ?)",
            ((_key(p), *rest) for p, *rest in skips),
        )

    def skipped(self, under: Sequence[str] | None = None) -> list[dict]:
        """Skipped files (path, reason, size, mtime_ns, seen_at), by path; with ``under``,
        only those in or below these absolute folders."""
        where, args = self._under("path", under)
        cur = self._conn.execute(
            f"SELECT path, reason, size, mtime_ns, seen_at FROM skipped{where} ORDER BY path", args
        )
        cols = [c[0] for c in cur.description]
        return [{**dict(zip(cols, r)), "path": _path(r[0])} for r in cur]

    def forget_skips(self, paths: Iterable[str]) -> None:
        self._conn.executemany("DELETE FROM skipped WHERE path = ?", [(_key(p),) for p in paths])
