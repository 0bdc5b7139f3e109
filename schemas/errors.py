"""Errors a user can act on; the CLI prints each as one line and exits with its ``exit_code``.

They live in ``schemas`` because every layer raises them: the index and model code below,
search and the web app above, and the CLI that turns them into messages and exit statuses.
"""

from __future__ import annotations


class WhereinError(Exception):
    """A fatal, user-facing error with a one-line message."""

    exit_code = 1


class ModelError(WhereinError):
    """A model file is missing or does not match its contract."""


class IndexError_(WhereinError):
    """The index directory is missing, unwritable, or inconsistent."""


class IndexLocked(IndexError_):
    """Another process holds the index's writer lock (its PID is recorded in the lock file)."""

    def __init__(self, directory: object, pid: int | None) -> None:
        self.directory = directory
        self.pid = pid
        holder = f" (PID {pid})" if pid else ""
        super().__init__(f"{directory}: another wherein process{holder} is writing this index")
