"""Export hits to a file: csv, jsonl or parquet (by extension or an explicit format).

The rows are ``Hit.to_dict()``, the objects `--json` prints: core fields in
schema order, then mask fields and command-specific extras. CSV is exactly
what `--csv` prints (nested values such as ``bbox`` or ``labels`` as JSON
text), JSON lines exactly what `--nl` prints. Parquet keeps nested values as
structs; it needs pyarrow, which comes with the ``wherein[scale]`` extra.
Files are written to a temporary name and renamed, so a failed export never
leaves a truncated file behind.

Hits with masks (``--mask``) can also go out as dataset labels: COCO instances
(``*.coco.json``), a YOLO segmentation folder (``*.yolo`` or ``--format yolo``)
or PNG masks with a manifest (``*.masks`` or ``--format masks``); see
wherein.search.localize.export.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wherein.schemas.errors import WhereinError
from wherein.schemas.records import Hit

if TYPE_CHECKING:  # numpy-free at import: the CLI imports this module for its choices
    from wherein.search.localize.export import StoredLabels

TABLE_FORMATS = ("csv", "jsonl", "parquet")
LABEL_FORMATS = ("coco", "yolo", "masks")  # masks as dataset labels (needs --mask)
EXPORT_FORMATS = TABLE_FORMATS + LABEL_FORMATS
# Checked before the plain extensions: "dogs.coco.json" is COCO, not JSON lines.
_LABEL_SUFFIXES = {".coco.json": "coco", ".yolo": "yolo", ".masks": "masks"}
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
    name = Path(path).name.lower()
    for suffix, label_fmt in _LABEL_SUFFIXES.items():
        if name.endswith(suffix):
            return label_fmt
    ext = Path(path).suffix.lower()
    if ext not in _EXTENSIONS:
        raise ExportError(
            f"{path}: cannot tell the export format from the extension {ext or '(none)'!r}; "
            f"use .csv, .jsonl, .parquet, .coco.json, .yolo or .masks, or --format"
        )
    return _EXTENSIONS[ext]


def check_export(path: str | Path, fmt: str | None = None) -> str:
    """Fail before any work when the export cannot be written: format, pyarrow, folder."""
    path = Path(path)
    fmt = export_format(path, fmt)
    if fmt == "parquet":
        _pyarrow()
    if fmt in LABEL_FORMATS:
        from wherein.search.localize.export import check_destination

        check_destination(path, fmt)
        return fmt
    if path.is_dir():
        raise ExportError(f"{path}: is a folder (a {fmt} export is one file)")
    if not path.parent.is_dir():
        raise ExportError(f"{path}: folder {path.parent} does not exist")
    return fmt


def write_export(
    hits: Sequence[Hit],
    path: str | Path,
    fmt: str | None = None,
    prompt: str | None = None,
    labels: StoredLabels | None = None,
) -> Path:
    """Write hits to path; returns the path. Raises ExportError for a bad format or a missing pyarrow.

    Label formats need hits with masks; their category is prompt (what was
    segmented), or the image's best label from `wherein label` when labels are given.
    """
    from wherein.search import output

    path = Path(path)
    fmt = export_format(path, fmt)
    if fmt in LABEL_FORMATS:
        if prompt is None:
            raise ExportError(f"a {fmt} export holds masks: ask for them with --mask")
        from wherein.search.localize.export import export_hits

        return export_hits(hits, path, fmt, prompt, labels)[0]
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
    if fmt in LABEL_FORMATS:
        raise ExportError(f"{path}: a {fmt} export holds labels, not hit rows")
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
