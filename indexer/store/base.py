"""What every table of the catalog shares: the stored form of a path, id chunks for
``IN (...)`` lists, the images row, float32 blobs, and CatalogBase, the state that
Catalog.__init__ sets up and each table's methods read.

Names with a leading underscore are private to indexer/store/: the table modules
share them, nothing outside the store imports them.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import sqlite_utils

from wherein.indexer.store.vector_file import VectorFile
from wherein.schemas.errors import IndexError_

_CHUNK = 500  # ids per IN (...) list: far below SQLite's variable limit


_IMAGE_COLUMNS = (
    "id",
    "path",
    "size",
    "mtime_ns",
    "sha256",
    "width",
    "height",
    "format",
    "indexed_at",
    "model_id",
)


_SELECT_IMAGES = f"SELECT {', '.join(_IMAGE_COLUMNS)} FROM images"


def vector_to_blob(v: np.ndarray) -> bytes:
    return np.ascontiguousarray(v, dtype="<f4").tobytes()


def blob_to_vector(b: bytes) -> np.ndarray:
    return np.frombuffer(b, dtype="<f4")


_FS_CODEC = (sys.getfilesystemencoding(), sys.getfilesystemencodeerrors())


def _key(path: str | os.PathLike[str]) -> bytes:
    """The stored form of a path: its bytes as the OS has them (os.fsencode).

    A str holding a surrogate outside U+DC80..U+DCFF cannot come from a file name (the OS
    decodes undecodable bytes into that range only): a clear error, not a UnicodeEncodeError.
    """
    try:
        return os.fsencode(path)
    except UnicodeEncodeError:
        raise IndexError_(
            f"{os.fspath(path)!a}: not a possible file name (it holds a lone surrogate)"
        ) from None


def _path(stored: bytes | str) -> str:
    """os.fsdecode without its per-call checks (known_files decodes every row).

    str: a read-only catalog still in the first release's layout (UTF-8 text)."""
    return stored.decode(*_FS_CODEC) if isinstance(stored, bytes) else stored


def _chunks(ids: Iterable[int]) -> Iterator[list[int]]:
    ids = [int(i) for i in ids]
    for start in range(0, len(ids), _CHUNK):
        yield ids[start : start + _CHUNK]


def _marks(chunk: Sequence) -> str:
    return ",".join("?" * len(chunk))


class CatalogBase:
    """The state Catalog.__init__ sets up, which the methods of every table read."""

    path: Path
    readonly: bool
    _conn: sqlite3.Connection
    _db: sqlite_utils.Database
    _vfile: VectorFile | None  # float16 vectors beside the catalog, if it has one
    _p: str  # a bound path: "?" (bytes), or "CAST(? AS TEXT)" in the first layout (read-only)
    _identity: str  # the SELECT of ctime_ns and inode (NULLs where an older catalog lacks them)
    # Why a write is refused beyond being read-only: a newer wherein's catalog (read as it is)
    too_new: IndexError_ | None = None
    _kind: str  # the SELECT of a file's kind (i.kind; derived where an older catalog lacks it)

    def _migrated(self, step: str, check: Callable[[], bool]) -> bool:
        """Whether the migration step is applied (check asks SQLite: ~0.4 ms through
        sqlite_utils, and a search asks for several steps). A step is never undone, so a yes
        is kept; a no is asked again (a writer may migrate the catalog meanwhile)."""
        seen: set[str] = self.__dict__.setdefault("_steps_seen", set())
        if step in seen:
            return True
        if check():
            seen.add(step)
            return True
        return False

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """One read transaction (a consistent view under WAL), unless one is already open."""
        if self._conn.in_transaction:
            yield
            return
        self._conn.execute("BEGIN")
        try:
            yield
        finally:
            self._conn.execute("COMMIT")  # nothing was written: this only ends the snapshot

    def _under(self, column: str, under: Sequence[str] | None) -> tuple[str, list[bytes]]:
        """A WHERE clause (with its leading space; empty for None): column is one of these
        absolute folders or a path below one. Paths are bytes, so a range scan of the index."""
        if not under:
            return "", []
        conds, args = [], []
        sep = os.sep.encode()
        for folder in under:
            base = _key(folder).rstrip(sep)
            # Below base: base + "/" <= path < base + "0" ("0" follows "/" in every encoding).
            conds.append(
                f"({column} = {self._p} OR ({column} >= {self._p} AND {column} < {self._p}))"
            )
            args += [base, base + sep, base + bytes([sep[0] + 1])]
        return " WHERE (" + " OR ".join(conds) + ")", args  # parenthesised: callers add AND

    def _select_files(self) -> str:
        """SELECT of the images row (_IMAGE_COLUMNS, then the file's kind) FROM images i."""
        return f"SELECT {', '.join('i.' + c for c in _IMAGE_COLUMNS)}, {self._kind} FROM images i"

    def _row(self, row: Sequence) -> dict:
        """A _select_files row as a dict (id, path, ..., model_id, and file_kind: the media
        kind's name, indexer/kinds)."""
        out = dict(zip((*_IMAGE_COLUMNS, "file_kind"), row))
        out["path"] = _path(out["path"])
        return out
