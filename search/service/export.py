"""Writing hits to an --export destination: the step search and the curation commands share.

``export_keep`` says what no export may write (the index folder, a command's inputs);
``export_hits`` writes and returns what was written, ``Exported`` (its ``to_dict()``
follows ``$defs/export`` in schemas/select.schema.json).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wherein.schemas.records import Hit

STDOUT = "-"


@dataclass
class Exported:
    path: str  # "-": standard output
    format: str
    kind: str  # "table": one row per hit; "labels": the hits' masks as dataset labels
    rows: int
    masked: int  # images whose masks the export holds (labels), 0 for a table

    @property
    def to_stdout(self) -> bool:
        return self.path == STDOUT

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "format": self.format,
            "kind": self.kind,
            "rows": self.rows,
            "masked": self.masked,
        }


def export_keep(
    index_dir: str | Path | None, inputs: Sequence[str | Path] = (), overwrite: bool = False
) -> list[Any]:
    """What no export may write: the index folder, every file the index lists, and the files
    the command reads. overwrite (--overwrite): a user's regular file may be replaced (no
    kept one: see destination.py)."""
    from wherein.indexer import paths as P
    from wherein.search.export.destination import IndexedFiles, Keep, Overwrite

    folder = P.index_dir(index_dir)
    keep: list[Any] = [Keep(folder, "the index folder"), IndexedFiles(_indexed_in(folder))]
    keep += [Keep(Path(p), "an input of this command") for p in inputs]
    return keep + [Overwrite()] if overwrite else keep


def check_destination(
    path: str | Path, fmt: str | None, mask: bool | None, keep: Sequence[Any]
) -> Any:
    """The one check of an export before any work: its format (and pyarrow), that a label
    format comes with masks, and that the destination may be written (not over keep: see
    ``export_keep``). mask: the command's --mask, None when it has none. The Format."""
    from wherein.schemas.errors import UsageError
    from wherein.search.export import formats as F
    from wherein.search.export.hits import check_export

    f = F.export_format(path, fmt, masks=mask is not None)
    if f.kind == "labels" and not mask:
        raise UsageError(
            f"a {f.name} export holds masks: add --mask"
            if mask is not None
            else f"a {f.name} export holds masks, and this command makes none: "
            f"export to {F.listing(F.TABLE_FORMATS)}"
        )
    return check_export(path, f.name, keep, masks=mask is not None)


def _indexed_in(folder: Path) -> Callable[[Path, os.stat_result], str | None]:
    """which(path, stat) of IndexedFiles for the index in folder: the catalog's row at that
    path, else a row recorded with the file's inode whose path is that very file now (a
    hard link, a bind mount, a symlink's target). Opened read-only, only when an export
    would replace an existing file."""

    def which(target: Path, st: os.stat_result) -> str | None:
        from wherein.indexer.store.catalog import Catalog
        from wherein.indexer.store.index_store import CATALOG_FILE

        db = folder / CATALOG_FILE
        if not db.is_file():
            return None
        catalog = Catalog(db, readonly=True)
        try:
            if catalog.row_by_path(str(target)) is not None:
                return str(target)
            for path in catalog.paths_maybe_of(st.st_ino, st.st_size):
                try:
                    other = os.stat(path)
                except OSError:
                    continue
                if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
                    return path
            return None
        finally:
            catalog.close()

    return which


def export_hits(
    hits: Sequence[Hit],
    path: str | Path,
    fmt: str | None = None,
    *,
    prompt: str | None = None,
    labels: Any = None,
    index_dir: str | Path | None = None,
    overwrite: bool = False,
) -> Exported:
    """Write hits to path (- for standard output) in fmt (else the path's extension).

    prompt/labels: what the masks show, for label exports (see export/hits.py write_export).
    """
    from wherein.search.export.formats import export_format
    from wherein.search.export.hits import write_export

    f = export_format(path, fmt)
    write_export(
        hits,
        path,
        fmt,
        prompt=prompt,
        labels=labels,
        keep=export_keep(index_dir, overwrite=overwrite),
    )
    return exported(hits, path, f.name, f.kind)


@dataclass(frozen=True)
class ExportTo:
    """An --export destination as asked: path (- for standard output), format (else the
    path's extension), the index whose folder no export may write into, and whether a user's
    regular file may be replaced (--overwrite)."""

    path: Path
    fmt: str | None = None
    index_dir: Path | None = None
    overwrite: bool = False

    def write(self, hits: Sequence[Hit], prompt: str | None = None, labels: Any = None):
        return export_hits(
            hits,
            self.path,
            self.fmt,
            prompt=prompt,
            labels=labels,
            index_dir=self.index_dir,
            overwrite=self.overwrite,
        )


def export_to(
    path: Path | None, fmt: str | None, index_dir: Path | None, overwrite: bool = False
) -> ExportTo | None:
    return None if path is None else ExportTo(path, fmt, index_dir, overwrite)


def exported(
    hits: Sequence[Hit], path: str | Path, fmt: str, kind: str, masked: int | None = None
) -> Exported:
    """The record of an export of hits; masked: the images in a label export, when the step
    that wrote it counted them (the Ray mask step), else the hits with a mask file."""
    if masked is None:
        masked = sum(1 for h in hits if h.mask_path) if kind == "labels" else 0
    return Exported(str(path), fmt, kind, len(hits), masked)
