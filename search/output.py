"""Print search hits: an aligned table, JSON, JSON lines, CSV or bare paths.

Every structured format carries the same hit objects (``Hit.to_dict()``,
described by ``schemas/hit.schema.json``):

- ``json``: one JSON array of hit objects;
- ``nl``: one JSON object per line (streams well into ``jq -c``);
- ``csv``: a header row, then one row per hit; core fields first in schema
  order, then any set optional fields (``bbox`` as JSON text); empty cell = null;
  ``read_csv`` turns it back into hit objects;
- ``paths``: one path per line (``xargs``-friendly; ``paths0`` ends each with NUL), a
  video's once however many of its frames matched (``--frames``);
- ``table``: rank, probability, score, size in pixels, path; stale entries marked; a
  video's path with its hit's time, ``clip.mp4 @ 1:23``, a photo's with its region when one
  matched best, ``big.jpg @ 2412,1106-2741,1435`` (x0,y0-x1,y1 in its pixels).

``table()`` and ``human_bytes()`` are the plain-text helpers every command's
human-readable output uses.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING

from wherein.schemas.records import HIT_CORE_FIELDS, HIT_MASK_FIELDS, Hit

if TYPE_CHECKING:
    from wherein.search.selection import Selection

FORMATS = ("table", "json", "nl", "csv", "paths", "paths0")

_INT_FIELDS = {"rank", "width", "height", "id", "size", "item_id"}
_FLOAT_FIELDS = {"score", "probability", "mask_area", "mask_score", "time", "duration"}
_BOOL_FIELDS = {"exists"}
_JSON_FIELDS = {"bbox", "gps", "region", "moments"}


def render(
    hits: Sequence[Hit], fmt: str, photo: Sequence[str] = (), near: str | None = None
) -> str:
    """The whole output for a format, ending with a newline when not empty.

    photo, near: the table's photo columns (``photo_columns``); other formats carry
    every field anyway."""
    if fmt == "json":
        return to_json(hits) + "\n"
    if fmt == "nl":
        return "".join(json.dumps(h.to_dict()) + "\n" for h in hits)
    if fmt == "csv":
        return to_csv(hits)
    if fmt == "paths":
        return "".join(p + "\n" for p in _paths(hits))
    if fmt == "paths0":
        return "".join(p + "\0" for p in _paths(hits))
    if fmt == "table":
        return to_table(hits, photo, near) + ("\n" if hits else "")
    raise ValueError(f"unknown format {fmt!r}")


def _paths(hits: Sequence[Hit]) -> list[str]:
    """Each hit's path once, in the hits' order (a video's frames share one)."""
    return list(dict.fromkeys(h.path for h in hits))


def to_json(hits: Sequence[Hit]) -> str:
    return json.dumps([h.to_dict() for h in hits], indent=2)


def csv_columns(hits: Sequence[Hit]) -> list[str]:
    cols = list(HIT_CORE_FIELDS)
    for h in hits:
        for name in h.to_dict():
            if name not in cols:
                cols.append(name)
    return cols


def to_csv(hits: Sequence[Hit]) -> str:
    buf = io.StringIO()
    cols = csv_columns(hits)
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for h in hits:
        d = h.to_dict()
        w.writerow([_csv_cell(d.get(c)) for c in cols])
    return buf.getvalue()


def _csv_cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict | list):
        return json.dumps(v)
    if isinstance(v, float):
        return repr(v)
    return str(v)


def read_csv(text: str) -> list[dict]:
    """Hit objects back from ``to_csv`` output (types restored, empty cells dropped)."""
    out = []
    for row in csv.DictReader(io.StringIO(text)):
        d: dict = {}
        for k, v in row.items():
            if v == "":
                if k in HIT_CORE_FIELDS:
                    d[k] = None
                continue
            if k in _INT_FIELDS:
                d[k] = int(v)
            elif k in _FLOAT_FIELDS:
                d[k] = float(v)
            elif k in _BOOL_FIELDS:
                d[k] = v == "true"
            elif k in _JSON_FIELDS:
                d[k] = json.loads(v)
            else:
                d[k] = v
        out.append(d)
    return out


PHOTO_COLUMNS = ("date", "taken", "camera", "km")


def photo_columns(selection: Selection) -> list[str]:
    """The photo columns a table shows because the search sorted or filtered by them:
    a list sorted by date with no date in it cannot be checked by eye."""
    shown = {
        "date": selection.sort == "date",
        "taken": selection.sort == "taken" or bool(selection.taken),
        "camera": bool(selection.camera),
        "km": bool(selection.near),
    }
    return [c for c in PHOTO_COLUMNS if shown[c]]


def _photo_cells(h: Hit, photo: Sequence[str], near) -> dict:
    from datetime import datetime

    cells: dict = {}
    if "date" in photo:  # the file's mtime, local time: what --sort date orders by
        t = datetime.fromtimestamp(h.mtime_ns / 1e9) if h.mtime_ns is not None else None
        cells["date"] = t.strftime("%Y-%m-%d %H:%M") if t else ""
    if "taken" in photo:  # the camera's wall clock, as --taken compares it
        key = (h.taken_key or "")[:16]
        cells["taken"] = key + (" (mtime)" if key and h.taken_source == "mtime" else "")
    if "camera" in photo:
        cells["camera"] = h.camera or ""
    if "km" in photo:
        cells["km"] = None
        if near is not None and h.gps:
            import numpy as np

            from wherein.search.photofilter import haversine_km

            lat, lon = np.array([h.gps["lat"]]), np.array([h.gps["lon"]])
            cells["km"] = float(haversine_km(lat, lon, near.lat, near.lon)[0])
    return cells


