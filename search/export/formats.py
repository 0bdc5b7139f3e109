"""The export formats, as data: what each is called, how it is recognised, how it is written.

Every help text and error about ``--export``/``--format`` is made from FORMATS, so
a new format is one entry here and one codec module. Light on purpose (no numpy,
no pyarrow): the CLI imports it for its choices; a codec is imported when a format
is first encoded.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from wherein.search.export.errors import ExportError

PACKAGE = "wherein.search.export"
STDOUT = "-"


@dataclass(frozen=True)
class Format:
    """One export format.

    kind: "table" writes one row per hit; "labels" writes the hits' masks as
    dataset labels (the command needs --mask). layout: "file" or "folder" (a
    folder export cannot go to standard output). stream: a reader can take the file
    front to back as it comes (csv and JSON lines row by row, COCO's one JSON document), so
    it may go to a pipe, a FIFO or a device; parquet is read from its end (the footer), so
    it goes to a file. encoder/finisher: "module.function"
    in this package; a table encoder takes the hits and returns bytes, a label
    encoder turns one image into a Piece and the finisher writes the index files.
    """

    name: str
    suffixes: tuple[str, ...]
    kind: Literal["table", "labels"]
    layout: Literal["file", "folder"]
    encoder: str
    finisher: str | None = None
    stream: bool = True

    @property
    def encode(self) -> Callable[..., Any]:
        return _load(self.encoder)

    @property
    def finish(self) -> Callable[..., Any]:
        if self.finisher is None:
            raise ExportError(f"a {self.name} export has no finishing step")
        return _load(self.finisher)

    @property
    def shape(self) -> str:
        """How the destination is described: 'FILE.csv', 'a .yolo folder'."""
        return f"a {self.suffixes[0]} folder" if self.layout == "folder" else self.suffixes[0]


def _load(ref: str) -> Callable[..., Any]:
    module, name = ref.rsplit(".", 1)
    return getattr(importlib.import_module(f"{PACKAGE}.{module}"), name)


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("csv", (".csv",), "table", "file", "rows.csv_bytes"),
        Format("jsonl", (".jsonl", ".ndjson", ".json"), "table", "file", "rows.jsonl_bytes"),
        Format("parquet", (".parquet", ".pq"), "table", "file", "rows.parquet_bytes", stream=False),
        Format("coco", (".coco.json",), "labels", "file", "coco.encode", "coco.finish"),
        Format("yolo", (".yolo",), "labels", "folder", "yolo.encode", "yolo.finish", False),
        Format(
            "masks", (".masks",), "labels", "folder", "pngmasks.encode", "pngmasks.finish", False
        ),
    )
}
TABLE_FORMATS = tuple(n for n, f in FORMATS.items() if f.kind == "table")
LABEL_FORMATS = tuple(n for n, f in FORMATS.items() if f.kind == "labels")
EXPORT_FORMATS = tuple(FORMATS)


def choices(masks: bool) -> tuple[str, ...]:
    """The --format choices of a command: label formats only where it can make masks."""
    return EXPORT_FORMATS if masks else TABLE_FORMATS


def listing(names: Sequence[str]) -> str:
    """The formats' destinations in words: '.csv, .jsonl or .parquet'."""
    shapes = [FORMATS[n].shape for n in names]
    return ", ".join(shapes[:-1]) + f" or {shapes[-1]}" if len(shapes) > 1 else shapes[0]


def export_help(masks: bool, rows: str = "hits") -> str:
    """The --export help of a command; masks: whether it has --mask."""
    text = f"Also write the {rows} to FILE ({listing(TABLE_FORMATS)}; - for standard output)"
    if masks:
        text += f"; with --mask, the masks as labels ({listing(LABEL_FORMATS)})"
    return text + (
        ". Replaces only an earlier wherein export (else --overwrite); never into the index "
        "folder; a symlink is written through to its target."
    )


EXPORT_FORMAT_HELP = "Export format [default: from the FILE extension; needed with --export -]."
OVERWRITE_HELP = (
    "Let --export replace an existing regular file that is not an earlier wherein export "
    "(never a file the index lists, the index, a symlink's target or a folder)."
)


def export_format(path: str | Path, fmt: str | None = None, masks: bool = True) -> Format:
    """The format of an export: fmt when given, else from the path's extension.

    masks: whether the command can make masks (label formats are refused otherwise).
    """
    allowed = choices(masks)
    if fmt:
        if fmt not in FORMATS:
            raise ExportError(f"unknown export format {fmt!r} (choose from {', '.join(allowed)})")
        return FORMATS[fmt]
    if str(path) == STDOUT:
        streams = [n for n in allowed if FORMATS[n].layout == "file"]
        raise ExportError(f"--export - (standard output) needs --format ({', '.join(streams)})")
    name = Path(path).name.lower()
    # Longest suffix first: "dogs.coco.json" is COCO, not JSON lines.
    by_suffix = sorted(
        ((s, f) for f in FORMATS.values() for s in f.suffixes), key=lambda sf: -len(sf[0])
    )
    for suffix, f in by_suffix:
        if name.endswith(suffix) and len(name) > len(suffix):
            return f
    ext = Path(path).suffix.lower()
    known = ", ".join(s for n in allowed for s in FORMATS[n].suffixes[:1])
    raise ExportError(
        f"{path}: cannot tell the export format from the extension {ext or '(none)'!r}; "
        f"use {known}, or --format"
    )
