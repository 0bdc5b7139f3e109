"""The catalog's SQLite connection: how it is opened (for writing, read-only, on read-only
media), what is refused before anything is written (a 0-byte file, another program's
database), and the one-line errors that name a damaged catalog and the way back wherever
a query meets the damage.
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from wherein.schemas.errors import CatalogDamaged, IndexError_, is_damage


class CatalogReadOnly(IndexError_):
    """A write to a catalog that cannot be written (read-only file, folder or mount)."""


class CatalogTooNew(IndexError_):
    """A catalog stamped with a schema newer than this code knows: never written (its newer
    tables and columns would be left half-kept); readers open it read-only."""


def too_new(path: Path, version: int, known: int) -> CatalogTooNew:
    return CatalogTooNew(
        f"{path}: made by a newer wherein (catalog schema {version}; this wherein knows up to "
        f"{known}); nothing was written to it. Upgrade wherein to add to this index "
        "(search and status still read it)"
    )


def rebuild_hint(path: Path) -> str:
    """The one command that sets a damaged catalog aside and builds a new one."""
    return f"wherein index PATHS --index {path.parent} --rebuild-catalog"


def damaged(path: Path, exc: BaseException | str) -> CatalogDamaged:
    """The one-line error for a catalog SQLite cannot read: the file and the way back."""
    code = getattr(exc, "sqlite_errorcode", 0) or 0
    if code & 0xFF == sqlite3.SQLITE_NOTADB or "not a database" in str(exc):
        what = "is not a SQLite database (a damaged catalog, or some other file)"
        back = (
            f"if it was this index's catalog, `{rebuild_hint(path)}` sets it aside and builds "
            "a new one; else use another --index"
        )
    else:
        what = f"is damaged ({exc})"
        back = (
            f"`{rebuild_hint(path)}` sets it aside and builds a new one, "
            "reusing the vectors it can still read"
        )
    return CatalogDamaged(f"{path}: the catalog {what}; nothing was written to it. {back}")


class _Cursor(sqlite3.Cursor):
    """A cursor whose damage errors name the catalog (see _Connection)."""

    connection: _Connection

    def execute(self, sql: str, parameters=(), /):
        with self.connection.named():
            return super().execute(sql, parameters)

    def executemany(self, sql: str, seq, /):
        with self.connection.named():
            return super().executemany(sql, seq)

    def __next__(self):
        # Per row: a plain try, not named()'s context manager, whose generator cost a
        # fifth of a web search's CPU (200 hits' rows and vectors).
        try:
            return super().__next__()
        except sqlite3.DatabaseError as exc:
            self.connection.raise_named(exc)
            raise

    def fetchone(self):
        with self.connection.named():
            return super().fetchone()

    def fetchmany(self, size: int | None = None):
        with self.connection.named():
            return super().fetchmany(self.arraysize if size is None else size)

    def fetchall(self):
        with self.connection.named():
            return super().fetchall()


class _Connection(sqlite3.Connection):
    """Every statement and every row read turns SQLite's "database disk image is malformed"
    into CatalogDamaged naming the file and the way back, wherever in the code it is hit
    (a damaged page shows only when a query reaches it)."""

    db_path: Path = Path("catalog.db")

    @contextmanager
    def named(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.DatabaseError as exc:
            self.raise_named(exc)
            raise

    def raise_named(self, exc: sqlite3.DatabaseError) -> None:
        """CatalogDamaged naming the file when exc is damage; else nothing (the caller
        raises exc itself)."""
        if is_damage(exc):
            raise damaged(self.db_path, exc) from exc

    def cursor(self, factory=_Cursor):
        return super().cursor(factory)

    def execute(self, sql: str, parameters=(), /):
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql: str, seq, /):
        return self.cursor().executemany(sql, seq)

    def commit(self) -> None:
        with self.named():
            super().commit()


def _connect(target: str, path: Path, uri: bool = False) -> _Connection:
    conn = sqlite3.connect(target, uri=uri, check_same_thread=False, factory=_Connection)
    conn.db_path = path
    return conn


def _connect_readonly(path: Path) -> sqlite3.Connection:
    """A read-only connection, also in a read-only folder (a read-only mount, a DVD).

    A WAL database needs its -shm file, which a read-only folder cannot get; when
    the write-ahead log is empty (every commit checkpointed) the database file alone
    is the whole index, and SQLite may read it as immutable.
    """
    conn = _connect(f"file:{_uri_path(path)}?mode=ro", path, uri=True)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn
    except sqlite3.OperationalError as exc:
        conn.close()
        wal = path.with_name(path.name + "-wal")
        if wal.exists() and wal.stat().st_size:
            raise
        # No -shm to be had: the folder is read-only, or the disk is too full to make one.
        if (
            os.access(path.parent, os.W_OK)
            and "disk I/O" not in str(exc)
            and "full" not in str(exc)
        ):
            raise
    return _connect(f"file:{_uri_path(path)}?immutable=1", path, uri=True)


def _uri_path(path: Path) -> str:
    """path in a file: URI (a '?' or '#' in a folder name would end the path there)."""
    return re.sub(r"[?#%]", lambda m: f"%{ord(m.group()):02X}", str(path))


def _refuse_foreign(conn: sqlite3.Connection, path: Path) -> None:
    """A SQLite file with tables, but not a catalog's: never taken for one, never written.

    A database without any table holds nothing (a catalog created and never committed)."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if tables and not {"images", "meta"} <= tables:
        shown = ", ".join(sorted(tables)[:4])
        raise CatalogDamaged(
            f"{path}: not a wherein catalog (a SQLite database with tables {shown}); "
            "nothing was written to it: use another --index"
        )


def _refuse_empty(path: Path) -> None:
    """A 0-byte catalog.db is a lost catalog (truncated), not a new one: SQLite would take
    it for an empty database, and the next write would start an empty index over it."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return
    if size == 0:
        raise CatalogDamaged(
            f"{path}: the catalog is an empty file (0 bytes: truncated or lost); nothing was "
            f"written to it. `{rebuild_hint(path)}` sets it aside and builds a new one"
        )
