"""The model's 352x352 probability map at a photo's size, without building the photo-size map.

The photo-size map is the bilinear stretch of the small one (the input was
squashed, so no aspect fix). Along a row of the stretched map the values are
linear between two source columns, so where a row crosses the threshold is one
division per crossing, and the sum of the values over any stretch of the row is
a difference of two prefix sums over source columns. Thresholding, labelling,
area and mean probability therefore cost (photo rows x 352), not photo pixels,
and give the same mask as thresholding `stretch(...)` (up to float rounding at
pixels within ~1e-6 of the threshold).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image

from wherein.search.localize.regions import Runs


def _coords(n_out: int, n_in: int) -> np.ndarray:
    """Source coordinate of each output pixel centre (half-pixel-centred), clamped at the edges."""
    x = (np.arange(n_out, dtype=np.float64) + 0.5) * (n_in / n_out) - 0.5
    return np.clip(x, 0, n_in - 1)


def _axis(n_out: int, n_in: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bilinear taps along one axis: left source index, right source index, weight of the right."""
    x = _coords(n_out, n_in)
    i0 = np.floor(x).astype(np.intp)
    return i0, np.minimum(i0 + 1, n_in - 1), (x - i0).astype(np.float32)


def stretch(prob: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Bilinear resize of a map to size=(W, H): the squash the input went through, undone.

    Enlarging is separable numpy (equal to Pillow's BILINEAR within 1e-6, ~3x
    faster on a camera photo); shrinking either side goes through Pillow, which
    antialiases.
    """
    w, h = size
    prob = np.asarray(prob, dtype=np.float32)
    if prob.shape == (h, w):
        return prob
    if w < prob.shape[1] or h < prob.shape[0]:
        return np.asarray(
            Image.fromarray(prob).resize((w, h), Image.Resampling.BILINEAR), dtype=np.float32
        )
    c0, c1, wc = _axis(w, prob.shape[1])
    r0, r1, wr = _axis(h, prob.shape[0])
    cols = prob[:, c0] + (prob[:, c1] - prob[:, c0]) * wc  # [h_in, W]
    out = cols[r0]
    out += (cols[r1] - out) * wr[:, None]
    return out


def enlarges(shape: tuple[int, ...], size: tuple[int, int]) -> bool:
    """True when stretching a map of this shape to size=(W, H) enlarges (or keeps) both sides."""
    return size[0] >= shape[1] and size[1] >= shape[0]


@dataclass(frozen=True)
class Thresholded:
    runs: Runs  # inside pixels (p > threshold) at the photo's size
    inside_sum: float  # sum of the stretched probabilities over those pixels


def threshold_runs(prob: np.ndarray, size: tuple[int, int], threshold: float) -> Thresholded:
    """The runs of `stretch(prob, size) > threshold` and the probability summed over them.

    Only for enlarging (`enlarges`): shrinking antialiases, which is not
    piecewise linear; a map smaller than 352 is cheap to build anyway.
    """
    prob = np.asarray(prob, dtype=np.float32)
    w, h = size
    h_in, w_in = prob.shape
    if not enlarges(prob.shape, size):
        raise ValueError(f"threshold_runs enlarges only: {w_in}x{h_in} -> {w}x{h}")
    r0, r1, wr = _axis(h, h_in)
    rows = prob[r0]
    rows += (prob[r1] - rows) * wr[:, None]  # [H, w_in]: each photo row at the source columns
    inside = rows > threshold
    padded = np.zeros((h, w_in + 2), dtype=bool)
    padded[:, 1:-1] = inside
    # Changes alternate start, end within every row (outside the map is outside): p = 0 is a
    # start at x = 0, p = w_in an end at x = W, else a crossing between columns p-1 and p.
    y, p = np.divmod(np.flatnonzero(padded[:, 1:] != padded[:, :-1]), w_in + 1)
    x = np.where(p == 0, 0.0, float(w))
    mid = (p > 0) & (p < w_in)
    ym, j = y[mid], p[mid] - 1
    a = rows[ym, j].astype(np.float64)
    b = rows[ym, j + 1].astype(np.float64)
    sx = j + (threshold - a) / (b - a)  # the source coordinate where the row meets the threshold
    x[mid] = (sx + 0.5) * (w / w_in) - 0.5  # ... as a photo x
    # A start is the first pixel strictly past the crossing, an end the first pixel not before it.
    starts, ends = x[0::2], x[1::2]
    x0 = np.clip(np.where(p[0::2] == 0, 0, np.floor(starts) + 1), 0, w).astype(np.int64)
    x1 = np.clip(np.where(p[1::2] == w_in, w, np.ceil(ends)), 0, w).astype(np.int64)
    runs = Runs.merged(y[0::2], x0, x1, w, h)
    return Thresholded(runs, _sum_over_runs(prob, runs))


def sum_over_runs(prob: np.ndarray, runs: Runs) -> float:
    """Sum of `stretch(prob, (runs.width, runs.height))` over the runs, at any size: from
    prefix sums when the stretch enlarges, else over the (small) stretched map."""
    if enlarges(prob.shape, (runs.width, runs.height)):
        return _sum_over_runs(prob, runs)
    soft = stretch(prob, (runs.width, runs.height))
    return float(soft[runs.to_mask()].sum(dtype=np.float64))


def _sum_over_runs(prob: np.ndarray, runs: Runs) -> float:
    """Sum of the stretched map over the runs, from prefix sums over the source rows only.

    Photo row y is (1 - wr) x source row r0 + wr x source row r1, so its prefix
    sum F_y(x) is the same mix of the two source rows' prefix sums G_r(x). Along
    x, photo column x takes (1 - wc) of source column c0 and wc of c1; grouping
    photo columns by c0, G_r(x) = (whole groups before c0[x]) + (the columns of
    x's group before x). A run [x0, x1) adds F_y(x1) - F_y(x0).
    """
    if len(runs.rows) == 0:
        return 0.0
    w, h = runs.width, runs.height
    h_in, w_in = prob.shape
    p64 = prob.astype(np.float64)
    sx = _coords(w, w_in)
    c0 = np.floor(sx).astype(np.intp)
    c1 = np.minimum(c0 + 1, w_in - 1)
    wc = sx - c0
    left, right = 1.0 - wc, wc
    # Whole groups: group g adds p[g] * sum(left) + p[g + 1] * sum(right); the last group's
    # right weights are all 0 (edge clamp).
    gl = np.bincount(c0, weights=left, minlength=w_in)
    gr = np.bincount(c0, weights=right, minlength=w_in)
    group = p64 * gl
    group[:, :-1] += p64[:, 1:] * gr[:-1]
    whole = np.zeros((h_in, w_in + 1))
    np.cumsum(group, axis=1, out=whole[:, 1:])
    # Partial group (x = W: no group; sentinel column w_in, weights 0).
    cl = np.concatenate([[0.0], np.cumsum(left)])
    cr = np.concatenate([[0.0], np.cumsum(right)])
    first = np.searchsorted(c0, c0)  # first photo column of each column's group
    part_l = np.append(cl[:-1] - cl[first], 0.0)
    part_r = np.append(cr[:-1] - cr[first], 0.0)
    g0 = np.append(c0, w_in)
    g1 = np.append(c1, w_in)
    padded = np.concatenate([p64, np.zeros((h_in, 1))], axis=1)

    def source_prefix(r: np.ndarray, x: np.ndarray) -> np.ndarray:
        return whole[r, g0[x]] + padded[r, g0[x]] * part_l[x] + padded[r, g1[x]] * part_r[x]

    sy = _coords(h, h_in)[runs.rows]
    r0 = np.floor(sy).astype(np.intp)
    r1 = np.minimum(r0 + 1, h_in - 1)
    wr = sy - r0

    def prefix(x: np.ndarray) -> np.ndarray:
        return (1.0 - wr) * source_prefix(r0, x) + wr * source_prefix(r1, x)

    return float((prefix(runs.x1) - prefix(runs.x0)).sum())
