"""What coarse-to-fine masks cost: at most one more vision pass per small region (issue 27).

The model here reads red per pixel of what it is shown (the crop, squashed to 352x352 as
CLIPSeg squashes it), so its map is where the red squares are, seen at the crop's scale;
every vision pass it runs is counted.
"""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

from wherein.search.localize.refine import MAX_CROPS, Refiner

PHOTO = (2400, 1800)
SIDE = 60  # px: ~9 tokens' worth of the 352 map, a small region


class RedModel:
    def __init__(self) -> None:
        self.passes = 0

    def image_features(self, image: Image.Image) -> Image.Image:
        self.passes += 1
        return image

    def decode(self, features: Image.Image, cond) -> np.ndarray:
        a = np.asarray(features.resize((352, 352), Image.Resampling.BILINEAR), dtype=np.float32)
        return np.clip((a[..., 0] - (a[..., 1] + a[..., 2]) / 2) / 255, 0, 1)


def photo(*corners: tuple[int, int], side: int = SIDE) -> Image.Image:
    img = Image.new("RGB", PHOTO, (240, 240, 240))
    draw = ImageDraw.Draw(img)
    for x, y in corners:
        draw.rectangle((x, y, x + side - 1, y + side - 1), fill=(230, 20, 20))
    return img


def refine(img: Image.Image, hint=None, cache: dict | None = None):
    """The refinements of img's whole pass, and the passes they ran (the model's count)."""
    model = RedModel()
    prob = model.decode(model.image_features(img), None)
    model.passes = 0

    def cached(box, compute):
        if cache is None:
            return compute()
        if box not in cache:
            cache[box] = compute()
        return cache[box]

    refiner = Refiner(model, None, img.size, lambda _draft: img, cached)
    out = refiner.refine(prob, hint)
    assert refiner.passes == model.passes
    return out, model.passes


# Far enough apart that their crops (352 px around each) never touch.
SPOTS = [(200, 200), (1200, 200), (2000, 900), (300, 1400), (1200, 1400), (2100, 200)]


def test_each_small_region_costs_one_pass_and_never_more_than_max_crops():
    for n in range(1, len(SPOTS) + 1):
        refinements, passes = refine(photo(*SPOTS[:n]))
        assert passes == min(n, MAX_CROPS)
        assert len(refinements) == passes
        for r in refinements:  # each crop is around a square
            assert r.prob.max() > 0.5


def test_small_regions_whose_crops_overlap_share_one_pass():
    x, y = SPOTS[0]
    refinements, passes = refine(photo((x, y), (x + 150, y + 100)))
    assert passes == 1
    (r,) = refinements
    assert r.box[0] <= x and r.box[2] >= x + 150 + SIDE  # both squares in the one crop


def test_a_photo_with_nothing_small_costs_no_pass():
    assert refine(photo())[1] == 0
    assert refine(photo((600, 400), side=1200))[1] == 0  # drawn well by the whole pass


def test_the_hints_crop_is_the_pass_of_the_region_inside_it():
    # A hit's region tight around the square: its crop sees the square closer than a crop
    # around the whole pass's region would; that second pass is not run.
    x, y = SPOTS[0]
    hint = (x - 40, y - 40, x + SIDE + 40, y + SIDE + 40)
    refinements, passes = refine(photo((x, y)), hint=hint)
    assert passes == 1
    assert [r.level for r in refinements] == [1]
    # A square outside the region still gets its own pass.
    refinements, passes = refine(photo((x, y), SPOTS[2]), hint=hint)
    assert passes == 2
    assert refinements[1].box[0] > hint[2]


def test_a_kept_crop_pass_serves_another_prompt_on_the_same_photo():
    img = photo(SPOTS[0], SPOTS[2])
    hint = (0, 0, 1000, 1000)
    cache: dict = {}
    first, passes = refine(img, hint, cache)
    again, passes_again = refine(img, hint, cache)
    assert passes == 3 and passes_again == 0
    assert [r.box for r in again] == [r.box for r in first]
    for a, b in zip(first, again, strict=True):
        assert np.array_equal(a.prob, b.prob)


def test_a_loader_that_ignores_the_draft_size_decodes_once():
    # A video's frame (or a PNG) comes back in full whatever reduction a crop asks for: the
    # crops of a small and of a larger square share that one decode.
    img = photo(SPOTS[0])
    ImageDraw.Draw(img).rectangle((1500, 900, 1899, 1299), fill=(230, 20, 20))
    model, loads = RedModel(), []

    def load(_draft):
        loads.append(1)
        return img

    prob = model.decode(model.image_features(img), None)
    refinements = Refiner(model, None, img.size, load).refine(prob)
    assert len(refinements) == 2
    assert len(loads) == 1
