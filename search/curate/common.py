"""Shared pieces of the curation modules: catalog rows -> Hits, unit vectors."""

from __future__ import annotations

from typing import Any

import numpy as np

from wherein.schemas.records import Hit


def unit(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=np.float32)
    return v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12)


def hit_from_row(
    row: dict[str, Any],
    rank: int,
    score: float,
    probability: float | None = None,
    extra: dict[str, Any] | None = None,
) -> Hit:
    """A Hit from a Catalog.rows_by_ids row (the same fields `wherein search` fills)."""
    return Hit.from_row(row, rank, score, probability, extra=extra)
