"""Export hits to a file: csv, jsonl or parquet (by extension or an explicit format).

The rows are ``Hit.to_dict()``, the objects `--json` prints: core fields in
schema order, then mask fields and command-specific extras. CSV is exactly
what `--csv` prints (nested values such as ``bbox`` or ``labels`` as JSON
text), JSON lines exactly what `--nl` prints. Parquet keeps nested values as
structs; it needs pyarrow, which comes with the ``wherein[scale]`` extra.
Files are written to a temporary name and renamed, so a failed export never
leaves a truncated file behind.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from wherein.schemas.errors import WhereinError
from wherein.schemas.records import Hit

EXPORT_FORMATS = ("csv", "jsonl", "parquet")
_EXTENSIONS = {
    ".csv": "csv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".parquet": "parquet",
    ".pq": "parquet",
}
PYARROW_MISSING = "parquet export needs pyarrow: install it with `pip install 'wherein[scale]'`"


class ExportError(WhereinError):
    """The export file or format is unusable."""


def export_format(path: str | Path, fmt: str | None = None) -> str:
    """The format for a path: fmt when given, else from the extension."""
    if fmt:
        if fmt not in EXPORT_FORMATS:
            raise ExportError(
                f"unknown export format {fmt!r} (choose from {', '.join(EXPORT_FORMATS)})"
            )
        return fmt
    ext = Path(path).suffix.lower()
    if ext not in _EXTENSIONS:
        raise ExportError(
            f"{path}: cannot tell the export format from the extension {ext or '(none)'!r}; "
            f"use .csv, .jsonl or .parquet, or --format"
        )
    return _EXTENSIONS[ext]


def check_export(path: str | Path, fmt: str | None = None) -> str:
    """Fail before any work when the export cannot be written: format, pyarrow, folder."""
    path = Path(path)
    fmt = export_format(path, fmt)
    if fmt == "parquet":
        _pyarrow()
    if not path.parent.is_dir():
        raise ExportError(f"{path}: folder {path.parent} does not exist")
    return fmt


def write_export(hits: Sequence[Hit], path: str | Path, fmt: str | None = None) -> Path:
    """Write hits to path; returns the path. Raises ExportError for a bad format or a missing pyarrow."""
    from wherein.search import output

    path = Path(path)
    fmt = export_format(path, fmt)
    if fmt == "parquet":
        data = _parquet_bytes(hits)
    elif fmt == "csv":
        data = output.to_csv(hits).encode()
    else:
        data = output.render(hits, "nl").encode()
    if not path.parent.is_dir():
        raise ExportError(f"{path}: folder {path.parent} does not exist")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ExportError(f"{path}: cannot write ({exc.strerror or exc})") from None
    return path


def read_export(path: str | Path, fmt: str | None = None) -> list[dict[str, Any]]:
    """Hit objects back from an export file (for checks and round trips)."""
    from wherein.search import output

    path = Path(path)
    fmt = export_format(path, fmt)
    if fmt == "parquet":
        pq = _pyarrow()[1]
        rows = pq.read_table(path).to_pylist()
        return [{k: v for k, v in r.items() if v is not None or k in _core()} for r in rows]
    if fmt == "jsonl":
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = output.read_csv(path.read_text())
    for r in rows:  # nested extras (labels, ...) are JSON text in CSV
        for k, v in r.items():
            if k in _JSON_EXTRAS and isinstance(v, str):
                r[k] = json.loads(v)
            elif k in _BOOL_EXTRAS and v in ("true", "false"):
                r[k] = v == "true"
            elif k in _NUMERIC_EXTRAS:
                r[k] = float(v) if "." in v or "e" in v else int(v)
    return rows


# Extras the curation commands add whose CSV text should come back typed.
_JSON_EXTRAS = {"labels"}
_BOOL_EXTRAS = {"keeper"}
_NUMERIC_EXTRAS = {"group", "group_size", "uniqueness", "k"}


def _core() -> tuple[str, ...]:
    from wherein.schemas.records import HIT_CORE_FIELDS

    return HIT_CORE_FIELDS


def _pyarrow():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ExportError(PYARROW_MISSING) from None
    return pa, pq


def _parquet_bytes(hits: Sequence[Hit]) -> bytes:
    from wherein.search import output

    pa, pq = _pyarrow()
    rows = [h.to_dict() for h in hits]
    cols = output.csv_columns(hits)
    # Column by column: from_pylist would take its schema from the first row only,
    # dropping fields (masks, extras) that the first hit happens not to have.
    table = pa.table({c: pa.array([r.get(c) for r in rows]) for c in cols})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()
