"""Records passed between wherein's modules and printed by its outputs.

``Hit`` is one search result. Its JSON form (``Hit.to_dict()``) is described by
``schemas/hit.schema.json``: every output format (``--json``, ``--nl``, ``--csv``)
carries the same fields. The mask fields are filled in by
``wherein.search.localize.masking.add_masks_to_hits`` when a search asks for masks; they
are left out of the JSON form while unset. ``extra`` holds fields added by later
features that are not declared here yet: they are merged into the JSON form.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HIT_SCHEMA_PATH = Path(__file__).with_name("hit.schema.json")

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
)
# Present only when set (masks).
HIT_MASK_FIELDS = ("mask_path", "overlay_path", "bbox", "mask_area", "mask_score")


def iso_time(mtime_ns: int | None) -> str | None:
    """The schemas' time format: ISO 8601, UTC, whole seconds, 'Z'."""
    if mtime_ns is None:
        return None
    t = datetime.fromtimestamp(mtime_ns / 1e9, tz=UTC)
    return t.isoformat(timespec="seconds").replace("+00:00", "Z")


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
    mtime_ns: int | None = field(default=None, repr=False)  # for sorting; not in the JSON form
    # -- masks ---------------------------------------------------------
    mask_path: str | None = None
    overlay_path: str | None = None
    bbox: dict[str, Any] | None = None  # e.g. {"largest": [x0,y0,x1,y1], "union": [x0,y0,x1,y1]}
    mask_area: float | None = None  # fraction of the image covered by the mask
    mask_score: float | None = None
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
        """A Hit from a catalog row (``Catalog.rows_by_ids``)."""
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
            exists=os.path.exists(row["path"]) if check_exists else True,
            mtime_ns=row["mtime_ns"],
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
        return out

    def replace(self, **changes: Any) -> Hit:
        return dataclasses.replace(self, **changes)
