"""Coarse-to-fine masks: a small thing in a 12-MP photo is drawn at the photo's own size.

The whole 352-px pass sees a 200-px red square in a 4032x3024 photo as a bump of a token or
two (the stand-in CLIPSeg reads colour per 16-px token, about 183x137 photo px here); the
refinement segments a crop around it again and merges the result at full size. IoU is
measured against the drawn square, on the mask PNG at the photo's size.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image, ImageDraw

from wherein.indexer.models.standins.palette import rgb255
from wherein.search.cli import cli
from wherein.search.export.labels import read_mask
from wherein.search.localize.masking import MaskResult
from wherein.search.localize.probmap import stretch
from wherein.search.localize.refine import Refinement, crop_box, merge_boxes, slice_boxes

PHOTO = (4032, 3024)
LIGHT = (247, 247, 247)


def photo_with_square(path: Path, side: int, at: tuple[int, int], colour: str = "red"):
    """A camera-size JPEG with one square; returns its truth mask."""
    img = Image.new("RGB", PHOTO, LIGHT)
    x0, y0 = at
    ImageDraw.Draw(img).rectangle((x0, y0, x0 + side - 1, y0 + side - 1), fill=rgb255(colour))
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path, quality=90)
    truth = np.zeros(PHOTO[::-1], dtype=bool)
    truth[y0 : y0 + side, x0 : x0 + side] = True
    return truth


def iou(a: np.ndarray, b: np.ndarray) -> float:
    return float((a & b).sum() / max(1, (a | b).sum()))


def run(*args):
    result = CliRunner().invoke(cli, list(map(str, args)))
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result


# A 200-px square placed across token borders (the worst case for the whole pass).
SQUARE_AT = (1740, 1300)


def test_wherein_mask_alone_draws_a_200px_square_at_full_size(env, tmp_path):
    truth = photo_with_square(tmp_path / "p" / "small.jpg", 200, SQUARE_AT)
    out = json.loads(
        run("mask", tmp_path / "p" / "small.jpg", "red", "--out", tmp_path / "m", "--json").stdout
    )
    (m,) = out["masks"]
    mask = read_mask(m["mask_path"])
    assert mask.shape == truth.shape
    assert iou(mask, truth) >= 0.8
    x0, y0 = SQUARE_AT  # the box is the square's, to a few pixels
    assert np.allclose(m["bbox"]["largest"], [x0, y0, x0 + 200, y0 + 200], atol=12)


def test_search_mask_draws_a_200px_square_at_full_size_and_nothing_where_there_is_none(
    env, tmp_path
):
    truth = photo_with_square(tmp_path / "p" / "small.jpg", 200, SQUARE_AT)
    photo_with_square(tmp_path / "p" / "blue.jpg", 800, (600, 500), colour="blue")
    run("index", tmp_path / "p", "-q")
    hits = json.loads(run("search", "red", "--mask", "--out", tmp_path / "m", "--json").stdout)
    by_name = {Path(h["path"]).name: h for h in hits}
    small = by_name["small.jpg"]
    assert iou(read_mask(small["mask_path"]), truth) >= 0.8
    assert small["mask_area"] == pytest.approx(truth.mean(), rel=0.2)
    assert by_name["blue.jpg"].get("bbox") is None  # no red: nothing refined into a mask


# -- the merge, without models -------------------------------------------------------------
def test_a_refined_crop_replaces_the_whole_pass_inside_it_at_the_photos_size():
    rng = np.random.default_rng(3)
    size = (1500, 1100)
    whole = rng.random((352, 352)).astype(np.float32)
    inner = Refinement((400, 300, 800, 700), rng.random((352, 352)).astype(np.float32), level=2)
    outer = Refinement((300, 200, 1000, 900), rng.random((352, 352)).astype(np.float32), level=1)
    res = MaskResult.composed("p", whole, size, [inner, outer])
    # What the merge means, pixel by pixel: the finest map over each pixel, then > 0.5.
    soft = stretch(whole, size).copy()
    for r in (outer, inner):
        x0, y0, x1, y1 = r.box
        soft[y0:y1, x0:x1] = stretch(r.prob, (x1 - x0, y1 - y0))
    expect = soft > 0.5
    assert (res.mask != expect).sum() <= 1e-4 * expect.size  # float ties at the threshold
    assert res.area == pytest.approx(expect.mean(), rel=1e-3)
    assert res.score == pytest.approx(float(soft[expect].mean()), rel=1e-3)
    assert np.allclose(res.soft, soft, atol=1e-5)


def test_crops_hold_their_region_with_context_inside_the_photo():
    size = PHOTO
    box = crop_box((100, 2900, 300, 3000), size)  # near a corner: shifted in, not cut
    assert box[2] - box[0] == box[3] - box[1] == 400
    assert 0 <= box[0] <= 100 and box[2] >= 300 and box[3] == size[1]
    assert merge_boxes([(0, 0, 10, 10), (5, 5, 20, 20), (30, 30, 40, 40)]) == [
        (0, 0, 20, 20),
        (30, 30, 40, 40),
    ]
    tiles = slice_boxes(size)
    covered = np.zeros(size[::-1], dtype=bool)
    for x0, y0, x1, y1 in tiles:
        covered[y0:y1, x0:x1] = True
    assert covered.all() and len(tiles) == 6


def test_a_hits_region_is_the_first_crop_and_finds_what_the_whole_pass_missed(
    standin_models, tmp_path
):
    from wherein.search.localize.masking import add_masks_to_hits

    # A 100-px square centred on a corner of four tokens of the whole pass (each ~183x137 px
    # here): a tenth of each token is red, under the pass's notice.
    truth = photo_with_square(tmp_path / "tiny.jpg", 100, (1783, 1324))
    hit = {"rank": 1, "path": str(tmp_path / "tiny.jpg"), "kind": "photo"}
    (alone,) = add_masks_to_hits([hit], "red", tmp_path / "a", standin_models)
    assert alone["bbox"] is None
    region = [1300, 900, 2308, 1908]  # the tile of a `--regions` index that matched best
    (with_region,) = add_masks_to_hits(
        [{**hit, "region": region}], "red", tmp_path / "b", standin_models
    )
    assert iou(read_mask(with_region["mask_path"]), truth) >= 0.6


def test_wherein_mask_alone_slices_a_photo_the_whole_pass_found_nothing_in(env, tmp_path):
    # The same 100-px square on a corner of four tokens: the whole pass sees nothing, so
    # `wherein mask` looks at overlapping tiles of the photo, then refines what they found.
    truth = photo_with_square(tmp_path / "tiny.jpg", 100, (1783, 1324))
    out = json.loads(
        run("mask", tmp_path / "tiny.jpg", "red", "--out", tmp_path / "m", "--json").stdout
    )
    assert iou(read_mask(out["masks"][0]["mask_path"]), truth) >= 0.6


def test_the_web_apps_mask_is_the_refined_one(standin_models, tmp_path):
    import hashlib

    from wherein.indexer.indexed import IndexedFile
    from wherein.search.service.mask import MaskSession as MaskService

    path = tmp_path / "small.jpg"
    photo_with_square(path, 200, SQUARE_AT)
    st = path.stat()
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    f = IndexedFile(1, str(path), st.st_size, st.st_mtime_ns, sha, None, None, "jpeg", None)
    session = MaskService(standin_models, tmp_path / "cache")
    try:
        summary = session.get(f, "red").summary
    finally:
        session.close()  # its worker thread outlives the test otherwise
    x0, y0 = SQUARE_AT  # the overlay's box and the area are the refined mask's
    assert np.allclose(summary["bbox"]["largest"], [x0, y0, x0 + 200, y0 + 200], atol=12)
    assert summary["mask_area"] == pytest.approx(200 * 200 / (PHOTO[0] * PHOTO[1]), rel=0.2)


def test_a_hits_crop_passes_are_kept_in_the_vision_store_for_a_later_process(
    standin_models, tmp_path
):
    from wherein.indexer.models.clipseg import ClipSeg
    from wherein.indexer.models.modeldir import ModelDir
    from wherein.search.cache.vision_store import VisionStore
    from wherein.search.localize.masking import add_masks_to_hits

    truth = photo_with_square(tmp_path / "tiny.jpg", 100, (1783, 1324))
    hit = {"rank": 1, "path": str(tmp_path / "tiny.jpg"), "kind": "photo"}
    hit["region"] = [1300, 900, 2308, 1908]  # the region is the first crop, for every prompt
    store = tmp_path / "index" / "cache" / "vision"

    def masked(out: str) -> tuple[dict, int]:
        """A new process's mask of the hit (its own model and memory), and its vision passes."""
        model = ClipSeg.load(ModelDir(standin_models), num_threads=1)
        passes = [0]
        run = model.image_features

        def counted(image):
            passes[0] += 1
            return run(image)

        model.image_features = counted  # type: ignore[method-assign]
        (h,) = add_masks_to_hits(
            [hit], "red", tmp_path / out, standin_models, model=model, store=VisionStore(store)
        )
        return h, passes[0]

    first, passes = masked("a")
    assert passes >= 2  # the whole photo, the region's crop
    again, passes_again = masked("b")
    assert passes_again == 0
    # The same mask from kept passes as from computed ones.
    assert np.array_equal(read_mask(again["mask_path"]), read_mask(first["mask_path"]))
    assert iou(read_mask(again["mask_path"]), truth) >= 0.6
