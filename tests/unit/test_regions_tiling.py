"""The tiling of large photos into regions (indexer/regions.py): where the tiles go, how many,
and that a small thing lies whole in one of them."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image, ImageDraw

from wherein.indexer.imaging import WHOLE_IMAGE, prepare
from wherein.indexer.regions import (
    DEFAULT_TILING,
    Tiling,
    busy_map,
    choose_boxes,
    decode_scale,
    grid,
    positions,
    tiling_named,
)
from wherein.schemas.errors import IndexError_
from wherein.schemas.models import SIGLIP2

W, H = 4032, 3024  # a 12-MP photo


def plain(size=(W, H), things=()) -> Image.Image:
    """A plain photo with filled squares (x, y, side, colour)."""
    img = Image.new("RGB", size, (247, 247, 247))
    d = ImageDraw.Draw(img)
    for x, y, side, colour in things:
        d.rectangle((x, y, x + side - 1, y + side - 1), fill=colour)
    return img


def boxes_of(img: Image.Image, tiling: Tiling = DEFAULT_TILING) -> list:
    small = img.reduce(4)  # as the indexer measures it: on the decode for the whole view
    return choose_boxes(img.width, img.height, busy_map(small, tiling.flat), tiling)


def holds(box, x, y, side) -> bool:
    x0, y0, x1, y1 = box
    return x0 <= x and y0 <= y and x + side <= x1 and y + side <= y1


def test_positions_span_the_side_with_the_overlap_asked():
    starts = positions(4032, 1240, 0.25)
    assert starts[0] == 0 and starts[-1] == 4032 - 1240
    assert all(b - a <= 1240 * 0.75 for a, b in zip(starts, starts[1:], strict=False))
    assert positions(500, 800, 0.25) == [0]
    tiles = grid(4032, 3024, 2304, 0.25)
    assert len(tiles) == 4 and all(x1 - x0 == 2304 == y1 - y0 for x0, y0, x1, y1 in tiles)


def test_small_photos_and_flat_photos_get_no_regions():
    assert boxes_of(plain((1000, 750), [(400, 300, 60, (220, 30, 30))])) == []
    assert boxes_of(plain()) == []


@pytest.mark.parametrize("side", [100, 200, 400, 800])
def test_a_thing_on_a_plain_photo_lies_whole_in_one_small_tile(side):
    x, y = 2500, 1200
    boxes = boxes_of(plain(things=[(x, y, side, (220, 30, 30))]))
    assert len(boxes) == 1
    (box,) = boxes
    assert holds(box, x, y, side)
    # The finest tile that holds it: a smaller level would cut it, a bigger one dilutes it.
    levels = DEFAULT_TILING.levels(W, H, 224)
    tile = box[2] - box[0]
    assert tile in levels and all(s < side for s in levels if s < tile)


def covered(boxes) -> np.ndarray:
    out = np.zeros((H // 8, W // 8), dtype=bool)
    for x0, y0, x1, y1 in boxes:
        out[y0 // 8 : y1 // 8, x0 // 8 : x1 // 8] = True
    return out


def test_a_busy_photo_gets_the_budget_of_the_coarsest_tiles():
    rng = np.random.default_rng(0)
    noise = Image.fromarray((rng.random((H // 16, W // 16, 3)) * 255).astype(np.uint8))
    photo = noise.resize((W, H))
    boxes = boxes_of(photo)
    coarsest = DEFAULT_TILING.levels(W, H, 224)[0]
    assert len(boxes) == DEFAULT_TILING.budget == 2
    assert all(x1 - x0 == coarsest == y1 - y0 for x0, y0, x1, y1 in boxes)
    assert len(set(boxes)) == 2 and covered(boxes).mean() > 0.6  # apart, not one on another
    # An index cut with the first tiling keeps it: 4 tiles, the whole photo covered.
    old = boxes_of(photo, tiling_named("pyramid-v1"))
    assert len(old) == 4 and covered(old).all()


def test_an_index_names_its_tiling_and_keeps_it():
    assert tiling_named(DEFAULT_TILING.name) == DEFAULT_TILING
    v1 = tiling_named("pyramid-v1")
    assert (v1.budget, v1.levels(W, H, 224)) == (4, [2304, 1240, 645, 329])
    # Today's: down to the tower's own input, where a small thing is seen at 1:1 pixels.
    assert DEFAULT_TILING.levels(W, H, 224) == [2304, 1240, 645, 329, 224]
    assert DEFAULT_TILING.levels(W, H, 384)[-1] == 384  # a larger input: a larger floor
    with pytest.raises(IndexError_, match="newer wherein"):
        tiling_named("pyramid-v99")


def test_things_far_apart_each_get_their_tile():
    things = [(300, 300, 150, (220, 30, 30)), (3500, 2600, 150, (30, 40, 220))]
    boxes = boxes_of(plain(things=things))
    assert len(boxes) == 2
    assert holds(boxes[0], 300, 300, 150) and holds(boxes[1], 3500, 2600, 150)


def test_decode_scale_keeps_tiles_near_the_model_input():
    assert decode_scale([(0, 0, 2304, 2304)], 224) == 8
    assert decode_scale([(0, 0, 645, 645)], 224) == 4
    assert decode_scale([(0, 0, 329, 329)], 224) == 2
    assert decode_scale([(0, 0, 200, 200)], 224) == 1
    assert decode_scale([(0, 0, 224, 224)], 224) == 1  # the finest level: 1:1 pixels


@pytest.mark.parametrize("side", [100, 200])
def test_prepare_keeps_the_whole_photo_input_and_adds_the_regions(side):
    img = plain(things=[(2500, 1200, side, (220, 30, 30))])
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90)
    data = buf.getvalue()
    whole = prepare(data, SIGLIP2.image)
    cut = prepare(data, SIGLIP2.image, tiling=DEFAULT_TILING)
    assert whole.regions is None and cut.regions == 1 and len(cut.items) == 2
    assert cut.items[0][0] == WHOLE_IMAGE
    assert np.array_equal(cut.items[0][1], whole.pixels)  # same decode, same vector
    loc, px = cut.items[1]
    assert loc.kind == "region" and loc.box is not None and holds(loc.box, 2500, 1200, side)
    assert px.shape == whole.pixels.shape
    # The region's input shows the red square large (a sixth of its tile or more), even a
    # 100-px one: 0.08% of the photo (its tile is the tower's input, at the photo's pixels).
    red = (px[0] > 0.5) & (px[1] < -0.5)
    assert red.mean() > 0.15
