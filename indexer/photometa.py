"""Photo metadata from EXIF: when, with what camera and lens, where, which way up.

Read with Pillow from the file's header only (``Image.open`` does not decode
pixels): IFD0 for make, model and orientation, the Exif IFD (0x8769) for the
date taken and the lens, the GPS IFD (0x8825) for latitude and longitude. Any
file Pillow opens works (JPEG, PNG/WebP with an eXIf chunk, TIFF, HEIC through
pillow-heif). Malformed values are dropped one by one, never fatal: a photo
with a broken GPS block still has its date.

``taken`` is the camera's local wall-clock time as "YYYY-MM-DD HH:MM:SS" (what
EXIF stores), which sorts and compares as text; ``taken_offset`` ("+02:00")
is set only when the camera wrote OffsetTimeOriginal.
"""

from __future__ import annotations

import io
import math
import os
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from PIL import Image, UnidentifiedImageError

from wherein.indexer import imaging  # noqa: F401  (registers the HEIC/HEIF opener)

EXIF_IFD = 0x8769
GPS_IFD = 0x8825
_MAKE, _MODEL, _ORIENTATION = 0x010F, 0x0110, 0x0112
_DATE_ORIGINAL, _DATE_DIGITIZED = 0x9003, 0x9004
_OFFSET_ORIGINAL, _OFFSET_DIGITIZED = 0x9011, 0x9012
_LENS_MODEL = 0xA434
_LAT_REF, _LAT, _LON_REF, _LON = 1, 2, 3, 4

_DATE = re.compile(r"^\s*(\d{4})[:\-](\d{2})[:\-](\d{2})[ T](\d{2}):(\d{2}):(\d{2})")
_OFFSET = re.compile(r"^\s*([+-])(\d{2}):?(\d{2})\s*$")


@dataclass(frozen=True)
class PhotoMeta:
    taken: str | None = None  # "YYYY-MM-DD HH:MM:SS", camera local time
    taken_offset: str | None = None  # "+HH:MM" when the camera recorded it
    make: str | None = None
    model: str | None = None
    lens: str | None = None
    lat: float | None = None
    lon: float | None = None
    orientation: int | None = None  # EXIF 1-8

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_photo_meta(path: str | Path) -> PhotoMeta | None:
    """The metadata of one file: empty when it has no EXIF, None when it cannot be read now."""
    try:
        with Image.open(path) as im:
            return _meta_of(im)
    except OSError as exc:
        if isinstance(exc, UnidentifiedImageError):
            return PhotoMeta()  # indexed, yet Pillow cannot parse its header: no metadata
        return None  # gone, unmounted, no permission: try again on a later run
    except Exception:  # metadata is best effort; the indexer judges the pixels
        return PhotoMeta()


def photo_meta_from_bytes(data: bytes) -> PhotoMeta:
    """The metadata in a file's bytes already in memory (the index run's read): a header
    parse, no second open of the file. Empty when there is none or it cannot be parsed."""
    try:
        with Image.open(io.BytesIO(data)) as im:
            return _meta_of(im)
    except Exception:  # metadata is best effort; the indexer judges the pixels
        return PhotoMeta()


def _meta_of(im: Image.Image) -> PhotoMeta:
    exif = im.getexif()
    base = dict(exif)
    sub = _ifd(exif, EXIF_IFD)
    gps = _ifd(exif, GPS_IFD)
    taken, offset = _date(sub.get(_DATE_ORIGINAL)), _offset(sub.get(_OFFSET_ORIGINAL))
    if taken is None:
        taken, offset = _date(sub.get(_DATE_DIGITIZED)), _offset(sub.get(_OFFSET_DIGITIZED))
    lat, lon = _gps(gps)
    orientation = base.get(_ORIENTATION)
    lens = _text(sub.get(_LENS_MODEL))
    return PhotoMeta(
        taken=taken,
        taken_offset=offset if taken else None,
        make=_text(base.get(_MAKE)),
        model=_text(base.get(_MODEL)),
        lens=lens,
        lat=lat,
        lon=lon,
        orientation=int(orientation)
        if isinstance(orientation, int) and 1 <= orientation <= 8
        else None,
    )