def to_table(hits: Sequence[Hit], photo: Sequence[str] = (), near: str | None = None) -> str:
    """rank, probability, score, pixels, the photo columns asked for, path (and masks).

    near: the --near point, for the km column."""
    from wherein.search.photofilter import parse_near

    point = parse_near(near) if "km" in photo and near else None
    has_mask = any(h.mask_path for h in hits)
    rows = []
    for h in hits:
        row = {
            "rank": h.rank,
            "prob": h.probability,
            "score": h.score,
            "pixels": f"{h.width}x{h.height}" if h.width and h.height else "",
            **_photo_cells(h, photo, point),
            "path": printable(h.path) + _at(h) + ("" if h.exists else "  [missing]"),
        }
        if has_mask:
            row["mask"] = h.mask_area
            row["mask_path"] = printable(h.mask_path or "")
        rows.append(row)
    cols = ["rank", "prob", "score", "pixels", *[c for c in PHOTO_COLUMNS if c in photo], "path"]
    return table(rows, cols + (["mask", "mask_path"] if has_mask else []))


def _at(h: Hit) -> str:
    """' @ 1:23' after a timed file's path (a video's), ' @ x0,y0-x1,y1' after a photo's with
    a region: where in it to look."""
    if h.region is not None:
        x0, y0, x1, y1 = (round(v) for v in h.region)
        return f" @ {x0},{y0}-{x1},{y1}"
    if h.time is None:
        return ""
    from wherein.search.videos import clock

    return f" @ {clock(h.time)}"


def table(rows: list[dict], columns: list[str], width: int | None = None) -> str:
    """An aligned plain-text table (numbers right-aligned); "" for no rows.

    width: no line longer than this where it can be done: the widest text columns are
    narrowed and their cells wrapped onto more lines at spaces. A number, a column's
    name and a word (a file name) are never cut.
    """
    if not rows:
        return ""
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    numeric = [
        all(isinstance(r.get(c), int | float) or r.get(c) is None for r in rows) for c in columns
    ]
    if width is not None:
        floors = [
            widths[i] if numeric[i] else max(len(c), *(_longest_word(row[i]) for row in cells))
            for i, c in enumerate(columns)
        ]
        _narrow(widths, floors, width)

    def line(vals):
        return "  ".join(
            v.rjust(w) if num else v.ljust(w) for v, w, num in zip(vals, widths, numeric)
        ).rstrip()

    out = [line(columns), line(["-" * w for w in widths])]
    for row in cells:
        parts = [_wrap(v, w) for v, w in zip(row, widths)]
        for k in range(max(map(len, parts))):
            out.append(line([p[k] if k < len(p) else "" for p in parts]))
    return "\n".join(out)


def _narrow(widths: list[int], floors: list[int], width: int) -> None:
    """Narrow the widest column, one character at a time, until the row fits in width."""
    while sum(widths) + 2 * (len(widths) - 1) > width:
        wide = [i for i, w in enumerate(widths) if w > floors[i]]
        if not wide:
            return  # as narrow as it goes
        widths[max(wide, key=lambda i: widths[i])] -= 1


def _longest_word(text: str) -> int:
    return max(map(len, _kept_whole(text).split()), default=0)


def _wrap(text: str, width: int) -> list[str]:
    return [text] if len(text) <= width else wrap(text, width) or [""]


_NBSP = "\xa0"


def wrap(text: str, width: int, indent: str = "", hang: str = "") -> list[str]:
    """textwrap.wrap that keeps a bracketed group whole: float32[1, 485, 768] is not split
    (a group longer than the line is cut anyway)."""
    lines = textwrap.wrap(
        _kept_whole(text),
        width,
        initial_indent=indent,
        subsequent_indent=hang,
        break_on_hyphens=False,
    )
    return [ln.replace(_NBSP, " ") for ln in lines]


def _kept_whole(text: str) -> str:
    return re.sub(r"\[[^\]]*\]", lambda m: m.group(0).replace(" ", _NBSP), text)


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4f}"
    return str(v)


_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F)} | {
    0x09: "\\t",
    0x0A: "\\n",
    0x0D: "\\r",
}


def printable(path: str) -> str:
    """A path safe for one table cell: control characters and undecodable bytes escaped.

    A file name may hold a newline or an escape sequence; printed raw it would break
    the table's lines or drive the terminal. Undecodable bytes show as ``\\xNN``.
    """
    text = os.fsencode(path).decode("utf-8", "backslashreplace")
    return text.translate(_CONTROL)


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


__all__ = [
    "FORMATS",
    "HIT_MASK_FIELDS",
    "PHOTO_COLUMNS",
    "csv_columns",
    "human_bytes",
    "photo_columns",
    "printable",
    "read_csv",
    "render",
    "table",
    "to_csv",
    "to_json",
    "to_table",
    "wrap",
]
