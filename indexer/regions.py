"""Regions of large photos: which overlapping square tiles a photo is cut into, so that the
image tower sees small things at more than its one 224-px glance of the whole photo.

A photo's regions are items of kind 'region' whose locator is a box (x0, y0, x1, y1) in the
photo's pixels as a viewer shows them; each is embedded by the same tower as the whole photo,
whose own item stays as it is (same decode, same vector as without regions).

The tiling (``choose_boxes``, pure) spends a fixed budget of tower calls per photo
(``Tiling.budget``: 2) at the finest scale where it fits:

- Levels of square tiles: 2, 4, 8... across the photo's longer side (a 12-MP photo: 2304,
  1240, 645, 329 px), then one at the model's own input (224 px: a small thing seen at
  the photo's own pixels, filling a fifth of the tower's input when it is 100 px). A tile
  is downscaled, never blown up. Neighbouring tiles overlap by ``overlap`` of their side,
  so a thing up to that size lies whole in some grid tile.
- Flat parts (every channel's standard deviation under ``flat`` levels of 255: sky, a wall,
  a plain backdrop) need no tile: the whole photo's own item already sees what they hold.
- Where the photo is not flat is a map of small cells (``busy_map``: about 1/128 of the
  long side each). Each level covers the busy cells with as few of its tiles as it can
  (greedily; grid tiles, or tiles centred on what is busy when that takes fewer), and the
  levels are taken finer while the cover fits the budget and needs no more tiles than the
  coarser one (more would cut a thing into parts). A plain photo with one small thing on
  it gets one small tile around the thing; where even the coarsest cover does not fit (a
  photo busy all over: a 4:3 photo's 2 x 2 tiles), the budget's tiles of it that hold the
  most busy cells are kept.

The budget is what `--regions` costs: the real tower's run per region dominates it, and a
plain run pays one tower run and a reduced decode a photo, so 2 regions keep a photo busy all
over within 3x a plain run (bench/results/regions.md). On such a photo 2 tiles of 2304 px
see a small thing hardly better than the whole view, with 4 or with 2 (the same
bench measures it): the regions pay off where a photo is plain around small things. Marking
only the detail the whole view loses (what is left after its 224-px scale) instead of any
detail marked the same tiles on the bench's photos: a thing's edges are detail at every
scale, so the busy map stays the plain standard deviation.

Flatness is measured on the decoded image the whole photo's input comes from (one decode);
the tiles' pixels come from that decode too when it is fine enough for the level chosen,
else from one more decode of the same bytes at the scale that level needs (``decode_scale``).
Small photos (shorter side under ``min_photo``) get no regions: the whole view sees them well.

An index records its tiling's name (meta 'regions') when regions are turned on, and every
later run cuts with the tiling of that name (``tiling_named``): a changed default is a new
name in ``TILINGS``, and the older indexes keep theirs (pyramid-v1: budget 4, no tile
under 320 px). See bench/bench_regions.py for how these numbers were chosen.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from PIL import Image

from wherein.schemas.errors import IndexError_
from wherein.schemas.models import ImageInput

Box = tuple[int, int, int, int]  # x0, y0, x1, y1 in the photo's pixels, x1/y1 exclusive


@dataclass(frozen=True)
class Tiling:
    """How photos are cut into regions (see the module docstring); name is what the index
    records, so that later runs cut new photos the same way (``tiling_named``)."""

    name: str = "pyramid-v2"
    budget: int = 2  # region items per photo at most (tower calls beyond the whole photo's)
    overlap: float = 0.25  # share of a tile's side its neighbour also covers
    flat: float = 4.0  # a tile whose every channel's std (0-255) is below this is flat
    min_photo: int = 1024  # photos with a shorter side below this get no regions
    min_side: int = 0  # the smallest tile side, photo pixels (never under the model's input)
    # Below the last power of two, one more level at the floor itself (min_side or the
    # model's input): a small thing's tile shows it at the photo's own pixels.
    to_floor: bool = True

    def levels(self, width: int, height: int, input_size: int) -> list[int]:
        """Tile sides, coarsest first: 2, 4, 8... tiles across the photo's longer side (with
        their overlap; never taller than its shorter side), while a tile is at least
        min_side and the model's input; with to_floor, then that floor itself."""
        short, long = min(width, height), max(width, height)
        if short < self.min_photo:
            return []
        floor = max(self.min_side, input_size)
        sides: list[int] = []
        n = 2
        while (side := min(short, math.floor(long / (n - (n - 1) * self.overlap)))) >= floor:
            sides.append(side)
            n *= 2
        if self.to_floor and (not sides or sides[-1] > floor) and short >= floor:
            sides.append(floor)
        return sides


