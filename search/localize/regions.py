"""Connected regions of a mask held as horizontal runs.

A run is one row's stretch of inside pixels [x0, x1) (x1 exclusive). Runs are
the mask's outline, not its pixels: labelling, areas and boxes cost what the
outline costs, so a photo-size mask never has to exist as a pixel array to be
measured (see `probmap.threshold_runs`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Region:
    area: int  # pixels
    bbox: tuple[int, int, int, int]  # x0, y0, x1, y1 (exclusive)


@dataclass(frozen=True)
class Runs:
    """Inside runs of a width x height mask, sorted by (row, x0), disjoint and never adjacent."""

    rows: np.ndarray  # int64 [n]
    x0: np.ndarray  # int64 [n]
    x1: np.ndarray  # int64 [n], exclusive
    width: int
    height: int

    @property
    def area(self) -> int:
        return int((self.x1 - self.x0).sum())

    @classmethod
    def of_mask(cls, mask: np.ndarray) -> Runs:
        mask = np.asarray(mask, dtype=bool)
        h, w = mask.shape
        padded = np.zeros((h, w + 2), dtype=bool)
        padded[:, 1:-1] = mask
        # A change between columns j-1 and j of the mask (outside is False): in row-major
        # order changes alternate start, end, start, end... within every row.
        change = np.flatnonzero(padded[:, 1:] != padded[:, :-1])
        rows, x0 = np.divmod(change[0::2], w + 1)
        x1 = change[1::2] - rows * (w + 1)
        return cls(rows, x0, x1, w, h)

    @classmethod
    def merged(cls, rows, x0, x1, width: int, height: int) -> Runs:
        """Runs from sorted, non-overlapping candidates: empty ones dropped, touching ones joined
        (labelling joins runs across rows only, so two touching runs in a row must be one)."""
        keep = x1 > x0
        rows, x0, x1 = rows[keep], x0[keep], x1[keep]
        if len(rows) > 1:
            joins = (rows[1:] == rows[:-1]) & (x0[1:] == x1[:-1])
            if joins.any():
                first = np.concatenate([[True], ~joins])  # a run that starts a joined group
                last = np.concatenate([~joins, [True]])  # a run that ends one
                rows, x0, x1 = rows[first], x0[first], x1[last]
        return cls(rows, x0, x1, width, height)

    def shifted(self, dx: int, dy: int, width: int, height: int) -> Runs:
        """These runs moved by (dx, dy) into a width x height mask (a crop's runs in its photo)."""
        return Runs(self.rows + dy, self.x0 + dx, self.x1 + dx, width, height)

    def without_boxes(self, boxes) -> Runs:
        """These runs less every [x0, y0, x1, y1) box (a run a box cuts keeps its two ends)."""
        rows, x0, x1 = self.rows, self.x0, self.x1
        for bx0, by0, bx1, by1 in boxes:
            cut = (rows >= by0) & (rows < by1) & (x0 < bx1) & (x1 > bx0)
            if not cut.any():
                continue
            left = cut & (x0 < bx0)
            right = cut & (x1 > bx1)
            rows = np.concatenate([rows[~cut], rows[left], rows[right]])
            x0, x1 = (
                np.concatenate([x0[~cut], x0[left], np.full(int(right.sum()), bx1)]),
                np.concatenate([x1[~cut], np.full(int(left.sum()), bx0), x1[right]]),
            )
        order = np.lexsort((x0, rows))
        return Runs.merged(rows[order], x0[order], x1[order], self.width, self.height)

    @classmethod
    def union(cls, parts: list[Runs], width: int, height: int) -> Runs:
        """The runs of disjoint parts of one width x height mask, as one (touching runs join)."""
        rows = np.concatenate([p.rows for p in parts]).astype(np.int64)
        x0 = np.concatenate([p.x0 for p in parts]).astype(np.int64)
        x1 = np.concatenate([p.x1 for p in parts]).astype(np.int64)
        order = np.lexsort((x0, rows))
        return cls.merged(rows[order], x0[order], x1[order], width, height)

    def to_mask(self) -> np.ndarray:
        """The bool [height, width] mask these runs describe (one np.repeat: cost ~ runs + pixels/8)."""
        w, h = self.width, self.height
        if len(self.rows) == 0:
            return np.zeros((h, w), dtype=bool)
        start = self.rows * w + self.x0  # row-major flat index; a run never wraps to the next row
        end = self.rows * w + self.x1
        lengths = np.empty(2 * len(start) + 1, dtype=np.int64)
        lengths[0] = start[0]
        lengths[1:-1:2] = end - start  # inside
        lengths[2:-1:2] = start[1:] - end[:-1]  # the gap before the next run (0 across a row end)
        lengths[-1] = h * w - end[-1]
        values = np.zeros(len(lengths), dtype=bool)
        values[1::2] = True
        return np.repeat(values, lengths).reshape(h, w)


def regions(mask: np.ndarray) -> list[Region]:
    """4-connected regions of a boolean mask, largest first."""
    return regions_of_runs(Runs.of_mask(mask))


def regions_of_runs(runs: Runs) -> list[Region]:
    """4-connected regions, largest first (ties: topmost, then leftmost)."""
    rows, x0, x1, w, h = runs.rows, runs.x0, runs.x1, runs.width, runs.height
    n = len(rows)
    if n == 0:
        return []
    # Runs overlap vertically (4-connectivity) when a0 < b1 and b0 < a1 on adjacent rows.
    stride = w + 1
    start_key = rows * stride + x0
    end_key = rows * stride + x1
    lo = np.searchsorted(end_key, (rows + 1) * stride + x0, side="right")
    hi = np.searchsorted(start_key, (rows + 1) * stride + x1, side="left")
    count = np.maximum(hi - lo, 0)
    a = np.repeat(np.arange(n), count)
    b = np.repeat(lo, count) + (np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count))
    label = _components(n, a, b)
    # Labels are each component's smallest run index (a root labels itself): number the roots.
    roots = label == np.arange(n)
    k = int(roots.sum())
    comp = (np.cumsum(roots) - 1)[label]
    area = np.bincount(comp, weights=x1 - x0, minlength=k).astype(np.int64)
    bx0 = np.full(k, w)
    by0 = np.full(k, h)
    bx1 = np.zeros(k, dtype=np.int64)
    by1 = np.zeros(k, dtype=np.int64)
    np.minimum.at(bx0, comp, x0)
    np.minimum.at(by0, comp, rows)
    np.maximum.at(bx1, comp, x1)
    np.maximum.at(by1, comp, rows + 1)
    order = np.lexsort((bx0, by0, -area))
    return [
        Region(int(area[i]), (int(bx0[i]), int(by0[i]), int(bx1[i]), int(by1[i]))) for i in order
    ]


def _components(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Connected components of an edge list: each node gets the smallest node id of its component.

    FastSV (hooking plus full pointer jumping): every round hooks each node and
    its parent onto the smaller parent across each edge, then flattens the
    forest to stars; a handful of rounds even for snake-like regions (plain
    min-label propagation needs one round per bend). Labels only ever decrease
    to ids of the same component; at the fixpoint both ends of every edge share
    the star's root, the component's smallest id.
    """
    f = np.arange(n)
    while True:
        fa, fb = f[a], f[b]
        g = f.copy()
        np.minimum.at(g, fa, fb)
        np.minimum.at(g, fb, fa)
        np.minimum.at(g, a, fb)
        np.minimum.at(g, b, fa)
        while True:
            gg = g[g]
            if np.array_equal(gg, g):
                break
            g = gg
        if np.array_equal(g, f):
            return f
        f = g
