"""Whether an existing file is an earlier wherein export of a format: the only file an
export replaces without --overwrite.

Each file format carries a mark that wherein writes and a user's file rarely has:

- csv: the first line is wherein's header, the hit fields in schema order
  (``rank,path,score,...``), then any extras;
- jsonl: empty (an export of no hits), or the first line is a JSON object whose keys
  begin with the hit fields in schema order;
- parquet: the key-value metadata holds ``wherein.export`` (PARQUET_MARK);
- coco: the JSON begins with wherein's ``info`` (COCO_INFO), as coco.finish writes it.

Only the first bytes (or parquet's footer) are read. Folder formats (yolo, masks) are
not here: their folder's manifest says what an export wrote (destination.folder_is_ours).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

PARQUET_MARK = b"wherein.export"
COCO_INFO = "masks exported by wherein"
_HEAD = 1 << 20  # the first line of a wherein export fits (a row's labels and extras)


def _head(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        return os.read(fd, _HEAD)
    finally:
        os.close(fd)


def _first_line(path: Path) -> str:
    return _head(path).split(b"\n", 1)[0].decode("utf-8", "replace")


def _core() -> tuple[str, ...]:
    from wherein.schemas.records import HIT_CORE_FIELDS

    return HIT_CORE_FIELDS


def _csv(path: Path) -> bool:
    header = ",".join(_core())
    line = _first_line(path)
    return line == header or line.startswith(header + ",")


def _jsonl(path: Path) -> bool:
    if os.path.getsize(path) == 0:
        return True
    try:
        row = json.loads(_first_line(path))
    except ValueError:
        return False
    core = list(_core())
    return isinstance(row, dict) and list(row)[: len(core)] == core


def _parquet(path: Path) -> bool:
    try:  # pyarrow itself, not rows.pyarrow: rows imports this module for the mark
        import pyarrow.parquet as pq

        meta = pq.read_metadata(path).metadata or {}
    except Exception:  # no pyarrow, or not a parquet file (pyarrow raises its own errors)
        return False
    return PARQUET_MARK in meta


def _coco(path: Path) -> bool:
    start = json.dumps({"info": {"description": COCO_INFO}})[:-2]  # the doc's first bytes
    return _head(path).startswith(start.encode())


_MARKS = {"csv": _csv, "jsonl": _jsonl, "parquet": _parquet, "coco": _coco}


def is_ours(path: Path, fmt: str) -> bool:
    """Whether path (a regular file) is a wherein export of fmt; unreadable: no."""
    mark = _MARKS.get(fmt)
    if mark is None:
        return False
    try:
        return mark(path)
    except OSError:
        return False
