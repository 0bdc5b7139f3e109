"""COCO RLE as mask exports write it, checked by pycocotools decoding it back (no model)."""

from __future__ import annotations

import numpy as np

from wherein.search.export import coco
from wherein.search.export.pieces import Categories, Instance, LabelledImage


def random_masks(seed: int, count: int = 25, max_side: int = 30):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        h, w = (int(v) for v in rng.integers(1, max_side, size=2))
        yield rng.random((h, w)) < rng.uniform(0.1, 0.9)


def test_rle_round_trips_through_pycocotools():
    from pycocotools import mask as mask_utils

    for trial, mask in enumerate(random_masks(5)):
        seg = coco.rle(mask)
        assert isinstance(seg["counts"], str) and seg["size"] == list(mask.shape)
        coded = {"size": seg["size"], "counts": seg["counts"].encode()}
        assert np.array_equal(mask_utils.decode(coded).astype(bool), mask), trial
        assert int(mask_utils.area(coded)) == int(mask.sum()), trial


def test_rle_of_a_view_is_the_views_mask():
    """A transposed or sliced array is not C-contiguous: the RLE must still be of what it shows."""
    from pycocotools import mask as mask_utils

    base = np.random.default_rng(6).random((20, 31)) < 0.4
    for view in (base.T, base[::2, 3:], base[:, ::-1]):
        seg = coco.rle(view)
        coded = {"size": seg["size"], "counts": seg["counts"].encode()}
        assert np.array_equal(mask_utils.decode(coded).astype(bool), view)


def test_coco_annotation_area_and_box_are_the_masks():
    mask = np.zeros((40, 50), dtype=bool)
    mask[5:15, 10:30] = True
    mask[30:35, 40:45] = True
    item = LabelledImage(
        7,
        "/p/a.jpg",
        50,
        40,
        [Instance("dog", mask, 0.8), Instance("cat", np.zeros((40, 50), bool))],
    )
    piece = coco.encode(item, Categories(["cat", "dog"]))
    (ann,) = piece.record["annotations"]  # the empty mask gives no annotation
    assert ann["category_id"] == 2 and ann["image_id"] == 7 and ann["iscrowd"] == 0
    assert ann["area"] == int(mask.sum())
    assert ann["bbox"] == [10.0, 5.0, 35.0, 30.0]  # x, y, width, height over every region
    assert ann["score"] == 0.8
