"""Shared pieces of the curation modules: catalog rows -> Hits, unit vectors."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any

import numpy as np

from wherein.schemas.records import Hit


def unit(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=np.float32)
    return v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12)


def iso(mtime_ns: int | None) -> str | None:
    if mtime_ns is None:
        return None
    t = datetime.fromtimestamp(mtime_ns / 1e9, tz=UTC)
    return t.isoformat(timespec="seconds").replace("+00:00", "Z")


def hit_from_row(
    row: dict[str, Any],
    rank: int,
    score: float,
    probability: float | None = None,
    extra: dict[str, Any] | None = None,
) -> Hit:
    """A Hit from a Catalog.rows_by_ids row (the same fields `wherein search` fills)."""
    return Hit(
        rank=rank,
        path=row["path"],
        score=float(score),
        probability=None if probability is None else float(probability),
        width=row["width"],
        height=row["height"],
        id=int(row["id"]),
        size=row["size"],
        mtime=iso(row["mtime_ns"]),
        indexed_at=row["indexed_at"],
        sha256=row["sha256"],
        format=row["format"],
        exists=os.path.exists(row["path"]),
        mtime_ns=row["mtime_ns"],
        extra=dict(extra or {}),
    )
