"""Records passed between wherein's modules and printed by its outputs.

``Hit`` is one search result. Its JSON form (``Hit.to_dict()``) is described by
``schemas/hit.schema.json``: every output format (``--json``, ``--nl``, ``--csv``)
carries the same fields. The photo fields (``taken``, ``taken_source``, ``camera``,
``lens``, ``gps``) come from the catalog's EXIF table; ``taken`` falls back to
the file's mtime when a photo has no EXIF date. ``id`` is the file's catalog id;
``item_id`` the matched item's (a file yields items, each with its vector), located by
``kind`` ("photo" for a photo's items, "video" for a video's frame), ``time`` (seconds
into a video: its best frame's) and ``region`` (the box of a photo's region item, [x0, y0,
x1, y1] in the photo's pixels: a photo hit's best region, null when the whole photo matched
best; wherein.search.regions), null where they do not apply. A video hit also carries its ``duration`` and its ``moments``
(wherein.search.videos): the stretches of it that match, null for a photo. The mask fields are filled in by
``wherein.search.localize.masking.add_masks_to_hits`` when a search asks for masks; they
are left out of the JSON form while unset. ``extra`` holds fields added by later
features that are not declared here yet: they are merged into the JSON form.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from wherein.schemas import locations

HIT_SCHEMA_PATH = Path(__file__).with_name("hit.schema.json")
# `wherein status --json` (and /api/status, which adds the web app's caches to it), and
# `wherein index --json`: the reports of indexer/store/status.py and indexer/ingest/run.py.
STATUS_SCHEMA_PATH = Path(__file__).with_name("status.schema.json")
INDEX_RUN_SCHEMA_PATH = Path(__file__).with_name("index.schema.json")
EMBED_RUN_SCHEMA_PATH = Path(__file__).with_name("embed.schema.json")  # `wherein embed --json`
SEARCH_SCHEMA_PATH = Path(__file__).with_name("search.schema.json")  # service.search.SearchResult
# The service layer's results (search/service/): build-index, the curation summaries,
# optimize/pull, and the --watch lines of `wherein index --json`.
BUILD_INDEX_SCHEMA_PATH = Path(__file__).with_name("build-index.schema.json")
CURATE_SCHEMA_PATH = Path(__file__).with_name("curate.schema.json")
MODELS_SCHEMA_PATH = Path(__file__).with_name("models.schema.json")
WATCH_SCHEMA_PATH = Path(__file__).with_name("watch.schema.json")

# Always present in the JSON form, in this order (also the CSV column order).
HIT_CORE_FIELDS = (
    "rank",
    "path",
    "score",
    "probability",
    "width",
    "height",
    "id",
    "size",
    "mtime",
    "indexed_at",
    "sha256",
    "format",
    "exists",
    "taken",
    "taken_source",
    "camera",
    "lens",
    "gps",
    "item_id",
    "kind",
    "time",
    "region",
    # Added with videos: at the end, so the columns before them keep their places.
    "duration",
    "moments",
)
# A hit's kind is its file's media kind (the catalog's images.kind: "photo", "video", or any
# kind registered in wherein.indexer.kinds). A row that names no file kind (written before
# kinds) gets it from its item's kind: "image" a photo's whole item, "region" one of its
# regions, "frame" a video's.
HIT_KINDS = {"image": "photo", "region": "photo", "frame": "video"}
# The fields of one of a video hit's moments, in this order.
MOMENT_FIELDS = ("start", "end", "time", "score", "probability")
# Present only when set (masks).
HIT_MASK_FIELDS = (
    "mask_path",
    "overlay_path",
    "bbox",
    "mask_area",
    "mask_score",
    "mask_skipped",
)


def path_b64(path: str) -> str | None:
    """Base64 of a path's bytes when they are not valid UTF-8, else None.

    Paths arrive as Python gives them (``os.fsdecode``: undecodable bytes become lone
    surrogates), so ``os.fsencode`` gives back the name's exact bytes.
    """
    raw = os.fsencode(path)
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode("ascii")
    return None


def iso_time(mtime_ns: int | None) -> str | None:
    """The schemas' time format: ISO 8601, UTC, whole seconds, 'Z'."""
    if mtime_ns is None:
        return None
    return _iso_utc(mtime_ns)


