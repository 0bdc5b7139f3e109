"""One order for ranked results, the same on every CPU.

A float32 dot product of two 768-dimensional vectors differs in its last bits with the
SIMD path BLAS or FAISS picks (SSE, AVX2, AVX-512: about 1e-8 to 1e-7), so ordering by the
raw score lets near-equal hits swap places from one machine to the next. wherein therefore

- computes exact scores in float64 from the catalog's float32 vectors (the products are
  exact, the sums off by ~1e-16, so the value hardly depends on the summation order), and
- ranks by the score rounded to ``SCORE_DECIMALS`` decimal places, best first; scores
  equal at that precision rank by catalog id, smallest first.

Every ranked output (search and its filters, select, unique, dupes, labels, the web app
and the exports made from these) orders through ``rank_order``.
"""

from __future__ import annotations

import numpy as np

SCORE_DECIMALS = 6
# Thresholds (--min-score, --min-probability, --threshold) admit a score this far below:
# a hit set exactly at the threshold stays in on every CPU.
THRESHOLD_SLACK = 10.0**-SCORE_DECIMALS


def tie_key(scores) -> np.ndarray:
    """Scores as they are compared for ranking: rounded to SCORE_DECIMALS (float64)."""
    return np.round(np.asarray(scores, dtype=np.float64), SCORE_DECIMALS)


def rank_order(scores, ids) -> np.ndarray:
    """Positions of scores best first; equal to SCORE_DECIMALS places: smaller id first."""
    return np.lexsort((np.asarray(ids, dtype=np.int64), -tie_key(scores)))


def exact_scores(vecs: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Cosines of unit rows with a unit query, in float64 (see the module docstring).

    In blocks of rows: a range search over a million images must not hold a float64 copy
    of all their vectors."""
    q = np.asarray(query, dtype=np.float64)
    if vecs.ndim == 1:
        return np.asarray(vecs, dtype=np.float64) @ q
    out = np.empty(len(vecs), dtype=np.float64)
    for start in range(0, len(vecs), _BLOCK):
        out[start : start + _BLOCK] = vecs[start : start + _BLOCK].astype(np.float64) @ q
    return out


_BLOCK = 16384
