"""Polygons around a boolean mask: the outlines YOLO segmentation labels are made of.

Outlines run along pixel edges, so their vertices are pixel corners: pixel
(x, y) is the square [x, x+1] x [y, y+1]. Every boundary edge is directed with
the inside on its right (on screen, y down), which makes outer boundaries run
clockwise and hole boundaries counter-clockwise; the sign of the shoelace area
tells them apart. Where two inside pixels touch only at a corner, the trace
turns towards the inside, so such pixels end up in separate outlines: the same
4-connectivity as `masking.regions`.
"""

from __future__ import annotations

import numpy as np

# Direction codes, clockwise on screen: right, down, left, up.
_STEP = np.array([[1, 0], [0, 1], [-1, 0], [0, -1]], dtype=np.int64)


def outlines(mask: np.ndarray) -> list[np.ndarray]:
    """Every closed outline of mask as an [n, 2] int array of (x, y) corners, without repeats.

    Only the corners where the outline turns are kept. Outer boundaries have a
    positive `signed_area`, holes a negative one.
    """
    mask = np.asarray(mask, dtype=bool)
    h, w = mask.shape
    if not mask.any():
        return []
    pad = np.zeros((h + 2, w + 2), dtype=bool)
    pad[1:-1, 1:-1] = mask
    stride = w + 1  # corner (x, y) -> y * stride + x
    # Horizontal edges on corner row y between pixel rows y-1 and y.
    above, below = pad[:-1, 1:-1], pad[1:, 1:-1]  # [h+1, w]
    ys, xs = np.nonzero(below & ~above)  # inside below: go right
    starts = [ys * stride + xs]
    dirs = [np.zeros(len(ys), dtype=np.int64)]
    ys, xs = np.nonzero(above & ~below)  # inside above: go left, from x+1
    starts.append(ys * stride + xs + 1)
    dirs.append(np.full(len(ys), 2, dtype=np.int64))
    # Vertical edges on corner column x between pixel columns x-1 and x.
    left, right = pad[1:-1, :-1], pad[1:-1, 1:]  # [h, w+1]
    ys, xs = np.nonzero(left & ~right)  # inside left: go down
    starts.append(ys * stride + xs)
    dirs.append(np.ones(len(ys), dtype=np.int64))
    ys, xs = np.nonzero(right & ~left)  # inside right: go up, from y+1
    starts.append((ys + 1) * stride + xs)
    dirs.append(np.full(len(ys), 3, dtype=np.int64))
    start = np.concatenate(starts)
    direction = np.concatenate(dirs)
    end = start + _STEP[direction, 0] + _STEP[direction, 1] * stride

    # The edge that follows each edge: the one leaving its end corner. A corner has
    # one leaving edge, or two at a diagonal touch; then take the right turn.
    order = np.lexsort((direction, start))
    sorted_start = start[order]
    first = np.searchsorted(sorted_start, end, side="left")
    count = np.searchsorted(sorted_start, end, side="right") - first
    nxt = order[first]
    two = count == 2
    if two.any():
        a, b = order[first[two]], order[first[two] + 1]
        turn = (direction[two] + 1) % 4
        nxt[two] = np.where(direction[a] == turn, a, b)

    out: list[np.ndarray] = []
    seen = np.zeros(len(start), dtype=bool)
    for e0 in range(len(start)):
        if seen[e0]:
            continue
        loop = []
        e = e0
        while not seen[e]:
            seen[e] = True
            loop.append(e)
            e = int(nxt[e])
        edges = np.array(loop)
        d = direction[edges]
        turns = d != np.roll(d, 1)  # keep a corner only where the direction changes
        corners = start[edges[turns]]
        out.append(np.stack([corners % stride, corners // stride], axis=1))
    return out


def signed_area(poly: np.ndarray) -> float:
    """Shoelace area in y-down coordinates: > 0 for clockwise-on-screen (outer) outlines."""
    x, y = poly[:, 0].astype(np.float64), poly[:, 1].astype(np.float64)
    return float((x * np.roll(y, -1) - np.roll(x, -1) * y).sum() / 2)


def simplify(poly: np.ndarray, tolerance: float) -> np.ndarray:
    """Douglas-Peucker on a closed polygon: drop corners within tolerance pixels of the outline.

    The staircase of a slanted edge becomes one straight segment; the polygon is
    split at its first point and the point farthest from it, so it stays closed.
    """
    poly = np.asarray(poly, dtype=np.float64)
    if tolerance <= 0 or len(poly) <= 4:
        return poly
    far = int(np.argmax(((poly - poly[0]) ** 2).sum(axis=1)))
    ring = np.vstack([poly, poly[:1]])
    keep = np.zeros(len(ring), dtype=bool)
    keep[[0, far, len(ring) - 1]] = True
    stack = [(0, far), (far, len(ring) - 1)]
    while stack:
        i, j = stack.pop()
        if j - i < 2:
            continue
        a, b = ring[i], ring[j]
        seg = ring[i + 1 : j]
        ab = b - a
        norm = np.hypot(*ab)
        if norm == 0:
            dist = np.hypot(*(seg - a).T)
        else:
            dist = np.abs(ab[0] * (seg[:, 1] - a[1]) - ab[1] * (seg[:, 0] - a[0])) / norm
        k = int(np.argmax(dist))
        if dist[k] > tolerance:
            m = i + 1 + k
            keep[m] = True
            stack += [(i, m), (m, j)]
    return ring[keep][:-1]


def polygons(mask: np.ndarray, tolerance: float = 1.0, min_area: float = 1.0) -> list[np.ndarray]:
    """Outer outlines of mask (holes dropped), simplified, largest first: [n, 2] float (x, y) pixels.

    An outline that simplifies to fewer than 3 corners or encloses less than
    min_area pixels is dropped (a polygon must enclose something).
    """
    out = []
    for poly in outlines(mask):
        if signed_area(poly) <= 0:
            continue
        simple = simplify(poly, tolerance)
        if len(simple) >= 3 and signed_area(simple) >= min_area:
            out.append(simple)
    out.sort(key=lambda p: -signed_area(p))
    return out