# A search makes a Hit of each of up to 200 rows, mostly the same files search after search:
# formatting their times was a tenth of a web search's CPU.
@functools.lru_cache(maxsize=8192)
def _iso_utc(mtime_ns: int) -> str:
    t = datetime.fromtimestamp(mtime_ns / 1e9, tz=UTC)
    return t.isoformat(timespec="seconds").replace("+00:00", "Z")


@functools.lru_cache(maxsize=8192)
def _local_time(seconds: int, _zone: tuple) -> tuple[str, str]:
    """(ISO 8601 with offset, "YYYY-MM-DD HH:MM:SS") of a time in this machine's time zone;
    _zone: the zone in force (time.tzset() changes it), part of the cache key."""
    local = datetime.fromtimestamp(seconds).astimezone()
    return local.isoformat(timespec="seconds"), local.strftime("%Y-%m-%d %H:%M:%S")


def taken_fields(row: dict[str, Any]) -> tuple[str | None, str | None, str | None]:
    """(taken, taken_source, sort key) of a catalog row (``Catalog.hit_rows``: its ``timed``
    is what the file's media kind says, asked by the indexer, as schemas cannot import it).

    A recorded time: the camera's local time, with its UTC offset when the camera recorded
    one ("2024-06-15T14:03:22+02:00", else "2024-06-15T14:03:22"); its source is "exif" for
    a photo, "container" for a file of a timed kind (a video: the creation time in its
    QuickTime/MP4 metadata, as the kind's probe read it).
    None recorded: the file's mtime in this machine's time zone, with that offset. The sort
    key is the local wall-clock time "YYYY-MM-DD HH:MM:SS" either way (what --taken filters
    on).
    """
    taken = row.get("taken")
    if taken:
        offset = row.get("taken_offset") or ""
        source = "container" if row.get("timed") else "exif"
        return taken.replace(" ", "T") + offset, source, taken
    mtime_ns = row.get("mtime_ns")
    if mtime_ns is None:
        return None, None, None
    zone = (time.tzname, time.timezone, time.altzone, time.daylight)
    iso, key = _local_time(mtime_ns // 1_000_000_000, zone)
    return iso, "mtime", key


def camera_of(row: dict[str, Any]) -> str | None:
    """'Canon' + 'Canon EOS R5' -> 'Canon EOS R5'; 'SONY' + 'ILCE-7M3' -> 'SONY ILCE-7M3'."""
    make, model = row.get("make"), row.get("model")
    if not model:
        return make or None
    if not make or model.lower().startswith(make.split()[0].lower()):
        return model
    return f"{make} {model}"


def gps_of(row: dict[str, Any]) -> dict[str, float] | None:
    lat, lon = row.get("lat"), row.get("lon")
    return None if lat is None or lon is None else {"lat": lat, "lon": lon}


@dataclass
class Hit:
    """One image that matched a query.

    rank: 1-based position by score (the relevance order), kept when the list is
    re-sorted by date/path/size. score: cosine between the image embedding and the
    combined query vector. probability: SigLIP's calibrated sigmoid of the image's
    cosine with the query's text part (None when the query has no text term).
    exists: False when the file was deleted or moved since it was indexed.
    """

    rank: int
    path: str
    score: float
    probability: float | None
    width: int | None
    height: int | None
    id: int
    size: int | None = None
    mtime: str | None = None  # ISO 8601, UTC, of the file's mtime when indexed
    indexed_at: str | None = None
    sha256: str | None = None
    format: str | None = None
    exists: bool = True
    # -- photo metadata (EXIF) -------------------------------------------
    taken: str | None = None  # ISO 8601 local time (+offset when known)
    taken_source: str | None = None  # "exif", "container" (a timed kind's: a video's) or "mtime"
    camera: str | None = None
    lens: str | None = None
    gps: dict[str, float] | None = None  # {"lat": ..., "lon": ...}
    # -- the item matched (a file yields items; a photo one, of kind "photo") ----
    item_id: int | None = None
    kind: str | None = None
    time: float | None = None  # seconds into a video (a frame)
    region: list[float] | None = None  # [x0, y0, x1, y1] in the photo's pixels (a region)
    # -- a video (kind "video"): time is its best frame's -------------------------
    duration: float | None = None  # seconds
    moments: list[dict[str, Any]] | None = None  # MOMENT_FIELDS each; None for a frame hit
    mtime_ns: int | None = field(default=None, repr=False)  # for sorting; not in the JSON form
    taken_key: str | None = field(default=None, repr=False)  # local "YYYY-MM-DD HH:MM:SS"
    # -- masks ---------------------------------------------------------
    mask_path: str | None = None
    overlay_path: str | None = None
    bbox: dict[str, Any] | None = None  # e.g. {"largest": [x0,y0,x1,y1], "union": [x0,y0,x1,y1]}
    mask_area: float | None = None  # fraction of the image covered by the mask
    mask_score: float | None = None
    mask_skipped: str | None = None  # why a mask asked for was not made (the file unreadable)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_row(
        cls,
        row: dict[str, Any],
        rank: int,
        score: float,
        probability: float | None = None,
        check_exists: bool = True,
        extra: dict[str, Any] | None = None,
    ) -> Hit:
        """A Hit from a catalog row (``Catalog.hit_rows``; a ``rows_by_ids`` row, which
        names no item, gives a hit without one)."""
        kind = row.get("file_kind") or row.get("kind")
        hit_kind = HIT_KINDS.get(kind, kind) if kind is not None else None
        taken, source, key = taken_fields(row)
        return cls(
            rank=rank,
            path=row["path"],
            score=float(score),
            probability=None if probability is None else float(probability),
            width=row["width"],
            height=row["height"],
            id=int(row["id"]),
            size=row["size"],
            mtime=iso_time(row["mtime_ns"]),
            indexed_at=row["indexed_at"],
            sha256=row["sha256"],
            format=row["format"],
            exists=locations.exists(row["path"]) if check_exists else True,
            taken=taken,
            taken_source=source,
            camera=camera_of(row),
            lens=row.get("lens"),
            gps=gps_of(row),
            item_id=row.get("item_id"),
            kind=hit_kind,
            time=row.get("t"),
            region=row.get("box"),
            duration=row.get("duration"),
            mtime_ns=row["mtime_ns"],
            taken_key=key,
            extra=dict(extra or {}),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: core fields always, mask fields and extra when set."""
        out: dict[str, Any] = {name: getattr(self, name) for name in HIT_CORE_FIELDS}
        for name in HIT_MASK_FIELDS:
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        out.update(self.extra)
        lossless = path_b64(self.path)
        if lossless is not None:
            # JSON text must be valid Unicode: a readable path (U+FFFD for the bad bytes)
            # plus the exact bytes, so that no consumer gets a name it cannot open.
            out["path"] = os.fsencode(self.path).decode("utf-8", "replace")
            out["path_b64"] = lossless
        return out

    def replace(self, **changes: Any) -> Hit:
        """A copy with these fields changed: dataclasses.replace's answer (a shallow copy;
        unknown names refused) without its call of __init__ with every field: a web page
        replaces its 48 hits' exists, which took 3 ms of CPU that way (GIL time every
        search thread waits for)."""
        unknown = changes.keys() - _HIT_FIELDS
        if unknown:
            raise TypeError(f"Hit has no field {sorted(unknown)[0]!r}")
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.__dict__.update(changes)
        return new


_HIT_FIELDS = frozenset(f.name for f in dataclasses.fields(Hit))
