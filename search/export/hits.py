"""Export hits: csv, jsonl or parquet rows, or their masks as dataset labels.

``check_export`` runs before the work (format, pyarrow, destination), ``write_export``
after it; both resolve the destination the same way (destination.py: never into
the index folder or over an input; symlinks written through, streams streamed, -
to standard output). Table rows are encoded by rows.py; hits with masks
(``--mask``) go out as COCO instances (``*.coco.json``), a YOLO segmentation
folder (``*.yolo``) or PNG masks with a manifest (``*.masks``) through labels.py.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wherein.schemas.records import Hit
from wherein.search.export.destination import Guard, resolve
from wherein.search.export.errors import ExportError
from wherein.search.export.formats import Format, export_format

if TYPE_CHECKING:  # numpy-free at import
    from wherein.search.export.labels import StoredLabels


def check_export(
    path: str | Path,
    fmt: str | None = None,
    keep: Sequence[Guard] = (),
    masks: bool = True,
) -> Format:
    """Fail before any work when the export cannot be written: format, pyarrow, destination."""
    f = export_format(path, fmt, masks)
    if f.name == "parquet":
        from wherein.search.export.rows import pyarrow

        pyarrow()
    resolve(path, f, keep)
    return f


def write_export(
    hits: Sequence[Hit],
    path: str | Path,
    fmt: str | None = None,
    prompt: str | None = None,
    labels: StoredLabels | None = None,
    keep: Sequence[Guard] = (),
) -> Path:
    """Write hits to path (- for standard output); returns the path. An ExportError for a bad format, a
    missing pyarrow or a destination that may not be written (see destination.py).

    Label formats need hits with masks; their category is prompt (what was
    segmented), or the image's best label from `wherein label` when labels are given.
    The hits' own images are never overwritten.
    """
    f = export_format(path, fmt)
    if f.kind == "labels":
        if prompt is None:
            raise ExportError(f"a {f.name} export holds masks: ask for them with --mask")
        from wherein.search.export.labels import export_hits

        return export_hits(hits, path, f.name, prompt, labels, keep)[0]
    resolve(path, f, keep, reads=[h.path for h in hits]).write(f.encode(hits))
    return Path(path)


def read_export(path: str | Path, fmt: str | None = None) -> list[dict[str, Any]]:
    """Hit objects back from an export file (for checks and round trips)."""
    from wherein.search import output

    path = Path(path)
    f = export_format(path, fmt)
    if f.kind == "labels":
        raise ExportError(f"{path}: a {f.name} export holds labels, not hit rows")
    if f.name == "parquet":
        from wherein.search.export.rows import pyarrow

        pq = pyarrow()[1]
        rows = pq.read_table(path).to_pylist()
        return [{k: v for k, v in r.items() if v is not None or k in _core()} for r in rows]
    if f.name == "jsonl":
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
