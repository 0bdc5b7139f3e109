"""Masks as numbers, without a model: regions, runs, outlines, the stretched map, 1-bit PNG.

Each part is checked against an independent plain reference (a flood fill, a
point-in-polygon fill, a per-pixel bilinear formula, Pillow's PNG decoder) on
small random masks and maps. COCO RLE: test_coco_rle.py.
"""

from __future__ import annotations

import io
from collections import deque

import numpy as np
import pytest
from PIL import Image, ImageDraw

from wherein.search.localize import contours
from wherein.search.localize.bitpng import encode_1bit
from wherein.search.localize.probmap import stretch, threshold_runs
from wherein.search.localize.regions import Region, Runs, regions, regions_of_runs


def random_masks(seed: int, count: int = 25, max_side: int = 30):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        h, w = (int(v) for v in rng.integers(1, max_side, size=2))
        yield rng.random((h, w)) < rng.uniform(0.1, 0.9)


# -- regions ------------------------------------------------------------------------------
def flood_fill_regions(mask: np.ndarray) -> list[Region]:
    """4-connected components by breadth-first search over pixels: the obvious, slow way."""
    h, w = mask.shape
    seen = np.zeros_like(mask, dtype=bool)
    out = []
    for y in range(h):
        for x in range(w):
            if not mask[y, x] or seen[y, x]:
                continue
            seen[y, x] = True
            queue, pixels = deque([(y, x)]), []
            while queue:
                cy, cx = queue.popleft()
                pixels.append((cy, cx))
                for ny, nx in ((cy - 1, cx), (cy + 1, cx), (cy, cx - 1), (cy, cx + 1)):
                    if 0 <= ny < h and 0 <= nx < w and mask[ny, nx] and not seen[ny, nx]:
                        seen[ny, nx] = True
                        queue.append((ny, nx))
            ys, xs = zip(*pixels, strict=True)
            out.append(Region(len(pixels), (min(xs), min(ys), max(xs) + 1, max(ys) + 1)))
    return out


def order_key(r: Region) -> tuple[int, int, int]:
    return (-r.area, r.bbox[1], r.bbox[0])  # largest first, then topmost, then leftmost


def test_regions_are_the_flood_fill_components_largest_first():
    for trial, mask in enumerate(random_masks(1)):
        ours = regions(mask)
        want = flood_fill_regions(mask)
        # Compared as sets plus the documented order: equal keys could come in either order.
        assert sorted(ours, key=lambda r: (order_key(r), r.bbox)) == sorted(
            want, key=lambda r: (order_key(r), r.bbox)
        ), trial
        assert [order_key(r) for r in ours] == sorted(order_key(r) for r in ours), trial


def test_regions_agree_with_scipy_label_on_random_masks():
    ndimage = pytest.importorskip("scipy.ndimage")
    for trial, mask in enumerate(random_masks(2, count=10, max_side=70)):
        labels, n = ndimage.label(mask)  # 4-connectivity by default
        want = []
        for sl, k in zip(ndimage.find_objects(labels), range(1, n + 1), strict=True):
            area = int((labels[sl] == k).sum())
            want.append(Region(area, (sl[1].start, sl[0].start, sl[1].stop, sl[0].stop)))
        assert sorted(regions(mask), key=lambda r: (order_key(r), r.bbox)) == sorted(
            want, key=lambda r: (order_key(r), r.bbox)
        ), trial


def test_a_snake_is_one_region():
    """A long winding path joins runs across many bends: still one component."""
    mask = np.zeros((21, 15), dtype=bool)
    mask[::2, 1:-1] = True  # rows 0, 2, ..., 20
    for i, y in enumerate(range(1, 21, 2)):
        mask[y, 1 if i % 2 else -2] = True  # alternate ends join them into one path
    (only,) = regions(mask)
    assert only == Region(int(mask.sum()), (1, 0, 14, 21))


def test_an_empty_and_a_full_mask():
    assert regions(np.zeros((4, 6), dtype=bool)) == []
    assert regions(np.ones((4, 6), dtype=bool)) == [Region(24, (0, 0, 6, 4))]


def test_runs_round_trip_and_measure_the_mask():
    for trial, mask in enumerate(random_masks(3)):
        runs = Runs.of_mask(mask)
        assert np.array_equal(runs.to_mask(), mask), trial
        assert runs.area == int(mask.sum()), trial
        assert ((runs.x1 - runs.x0) > 0).all()
        # Disjoint and never adjacent within a row: a gap of at least one pixel between runs.
        same_row = runs.rows[1:] == runs.rows[:-1]
        assert (runs.x0[1:][same_row] > runs.x1[:-1][same_row]).all(), trial


