"""Unit-length rows: every embedding wherein compares is normalised the same way."""

from __future__ import annotations

import numpy as np


def unit_rows(v: np.ndarray) -> np.ndarray:
    """float32, contiguous, each row (or a single vector) scaled to length 1; zeros stay zero."""
    v = np.ascontiguousarray(v, dtype=np.float32)
    return v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12)