# Every tiling an index may name (meta 'regions'), by name: an index keeps cutting new photos
# the way it cut its first ones, whatever the default is now.
TILINGS = {
    t.name: t
    for t in (
        Tiling("pyramid-v1", budget=4, min_side=320, to_floor=False),
        Tiling(),
    )
}
DEFAULT_TILING = Tiling()  # what an index that turns regions on from now records


def tiling_named(name: str) -> Tiling:
    """The tiling an index names; IndexError_ for a name this wherein does not know (an
    index from a newer one: cutting its new photos another way would mix two tilings)."""
    try:
        return TILINGS[name]
    except KeyError:
        raise IndexError_(
            f"the index cuts photos into regions with tiling {name!r}, which this wherein "
            f"does not know (it knows {', '.join(TILINGS)}): it was made by a newer wherein"
        ) from None


def positions(length: int, side: int, overlap: float) -> list[int]:
    """Starts of tiles of `side` along `length`, evenly spread from 0 to length - side, as
    few as keep neighbours overlapping by at least `overlap` of a side."""
    if side >= length:
        return [0]
    stride = side * (1.0 - overlap)
    n = math.ceil((length - side) / stride) + 1
    return [round(i * (length - side) / (n - 1)) for i in range(n)]


def grid(width: int, height: int, side: int, overlap: float) -> list[Box]:
    """Square tiles of `side` covering the photo, row by row."""
    return [
        (x, y, min(x + side, width), min(y + side, height))
        for y in positions(height, side, overlap)
        for x in positions(width, side, overlap)
    ]


DETAIL_SIDE = 512  # flatness is measured on a copy of the decode at most this long
CELL = 4  # pixels of that copy per cell of the busy map (about 1/128 of a photo's long side)


