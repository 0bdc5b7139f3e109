"""Errors a user can act on; the CLI prints them as one line and exits non-zero."""


class WhereinError(Exception):
    """A fatal, user-facing error with a one-line message."""


class ModelError(WhereinError):
    """A model file is missing or does not match its contract."""


class IndexError_(WhereinError):
    """The index directory is missing, locked, or inconsistent."""
