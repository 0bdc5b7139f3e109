"""The export errors: one line each, exit status 1 (WhereinError)."""

from __future__ import annotations

from wherein.schemas.errors import WhereinError


class ExportError(WhereinError):
    """The export's format or destination is unusable."""


class LabelExportError(ExportError):
    """The labels cannot be exported (destination, categories, masks)."""