def test_merged_joins_touching_runs_and_drops_empty_ones():
    rows = np.array([0, 0, 0, 1, 2, 2])
    x0 = np.array([0, 3, 5, 2, 1, 4])
    x1 = np.array([3, 5, 5, 2, 3, 6])  # [0,3)+[3,5) touch; [5,5) and [2,2) are empty
    runs = Runs.merged(rows, x0, x1, 8, 3)
    assert runs.rows.tolist() == [0, 2, 2]
    assert list(zip(runs.x0.tolist(), runs.x1.tolist(), strict=True)) == [(0, 5), (1, 3), (4, 6)]
    assert regions_of_runs(runs) == regions(runs.to_mask())


# -- outlines and polygons -----------------------------------------------------------------
def fill_even_odd(polys: list[np.ndarray], shape: tuple[int, int]) -> np.ndarray:
    """Pixel centres inside any polygon by the even-odd rule (holes count as outside)."""
    h, w = shape
    cy, cx = np.mgrid[0:h, 0:w] + 0.5
    inside = np.zeros(shape, dtype=bool)
    for poly in polys:
        ring = np.vstack([poly, poly[:1]]).astype(np.float64)
        for (x0, y0), (x1, y1) in zip(ring[:-1], ring[1:], strict=True):
            if y0 == y1:
                continue
            crosses = (cy >= min(y0, y1)) & (cy < max(y0, y1))
            x_at = x0 + (cy - y0) * (x1 - x0) / (y1 - y0)
            inside ^= crosses & (cx < x_at)
    return inside


def test_a_pixel_is_a_clockwise_square_of_its_corners():
    mask = np.zeros((3, 4), dtype=bool)
    mask[1, 2] = True
    (loop,) = contours.outlines(mask)
    assert loop.tolist() == [[2, 1], [3, 1], [3, 2], [2, 2]]  # clockwise on screen (y down)
    assert contours.signed_area(loop) == 1.0


def test_a_holed_mask_has_an_outer_outline_and_a_hole():
    mask = np.zeros((9, 9), dtype=bool)
    mask[1:8, 1:8] = True
    mask[3:6, 3:6] = False
    loops = contours.outlines(mask)
    assert sorted(contours.signed_area(p) for p in loops) == [-9.0, 49.0]
    assert np.array_equal(fill_even_odd(loops, mask.shape), mask)
    # polygons() keeps outer outlines only: YOLO cannot express a hole, so it is filled.
    (poly,) = contours.polygons(mask, tolerance=0)
    assert np.array_equal(fill_even_odd([poly], mask.shape), np.pad(np.ones((7, 7), bool), 1))


def test_pixels_touching_at_a_corner_get_outlines_of_their_own():
    mask = np.array([[1, 0], [0, 1]], dtype=bool)  # 4-connectivity: two regions, as regions() says
    loops = contours.outlines(mask)
    assert sorted(p.tolist() for p in loops) == [
        [[0, 0], [1, 0], [1, 1], [0, 1]],
        [[1, 1], [2, 1], [2, 2], [1, 2]],
    ]


def test_outlines_rebuild_random_masks_through_a_generic_fill():
    for trial, mask in enumerate(random_masks(4)):
        loops = contours.outlines(mask)
        assert np.array_equal(fill_even_odd(loops, mask.shape), mask), trial
        outer = [p for p in loops if contours.signed_area(p) > 0]
        assert len(outer) == len(regions(mask)), trial  # one outer outline per 4-connected region


def distance_to_outline(points: np.ndarray, poly: np.ndarray) -> np.ndarray:
    """Distance of each point to the closed polyline poly."""
    ring = np.vstack([poly, poly[:1]]).astype(np.float64)
    a, b = ring[:-1][None], ring[1:][None]  # [1, m, 2]
    p = points.astype(np.float64)[:, None]  # [n, 1, 2]
    ab = b - a
    t = np.clip(((p - a) * ab).sum(-1) / np.maximum((ab * ab).sum(-1), 1e-12), 0, 1)
    return np.hypot(*(p - (a + t[..., None] * ab)).transpose(2, 0, 1)).min(axis=1)


def test_simplify_keeps_corners_and_drops_only_what_lies_within_tolerance():
    img = Image.new("1", (120, 90), 0)
    ImageDraw.Draw(img).polygon([(10, 5), (110, 30), (70, 85), (5, 60)], fill=1)
    (loop,) = contours.outlines(np.asarray(img, dtype=bool))
    assert len(contours.simplify(loop, 1.5)) == 4  # the staircases became the 4 sides
    for tolerance in (0.5, 1.0, 2.5):
        simple = contours.simplify(loop, tolerance)
        originals = {tuple(p) for p in loop.tolist()}
        assert all(tuple(p) in originals for p in simple.tolist())  # no corner is moved
        assert distance_to_outline(loop, simple).max() <= tolerance + 1e-9