def _ifd(exif: Image.Exif, tag: int) -> dict[int, Any]:
    try:
        return dict(exif.get_ifd(tag))
    except Exception:  # a broken pointer loses that block only
        return {}


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return None
    value = " ".join(value.replace("\x00", " ").split())
    return value or None


def _date(value: Any) -> str | None:
    text = _text(value)
    m = _DATE.match(text or "")
    if not m:
        return None
    y, mo, d, h, mi, s = (int(g) for g in m.groups())
    # "0000:00:00 00:00:00" and other placeholders cameras write when the clock is unset.
    if not (1800 <= y <= 2999 and 1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and s < 61):
        return None
    return f"{y:04d}-{mo:02d}-{d:02d} {h:02d}:{mi:02d}:{min(s, 59):02d}"


def _offset(value: Any) -> str | None:
    m = _OFFSET.match(_text(value) or "")
    if not m or int(m.group(2)) > 14 or int(m.group(3)) >= 60:
        return None
    return f"{m.group(1)}{m.group(2)}:{m.group(3)}"


def _degrees(dms: Any) -> float | None:
    try:
        d, m, s = (float(x) for x in dms)
    except (TypeError, ValueError, ZeroDivisionError):
        return None
    value = d + m / 60 + s / 3600
    return value if math.isfinite(value) else None


def _gps(gps: dict[int, Any]) -> tuple[float | None, float | None]:
    lat, lon = _degrees(gps.get(_LAT)), _degrees(gps.get(_LON))
    if lat is None or lon is None:
        return None, None
    if (_text(gps.get(_LAT_REF)) or "N").upper().startswith("S"):
        lat = -lat
    if (_text(gps.get(_LON_REF)) or "E").upper().startswith("W"):
        lon = -lon
    # 0,0 is what receivers without a fix write; out-of-range values are corrupt.
    if (lat == 0 and lon == 0) or not (-90 <= lat <= 90 and -180 <= lon <= 180):
        return None, None
    return round(lat, 7), round(lon, 7)


def fill_photos(
    catalog,
    workers: int = 4,
    batch: int = 256,
    progress: Callable[[int], object] | None = None,
    under: Sequence[str] | None = None,
) -> int:
    """Read the metadata of every image that lacks it (new, changed, or indexed before the
    photos table existed) and store it; returns the rows written.

    Nothing is embedded: this is the backfill of an older index too. A file whose size or
    mtime no longer match its row is left for the run that re-indexes it; a file that
    cannot be read now is tried again next time. Each batch commits on its own, so an
    interrupted fill keeps what it stored. under: only images in or below these folders
    (an index run's roots: a run over one folder never scans the whole catalog).
    """
    todo = catalog.photos_to_read(under)
    written = 0
    with ThreadPoolExecutor(max(1, workers), thread_name_prefix="wherein-exif") as pool:
        for start in range(0, len(todo), batch):
            chunk = todo[start : start + batch]
            rows = [r for r in pool.map(_photo_row, chunk) if r is not None]
            written += catalog.store_photos(rows)
            if progress:
                progress(len(chunk))
    return written


def _photo_row(item: tuple[int, str, int, int]) -> dict[str, Any] | None:
    file_id, path, size, mtime_ns = item
    try:
        st = os.stat(path)
    except OSError:
        return None
    if (st.st_size, st.st_mtime_ns) != (size, mtime_ns):
        return None  # changed since it was indexed: the next index run handles it
    meta = read_photo_meta(path)
    if meta is None:
        return None
    return {"image_id": file_id, "size": size, "mtime_ns": mtime_ns, **meta.as_dict()}
