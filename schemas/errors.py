"""Errors a user can act on; the CLI prints each as one line and exits with its ``exit_code``.

They live in ``schemas`` because every layer raises them: the index and model code below,
search and the web app above, and the CLI that turns them into messages and exit statuses.
"""

from __future__ import annotations

import errno
import sqlite3


class WhereinError(Exception):
    """A fatal, user-facing error with a one-line message."""

    exit_code = 1


class UsageError(WhereinError):
    """A value the user gave cannot be used as given (a malformed query, a weight or an option
    value out of range, a pattern that does not parse): a usage error, exit status 2 as for
    click's own checks of options."""

    exit_code = 2


class NotFound(WhereinError):
    """No such file in the index, or its file is gone (the web app: HTTP 404)."""


class FileChanged(WhereinError):
    """The file at the indexed path is no longer the indexed content (the web app: HTTP 409)."""


class BadRequest(WhereinError):
    """A value a front-end let through but the library refuses (the web app: HTTP 400)."""


class ModelError(WhereinError):
    """A model file is missing or does not match its contract."""


class IndexError_(WhereinError):
    """The index directory is missing, unwritable, or inconsistent."""


class IndexLocked(IndexError_):
    """Another process holds the index's writer lock (its PID is recorded in the lock file).

    Exit status 75 (EX_TEMPFAIL from sysexits.h): the same command works once the
    other writer is done, so a script or scheduler can tell "retry later" from a failure.
    """

    exit_code = 75

    def __init__(self, directory: object, pid: int | None) -> None:
        self.directory = directory
        self.pid = pid
        holder = f"PID {pid}" if pid else "another process"
        super().__init__(
            f"{directory}: locked by {holder} (another wherein process is writing this index); "
            "run again when it is done, or add --wait"
        )


class CatalogDamaged(IndexError_):
    """The catalog file is damaged, or is not a wherein catalog: it is read no further and
    nothing is written into it (the message names the file and the way back)."""


# SQLITE_CORRUPT and SQLITE_NOTADB (primary codes; extended codes keep them in the low byte).
_DAMAGE_CODES = {11, 26}


def is_damage(exc: BaseException) -> bool:
    """Whether SQLite says the file itself is broken (a malformed page, not a database)."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    if "Could not decode to UTF-8" in str(exc):  # a text column of a damaged record
        return True
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in _DAMAGE_CODES
    text = str(exc)
    return "malformed" in text or "not a database" in text


class StorageError(IndexError_):
    """The disk refused a write: full, a file-size limit, read-only, or no permission."""


_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_DENIED_ERRNOS = {errno.EROFS, errno.EACCES, errno.EPERM}
# FAISS reports the C library's errno text inside a RuntimeError.
_FAISS_REASONS = {
    "No space left on device": "full",
    "Disk quota exceeded": "full",
    "File too large": "full",
    "Read-only file system": "readonly",
    "Permission denied": "denied",
}


def storage_error(exc: BaseException) -> StorageError | None:
    """The one-line error for a refused write (OSError, SQLite, FAISS); None if it is not one.

    What was written before the failure stays intact (SQLite rolls the batch back,
    FAISS files are replaced atomically), which is what the message promises.
    """
    if isinstance(exc, StorageError):
        return exc
    found = _classify(exc)
    if found is None:
        return None
    where, reason, kind = found
    if kind == "full":
        hint = "" if "space" in reason or "full" in reason else " (is the disk full?)"
        return StorageError(
            f"cannot write {where}: {reason}{hint}; free some space and run again"
            " - everything written before this is kept"
        )
    if kind == "readonly":
        return StorageError(f"cannot write {where}: {reason}")
    return StorageError(f"{where}: {reason}")


def _classify(exc: BaseException) -> tuple[str, str, str] | None:
    """(the file, why, "full" | "readonly" | "denied"), or None for other errors."""
    if isinstance(exc, OSError):
        if exc.errno in _FULL_ERRNOS:
            kind = "full"
        elif exc.errno == errno.EROFS:
            kind = "readonly"
        elif exc.errno in _DENIED_ERRNOS:
            kind = "denied"
        else:
            return None
        return str(exc.filename or "to disk"), exc.strerror or str(exc), kind
    if isinstance(exc, sqlite3.Error):
        text = str(exc)
        if "readonly" in text or "read-only" in text:
            return "the catalog", text, "readonly"
        if "full" in text or "disk I/O" in text:
            return "the catalog", text, "full"
        return None
    if isinstance(exc, RuntimeError):
        for reason, kind in _FAISS_REASONS.items():
            if reason in str(exc):
                return "the vectors file", reason, kind
    return None