def test_simplified_polygons_rasterise_back_close_to_the_mask():
    img = Image.new("1", (160, 120), 0)
    d = ImageDraw.Draw(img)
    d.ellipse((10, 10, 90, 100), fill=1)
    d.ellipse((100, 40, 150, 110), fill=1)
    mask = np.asarray(img, dtype=bool)
    polys = contours.polygons(mask)
    assert len(polys) == 2
    assert contours.signed_area(polys[0]) > contours.signed_area(polys[1])  # largest first
    back = fill_even_odd(polys, mask.shape)
    assert (back & mask).sum() / (back | mask).sum() >= 0.97


def test_polygons_drop_what_encloses_too_little():
    mask = np.zeros((6, 6), dtype=bool)
    mask[0, 0] = True  # 1 px
    mask[2:5, 2:5] = True  # 9 px
    assert [contours.signed_area(p) for p in contours.polygons(mask, 0, min_area=2)] == [9.0]
    assert contours.polygons(np.zeros((3, 3), dtype=bool)) == []


# -- the stretched probability map ---------------------------------------------------------
def bilinear_reference(prob: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Half-pixel-centred bilinear at each output pixel, edges clamped, in float64."""
    w, h = size
    h_in, w_in = prob.shape
    out = np.empty((h, w))
    p = prob.astype(np.float64)
    for y in range(h):
        sy = min(max((y + 0.5) * h_in / h - 0.5, 0), h_in - 1)
        r0 = int(np.floor(sy))
        r1, fy = min(r0 + 1, h_in - 1), sy - r0
        for x in range(w):
            sx = min(max((x + 0.5) * w_in / w - 0.5, 0), w_in - 1)
            c0 = int(np.floor(sx))
            c1, fx = min(c0 + 1, w_in - 1), sx - c0
            top = p[r0, c0] * (1 - fx) + p[r0, c1] * fx
            bottom = p[r1, c0] * (1 - fx) + p[r1, c1] * fx
            out[y, x] = top * (1 - fy) + bottom * fy
    return out


SIZES = [(7, 5), (23, 17), (40, 9), (8, 31), (61, 47)]


@pytest.mark.parametrize("size", SIZES)
def test_stretch_enlarges_bilinearly(size):
    prob = np.random.default_rng(8).random((5, 7)).astype(np.float32)
    out = stretch(prob, size)
    assert out.shape == (size[1], size[0]) and out.dtype == np.float32
    np.testing.assert_allclose(out, bilinear_reference(prob, size), atol=1e-6)


@pytest.mark.parametrize("size", SIZES)
def test_threshold_runs_are_the_thresholded_stretch(size):
    rng = np.random.default_rng(9)
    w, h = size
    for threshold in (0.3, 0.5, 0.71):
        prob = rng.random((5, 7)).astype(np.float32)
        ref = bilinear_reference(prob, size)
        got = threshold_runs(prob, size, threshold)
        mask = got.runs.to_mask()
        # A pixel within float rounding of the threshold may go either way (the module says
        # so); every other pixel must be exact, and those are nearly all of them.
        sure = np.abs(ref - threshold) > 1e-5
        assert sure.mean() > 0.99
        assert np.array_equal(mask[sure], (ref > threshold)[sure]), threshold
        assert got.inside_sum == pytest.approx(ref[mask].sum(), abs=1e-4)
        # The runs keep Runs' invariant, so labelling them is labelling the mask.
        again = Runs.of_mask(mask)
        assert np.array_equal(again.rows, got.runs.rows) and np.array_equal(again.x0, got.runs.x0)
        assert regions_of_runs(got.runs) == regions(mask)
        assert (got.runs.width, got.runs.height) == (w, h)


def test_threshold_runs_refuses_to_shrink():
    with pytest.raises(ValueError, match="enlarges only"):
        threshold_runs(np.zeros((10, 10), np.float32), (20, 5), 0.5)


def test_a_map_at_its_own_size_is_unchanged():
    prob = np.random.default_rng(10).random((6, 9)).astype(np.float32)
    assert np.array_equal(stretch(prob, (9, 6)), prob)
    got = threshold_runs(prob, (9, 6), 0.5)
    assert np.array_equal(got.runs.to_mask(), prob > 0.5)
    assert got.inside_sum == pytest.approx(float(prob[prob > 0.5].sum()), abs=1e-5)


# -- 1-bit PNG -----------------------------------------------------------------------------
@pytest.mark.parametrize("width", [1, 7, 8, 9, 13, 16, 17])
def test_bitpng_decodes_back_to_the_mask(width):
    rng = np.random.default_rng(width)
    for mask in (
        rng.random((5, width)) < 0.5,
        np.zeros((3, width), bool),
        np.ones((2, width), bool),
    ):
        img = Image.open(io.BytesIO(encode_1bit(mask)))
        img.load()  # decodes every row: a bad CRC or short IDAT fails here
        assert img.format == "PNG" and img.mode == "1" and img.size == (width, mask.shape[0])
        assert np.array_equal(np.asarray(img, dtype=bool), mask)
        assert np.asarray(img.convert("L"))[mask].min(initial=255) == 255  # white inside