def busy_map(image: Image.Image, flat: float = DEFAULT_TILING.flat) -> np.ndarray:
    """Where a photo is not flat: [rows, cols] bool, one cell per CELL x CELL pixels of a
    box-averaged copy at most DETAIL_SIDE long, True where a channel's standard deviation in
    the cell is at least `flat`. The map spans the whole photo, whatever its decoded size."""
    factor = max(1, math.ceil(max(image.size) / DETAIL_SIDE))
    small = image.reduce(factor) if factor > 1 else image
    x = np.asarray(small, dtype=np.int32)  # a whole row of squares sums under 2**31
    rows, cols = max(1, x.shape[0] // CELL), max(1, x.shape[1] // CELL)
    ys = np.linspace(0, x.shape[0], rows + 1).round().astype(int)
    xs = np.linspace(0, x.shape[1], cols + 1).round().astype(int)
    n = ((ys[1:] - ys[:-1])[:, None] * (xs[1:] - xs[:-1])[None, :])[..., None]
    mean = _cells(x, ys, xs) / n
    var = np.maximum(_cells(x * x, ys, xs) / n - mean**2, 0.0)
    return np.sqrt(var).max(axis=2) >= flat


def _cells(x: np.ndarray, ys: np.ndarray, xs: np.ndarray) -> np.ndarray:
    """Sums over the cells between consecutive ys and xs (exact: integers)."""
    return np.add.reduceat(np.add.reduceat(x, ys[:-1], axis=0), xs[:-1], axis=1).astype(np.float64)


class _Map:
    """A busy map laid over a width x height photo: which cells a box holds (by their
    centres), and the box around the busy cells in a window."""

    def __init__(self, busy: np.ndarray, width: int, height: int) -> None:
        self.busy, self.width, self.height = busy, width, height
        self.rows, self.cols = busy.shape

    def span(self, box: Box) -> tuple[slice, slice]:
        """The cells whose centre lies in the box."""
        x0, y0, x1, y1 = box
        r = self.rows / self.height
        c = self.cols / self.width
        return (
            slice(max(0, math.ceil(y0 * r - 0.5)), max(0, math.ceil(y1 * r - 0.5))),
            slice(max(0, math.ceil(x0 * c - 0.5)), max(0, math.ceil(x1 * c - 0.5))),
        )

    def centred(self, window: Box, side: int) -> Box | None:
        """A tile of `side` centred on the busy cells in window (clamped into the photo)."""
        rs, cs = self.span(window)
        r, c = np.nonzero(self.busy[rs, cs])
        if not len(r):
            return None
        cy = (rs.start + (r.min() + r.max() + 1) / 2) * self.height / self.rows
        cx = (cs.start + (c.min() + c.max() + 1) / 2) * self.width / self.cols
        x0 = min(max(round(cx - side / 2), 0), self.width - side)
        y0 = min(max(round(cy - side / 2), 0), self.height - side)
        return (x0, y0, x0 + side, y0 + side)

    def cover(self, tiles: list[Box]) -> list[Box]:
        """Tiles holding every busy cell, greedily: the tile holding the most cells not held
        yet first (ties: the first in the list)."""
        left = self.busy.copy()
        spans = [self.span(t) for t in tiles]
        picked: list[Box] = []
        while left.any():
            counts = [int(left[rs, cs].sum()) for rs, cs in spans]
            best = int(np.argmax(counts))
            if not counts[best]:
                break  # cells no tile holds (none: the grid spans the photo)
            picked.append(tiles[best])
            rs, cs = spans[best]
            left[rs, cs] = False
        return picked


def _grown(box: Box) -> Box:
    """The box with half its side added on each side."""
    x0, y0, x1, y1 = box
    h = (x1 - x0) // 2
    return (x0 - h, y0 - h, x1 + h, y1 + h)


def choose_boxes(
    width: int,
    height: int,
    busy: np.ndarray,
    tiling: Tiling = DEFAULT_TILING,
    input_size: int = 224,
) -> list[Box]:
    """The regions of a width x height photo (see the module docstring): at most
    tiling.budget boxes of one level, row by row. busy: busy_map() of the photo."""
    sides = tiling.levels(width, height, input_size)
    if not sides or not busy.any():
        return []
    where = _Map(busy, width, height)
    chosen: list[Box] = []
    for level, side in enumerate(sides):
        tiles = grid(width, height, side, tiling.overlap)
        cover = where.cover(tiles)
        # Tiles centred on what is busy where that takes fewer; else the grid's (which
        # span the whole photo when it is busy all over).
        centred = [t for t in (where.centred(g, side) for g in tiles) if t is not None]
        # Centred again on what the window around the first centring holds: a thing the
        # grid tile held only part of is then held whole.
        centred = [t for t in (where.centred(_grown(c), side) for c in centred) if t is not None]
        fewer = where.cover(list(dict.fromkeys(centred)) + tiles)
        cover = fewer if len(fewer) < len(cover) else cover
        if len(cover) > tiling.budget or (chosen and len(cover) > len(chosen)):
            if level == 0:  # busy beyond the budget even at the coarsest (a long panorama)
                chosen = cover[: tiling.budget]  # the tiles that hold the most of it
            break
        chosen = cover
    return sorted(chosen, key=lambda b: (b[1], b[0]))


# A tile may come from a decode where it is a little under the model's input (and is scaled
# up to it): a full decode of a 12-MP JPEG costs about as much as the tower's run on a tile.
SOURCE_SHARE = 0.7


def decode_scale(boxes: list[Box], input_size: int) -> int:
    """The largest JPEG reduction (1, 2, 4, 8) at which every box is still at least
    SOURCE_SHARE of the model's input on its shorter side."""
    if not boxes:
        return 8
    side = min(min(x1 - x0, y1 - y0) for x0, y0, x1, y1 in boxes)
    return next((s for s in (8, 4, 2) if side / s >= SOURCE_SHARE * input_size), 1)


def crop(image: Image.Image, box: Box, full: tuple[int, int]) -> Image.Image:
    """A box of the photo (full-size pixels) from an image decoded at a reduced size."""
    sx, sy = image.width / full[0], image.height / full[1]
    x0, y0, x1, y1 = box
    return image.crop((round(x0 * sx), round(y0 * sy), round(x1 * sx), round(y1 * sy)))


def region_inputs(
    image: Image.Image,
    full: tuple[int, int],
    spec: ImageInput,
    to_input: Callable[[Image.Image], np.ndarray],
    tiling: Tiling = DEFAULT_TILING,
    decode_at: Callable[[int], Image.Image] | None = None,
) -> list[tuple[Box, np.ndarray]]:
    """Each region's box and its model input (to_input: imaging.model_input for spec).
    image: the photo as decoded for its whole view, full: its size as a viewer shows it;
    decode_at(scale): the same photo decoded at 1/scale, for a level finer than `image`
    serves (None: crop from `image` whatever its resolution)."""
    boxes = choose_boxes(*full, busy_map(image, tiling.flat), tiling, spec.size)
    if not boxes:
        return []
    source = image
    scale = decode_scale(boxes, spec.size)
    if decode_at is not None and full[0] / scale > image.width * 1.01:
        source = decode_at(scale)
    return [(b, to_input(crop(source, b, full))) for b in boxes]
