"""Masks land where the prompt's colour is, at the original size and orientation; files and hits."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image, ImageDraw

from wherein.indexer.models.clipseg import ClipSeg
from wherein.indexer.models.modeldir import ModelDir
from wherein.indexer.models.standins.palette import rgb255
from wherein.schemas.records import HIT_SCHEMA_PATH, Hit
from wherein.search.cli import cli
from wherein.search.localize.masking import (
    MaskResult,
    add_masks_to_hits,
    mask_file,
    plan_parallelism,
    regions,
    stretch,
)

from conftest import BACKGROUND, draw_shape


@pytest.fixture(scope="module")
def model(standin_models) -> ClipSeg:
    return ClipSeg.load(ModelDir(standin_models), num_threads=1)


def iou(a: np.ndarray, b: np.ndarray) -> float:
    return float((a & b).sum() / max(1, (a | b).sum()))


def drawn_region(size, px, shape="rect") -> np.ndarray:
    """The pixels draw_shape filled, drawn again the same way."""
    img = Image.new("L", size, 0)
    d = ImageDraw.Draw(img)
    (d.ellipse if shape == "ellipse" else d.rectangle)(px, fill=255)
    return np.asarray(img) > 0


@pytest.mark.parametrize(
    ("size", "box", "shape", "ext"),
    [
        ((320, 240), (0.15, 0.15, 0.85, 0.85), "rect", "png"),
        ((200, 600), (0.1, 0.5, 0.8, 0.9), "rect", "jpg"),
        ((1000, 300), (0.05, 0.1, 0.45, 0.7), "ellipse", "webp"),
        ((1000, 300), (0.6, 0.3, 0.95, 0.95), "rect", "png"),
    ],
)
def test_red_mask_covers_the_red_shape(model, tmp_path, size, box, shape, ext):
    path = tmp_path / f"shape.{ext}"
    kw = {"quality": 95} if ext == "jpg" else {"lossless": True} if ext == "webp" else {}
    px = draw_shape(path, "red", size=size, box=box, shape=shape, **kw)
    ((res, _),) = mask_file(model, path, ["red"])
    assert res.mask.shape == (size[1], size[0]) and res.soft.shape == (size[1], size[0])
    truth = drawn_region(size, px, shape)
    assert iou(res.mask, truth) >= 0.8
    x0, y0, x1, y1 = res.bbox_largest
    tol = max(size) * 0.03
    assert abs(x0 - px[0]) <= tol and abs(y0 - px[1]) <= tol
    assert abs(x1 - (px[2] + 1)) <= tol and abs(y1 - (px[3] + 1)) <= tol
    assert res.area == pytest.approx(truth.mean(), abs=0.05)
    assert res.score > 0.8


def test_other_colour_gives_an_empty_mask(model, tmp_path):
    draw_shape(tmp_path / "red.png", "red")
    ((blue, _), (red, _)) = mask_file(model, tmp_path / "red.png", ["blue", "a red square"])
    assert blue.area < 0.005 and blue.bbox is None and blue.score == 0.0
    assert red.area > 0.3


@pytest.mark.parametrize(("orientation", "turns"), [(6, -1), (8, 1)])
def test_exif_rotated_jpeg_mask_is_in_viewer_orientation(model, tmp_path, orientation, turns):
    """The stored pixels are landscape; a viewer shows them rotated, and so must the mask be."""
    stored_size = (480, 240)
    stored = Image.new("RGB", stored_size, BACKGROUND)
    px = (20, 30, 179, 209)  # left part of the stored image: placement tells rotations apart
    ImageDraw.Draw(stored).rectangle(px, fill=rgb255("red"))
    exif = Image.Exif()
    exif[0x0112] = orientation
    path = tmp_path / "rotated.jpg"
    stored.save(path, quality=95, exif=exif)
    truth_stored = drawn_region(stored_size, px)
    # Orientation 6: rotate 90 degrees clockwise to view; 8: counter-clockwise (np.rot90 turns CCW).
    truth = np.rot90(truth_stored, k=turns)
    ((res, _),) = mask_file(model, path, ["red"])
    assert res.size == (240, 480)
    assert iou(res.mask, truth) >= 0.8
    assert (
        iou(res.mask, np.rot90(truth_stored, k=-turns)) < 0.2
    )  # the wrong rotation does not match


def test_files_are_binary_full_size_mask_and_tinted_overlay(model, tmp_path):
    px = draw_shape(tmp_path / "photo.png", "green", size=(300, 200), box=(0.5, 0.1, 0.9, 0.6))
    out = tmp_path / "out"
    ((res, files),) = mask_file(model, tmp_path / "photo.png", ["green"], out)
    assert files == {
        "mask": str(out / "photo.green.mask.png"),
        "overlay": str(out / "photo.green.overlay.jpg"),
    }
    png = Image.open(files["mask"])
    assert png.size == (300, 200)
    arr = np.asarray(png.convert("L"))
    assert set(np.unique(arr).tolist()) == {0, 255}
    np.testing.assert_array_equal(arr > 0, res.mask)
    ov = np.asarray(Image.open(files["overlay"]).convert("RGB"), dtype=np.int32)
    assert ov.shape == (200, 300, 3)
    inside = ov[px[1] + 10 : px[3] - 10, px[0] + 10 : px[2] - 10]
    outside = ov[150:, :100]
    # Magenta tint inside: red pulled up, green pulled down; background untouched outside.
    green = np.array(rgb255("green"))
    assert inside[..., 0].mean() - green[0] > 100 and green[1] - inside[..., 1].mean() > 60
    assert np.abs(outside - np.array(BACKGROUND)).mean() < 8


def test_regions_label_4_connected_components_with_exclusive_boxes():
    m = np.zeros((12, 20), dtype=bool)
    m[1:4, 2:6] = True  # 12 px
    m[6:11, 10:19] = True  # 45 px
    m[5, 6] = True  # touches the first only diagonally: its own region
    m[0:3, 12] = m[2, 12:16] = m[0:3, 15] = True  # a U: two runs on top join below
    rs = regions(m)
    assert [r.area for r in rs] == [45, 12, 8, 1]
    assert rs[0].bbox == (10, 6, 19, 11)
    assert rs[1].bbox == (2, 1, 6, 4)
    assert rs[2].bbox == (12, 0, 16, 3)
    assert rs[3].bbox == (6, 5, 7, 6)
    assert regions(np.zeros((5, 5), bool)) == []


def test_regions_agree_with_scipy_on_random_masks():
    ndimage = pytest.importorskip("scipy.ndimage")
    rng = np.random.default_rng(0)
    for density in (0.3, 0.5, 0.6):
        m = rng.random((60, 80)) < density
        labels, n = ndimage.label(m)  # 4-connectivity by default
        areas = sorted(np.bincount(labels.ravel())[1:].tolist(), reverse=True)
        ours = regions(m)
        assert len(ours) == n
        assert [r.area for r in ours] == areas
        big = np.argmax(np.bincount(labels.ravel())[1:]) + 1
        ys, xs = np.nonzero(labels == big)
        if areas[0] != (areas[1:2] or [0])[0]:  # unique largest: its box must match
            assert ours[0].bbox == (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)


def test_union_box_spans_every_region():
    prob = np.zeros((100, 200), np.float32)
    prob[10:30, 20:60] = 0.9  # larger
    prob[70:80, 150:170] = 0.8
    res = MaskResult.from_probability("x", prob, (200, 100))
    assert res.bbox_largest == [20, 10, 60, 30]
    assert res.bbox_union == [20, 10, 170, 80]
    assert res.area == pytest.approx((800 + 200) / 20000)
    assert res.score == pytest.approx((800 * 0.9 + 200 * 0.8) / 1000, abs=1e-6)


def test_plan_parallelism_fills_the_cores():
    assert plan_parallelism(10, cores=2) == (2, 1)
    assert plan_parallelism(1, cores=16) == (1, 16)
    assert plan_parallelism(10, cores=16) == (4, 4)
    assert plan_parallelism(3, cores=1) == (1, 1)


def _hits(tmp_path: Path) -> tuple[list[Hit], dict[str, tuple]]:
    specs = [
        ("red_a.png", "red", (320, 240), (0.1, 0.1, 0.6, 0.7)),
        ("blue_b.png", "blue", (300, 300), (0.2, 0.2, 0.8, 0.8)),
        ("red_c.jpg", "red", (200, 500), (0.3, 0.4, 0.9, 0.95)),
        ("red_d.png", "red", (640, 200), (0.5, 0.2, 0.9, 0.9)),
    ]
    hits, boxes = [], {}
    for i, (name, colour, size, box) in enumerate(specs, start=1):
        boxes[name] = draw_shape(tmp_path / "photos" / name, colour, size=size, box=box)
        hits.append(Hit(i, str(tmp_path / "photos" / name), 0.5, 0.9, *size, id=100 + i))
    return hits, boxes


def test_add_masks_to_hits_writes_files_and_sets_fields(model, standin_models, tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(HIT_SCHEMA_PATH.read_text())
    hits, boxes = _hits(tmp_path)
    out = tmp_path / "masks"
    masked = add_masks_to_hits(hits, "red", out, standin_models, model=model)
    assert [h.rank for h in masked] == [1, 2, 3, 4]
    for h in masked:
        stem = Path(h.path).stem
        assert h.mask_path == str(out / f"{h.rank}-{stem}.red.mask.png")
        assert h.overlay_path == str(out / f"{h.rank}-{stem}.red.overlay.jpg")
        assert Path(h.mask_path).is_file() and Path(h.overlay_path).is_file()
        assert Image.open(h.mask_path).size == (h.width, h.height)
        px = boxes[Path(h.path).name]
        if "red" in stem:
            assert h.mask_area > 0.2 and h.mask_score > 0.8
            box = h.bbox["largest"]
            assert abs(box[0] - px[0]) <= 10 and abs(box[3] - (px[3] + 1)) <= 10
            assert h.bbox["union"] == box
        else:
            assert h.mask_area < 0.005 and h.bbox is None
        jsonschema.validate(h.to_dict(), schema)
        assert h.to_dict()["mask_path"] == h.mask_path
    # Parallel (several workers) and one-at-a-time give the same masks.
    kept = add_masks_to_hits(hits, "red", tmp_path / "again", standin_models, min_mask_area=0.05)
    assert [h.rank for h in kept] == [1, 3, 4]  # the blue photo has no red: dropped
    assert [h.bbox for h in kept] == [masked[i].bbox for i in (0, 2, 3)]
    # A dropped hit leaves no files behind; the kept ones have theirs.
    assert sorted(p.name for p in (tmp_path / "again").iterdir()) == sorted(
        name for h in kept for name in (Path(h.mask_path).name, Path(h.overlay_path).name)
    )
    nothing = add_masks_to_hits(hits, "red", tmp_path / "none", standin_models, min_mask_area=0.9)
    assert nothing == [] and not (tmp_path / "none").exists()


def test_add_masks_to_hits_accepts_dicts_and_survives_a_vanished_file(
    model, standin_models, tmp_path
):
    hits, _ = _hits(tmp_path)
    dicts = [{"rank": h.rank, "path": h.path, "score": h.score} for h in hits[:2]]
    Path(hits[1].path).unlink()
    errors = []
    out = add_masks_to_hits(
        dicts,
        "red",
        tmp_path / "m",
        standin_models,
        model=model,
        on_error=lambda h, why: errors.append(h["rank"]),
    )
    assert out[0]["mask_area"] > 0.2 and out[0]["score"] == 0.5
    assert out[1]["mask_path"] is None and out[1]["mask_area"] is None
    assert errors == [2]
    assert (
        add_masks_to_hits(
            dicts, "red", tmp_path / "m", standin_models, min_mask_area=0.0, model=model
        )
        == out[:1]
    )


def test_add_masks_to_hits_on_a_dataclass_without_mask_fields_warns(
    model, standin_models, tmp_path
):
    @dataclass
    class Bare:
        rank: int
        path: str

    draw_shape(tmp_path / "r.png", "red")
    with pytest.warns(UserWarning, match="mask_path"):
        (h,) = add_masks_to_hits(
            [Bare(1, str(tmp_path / "r.png"))], "red", tmp_path / "m", standin_models, model=model
        )
    assert h == Bare(1, str(tmp_path / "r.png"))
    assert (tmp_path / "m" / "1-r.red.mask.png").is_file()


def test_cli_mask_json(env, tmp_path):
    px = draw_shape(
        tmp_path / "pic.jpg", "red", size=(400, 300), box=(0.1, 0.2, 0.5, 0.8), quality=95
    )
    out = tmp_path / "out"
    r = CliRunner().invoke(
        cli, ["mask", str(tmp_path / "pic.jpg"), "red", "blue", "--out", str(out), "--json"]
    )
    assert r.exit_code == 0, r.output
    data = json.loads(r.output[r.output.index("{") :])
    red, blue = data["masks"]
    assert data["standin"] is True
    assert red["prompt"] == "red" and red["width"] == 400 and red["height"] == 300
    box = red["bbox"]["largest"]
    assert abs(box[0] - px[0]) <= 12 and abs(box[2] - (px[2] + 1)) <= 12
    assert red["bbox"]["union"] == box
    assert red["mask_area"] > 0.15 and blue["mask_area"] < 0.005 and blue["bbox"] is None
    assert Path(red["mask_path"]).is_file() and Path(red["overlay_path"]).is_file()
    assert red["mask_path"] != blue["mask_path"]


def test_cli_mask_table_and_errors(env, tmp_path):
    draw_shape(tmp_path / "pic.png", "blue")
    r = CliRunner().invoke(cli, ["mask", str(tmp_path / "pic.png"), "blue", "--no-files"])
    assert r.exit_code == 0, r.output
    assert "blue" in r.output and "%" in r.output and "wrote" not in r.output
    (tmp_path / "bad.jpg").write_bytes(b"not an image")
    r = CliRunner().invoke(cli, ["mask", str(tmp_path / "bad.jpg"), "red"])
    assert r.exit_code == 1 and "bad.jpg" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(
        cli, ["mask", str(tmp_path / "pic.png"), "red", "--models", str(tmp_path / "none")]
    )
    assert r.exit_code == 1 and "not found" in r.output


def test_cli_mask_out_under_a_file_is_one_line(env, tmp_path):
    draw_shape(tmp_path / "pic.png", "red")
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    out = notes / "sub"
    r = CliRunner().invoke(cli, ["mask", str(tmp_path / "pic.png"), "red", "--out", str(out)])
    assert r.exit_code == 1, r.output
    last = r.stderr.strip().splitlines()[-1]  # after the stand-in banner
    assert last == f"Error: {out}: cannot create the mask folder, {notes} is not a folder"
    assert notes.read_text() == "mine"


def test_search_with_masks_end_to_end(env, shapes, tmp_path):
    """`wherein search red --mask`: the red hits come back with their masks in place."""
    if "search" not in cli.commands:
        pytest.skip("search command not present in this build")
    runner = CliRunner()
    r = runner.invoke(cli, ["index", str(shapes), "-q"])
    assert r.exit_code == 0, r.output
    out = tmp_path / "masks"
    r = runner.invoke(cli, ["search", "red", "-k", "3", "--mask", "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    hits = json.loads(r.output[r.output.index("[") :])
    top = [h for h in hits if "red" in Path(h["path"]).name]
    assert len(top) == 2 and {h["rank"] for h in top} == {1, 2}
    for h in top:
        assert h["mask_area"] > 0.3 and h["mask_score"] > 0.8
        assert Image.open(h["mask_path"]).size == (h["width"], h["height"])
        assert Path(h["overlay_path"]).is_file()
        x0, y0, x1, y1 = h["bbox"]["largest"]
        assert x0 < h["width"] * 0.2 and x1 > h["width"] * 0.8 and y0 < h["height"] * 0.2
    r = runner.invoke(
        cli,
        [
            "search",
            "red",
            "-k",
            "3",
            "--mask",
            "--out",
            str(out),
            "--json",
            "--min-mask-area",
            "0.1",
        ],
    )
    assert r.exit_code == 0, r.output
    kept = json.loads(r.output[r.output.index("[") :])
    assert sorted(h["rank"] for h in kept) == [1, 2]  # the third (not red) is dropped


@pytest.mark.parametrize("size", [(1000, 700), (352, 900), (200, 600), (353, 352)])
def test_stretch_is_pillow_bilinear(size):
    prob = np.random.default_rng(3).random((352, 352)).astype(np.float32)
    ref = np.asarray(Image.fromarray(prob).resize(size, Image.BILINEAR))
    out = stretch(prob, size)
    assert out.shape == (size[1], size[0])
    np.testing.assert_allclose(out, ref, atol=1e-5)


# -- graded maps: the threshold and the photo-size measures ----------------------------------------
def _sigmoid(z: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-z))).astype(np.float32)


def test_threshold_is_exact_on_a_graded_logit_map():
    """A logit ramp of 0.1 per source pixel: p > 0.5 (not 0.4 or 0.6) decides every pixel here."""
    x = np.arange(352, dtype=np.float64)
    # At the map's own size: a rectangle, source columns 101..250, rows 61..300.
    logits = 0.1 * np.minimum.reduce(
        np.broadcast_arrays(x[None] - 100.5, 250.5 - x[None], x[:, None] - 60.5, 300.5 - x[:, None])
    )
    res = MaskResult.from_probability("ramp", _sigmoid(logits), (352, 352))
    assert [r.bbox for r in res.regions] == [(101, 61, 251, 301)]
    assert res.runs.area == 150 * 240 and res.area == pytest.approx(150 * 240 / 352**2)
    # Stretched to 1000 px: a band of columns. p crosses 0.5 at source x ~ 100.25 and ~ 250.75
    # (0.25 / 0.75 of the way between the samples at logits -0.025 / +0.075 and back), so photo
    # columns x with (x + 0.5) * 352 / 1000 - 0.5 in (100.25, 250.75): x = 286 .. 713.
    band = 0.1 * np.minimum(x - 100.25, 250.75 - x)
    for size, transpose in (((1000, 700), False), ((700, 1000), True)):
        logits = np.broadcast_to(band[:, None] if transpose else band[None], (352, 352))
        res = MaskResult.from_probability("band", _sigmoid(logits), size)
        box = (0, 286, 700, 714) if transpose else (286, 0, 714, 700)
        assert [r.bbox for r in res.regions] == [box]
        assert res.runs.area == 428 * 700 and res.area == pytest.approx(428 / 1000)
        assert res.mask.sum() == 428 * 700


def _graded_maps() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    yy, xx = np.mgrid[0:352, 0:352] / 351.0
    blobs = np.zeros((352, 352))
    for _ in range(6):
        cy, cx, s = rng.random(), rng.random(), 0.03 + 0.1 * rng.random()
        blobs += np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * s * s))
    small = rng.random((40, 40)).astype(np.float32)
    return {
        "ramp": _sigmoid(8.3 * (xx + 0.41 * yy - 0.7013)),  # no pixel lands on p = 0.5
        "blobs": np.clip(blobs, 0, 1).astype(np.float32),
        "noise": np.asarray(Image.fromarray(small).resize((352, 352), Image.BILINEAR)),
    }


@pytest.mark.parametrize(
    "size",
    [(352, 352), (353, 360), (1000, 700), (700, 1000), (2400, 1800), (3000, 640), (200, 600)],
)
def test_measures_match_the_photo_size_mask(size):
    """Regions, boxes, area and score measured without the photo-size map equal thresholding it."""
    w, h = size
    for name, prob in _graded_maps().items():
        soft = stretch(prob, size)
        truth = soft > 0.5
        want = regions(truth)
        res = MaskResult.from_probability(name, prob, size)
        assert len(res.regions) == len(want), name
        for got, ref in zip(res.regions, want, strict=True):
            assert abs(got.area - ref.area) <= 1, name
            assert max(abs(a - b) for a, b in zip(got.bbox, ref.bbox, strict=True)) <= 1, name
        assert abs(res.runs.area - int(truth.sum())) <= 2, name
        assert abs(res.area - truth.mean()) <= 2 / (w * h)
        ref_score = float(soft[truth].mean()) if truth.any() else 0.0
        assert res.score == pytest.approx(ref_score, abs=1e-5), name
        assert (res.mask != truth).sum() <= 2, name


def test_big_jpeg_full_size_mask_and_preview_overlay(model, tmp_path):
    size = (3000, 2000)
    px = draw_shape(tmp_path / "big.jpg", "red", size=size, box=(0.2, 0.3, 0.7, 0.9), quality=90)
    ((res, files),) = mask_file(model, tmp_path / "big.jpg", ["red"], tmp_path / "out")
    mask = Image.open(files["mask"])
    assert mask.mode == "1" and mask.size == size
    assert iou(np.asarray(mask, dtype=bool), drawn_region(size, px)) >= 0.8
    overlay = Image.open(files["overlay"])
    assert max(overlay.size) <= 1024 and abs(overlay.size[0] / overlay.size[1] - 1.5) < 0.01
    ((full, files),) = mask_file(
        model, tmp_path / "big.jpg", ["red"], tmp_path / "full", full_size_overlays=True
    )
    assert Image.open(files["overlay"]).size == size
    assert full.bbox == res.bbox  # the overlay's size changes nothing measured


class _Counting:
    def __init__(self, graph) -> None:
        self.graph, self.calls = graph, 0

    def run(self, *inputs):
        self.calls += 1
        return self.graph.run(*inputs)


def test_another_prompt_on_masked_hits_reuses_their_vision_pass(model, standin_models, tmp_path):
    counted = ClipSeg(
        _Counting(model.vision),
        model.text,
        _Counting(model.decoder),
        model.token_table,
        model.projection,
        model.tokenizer,
    )
    hits, _ = _hits(tmp_path)
    first = add_masks_to_hits(hits, "red", tmp_path / "m", standin_models, model=counted)
    assert counted.vision.calls == 4
    second = add_masks_to_hits(hits, "blue", tmp_path / "m", standin_models, model=counted)
    assert counted.vision.calls == 4 and counted.decoder.calls == 8
    assert [h.mask_area > 0.2 for h in first] == [True, False, True, True]
    assert [h.mask_area > 0.2 for h in second] == [False, True, False, False]
    # A file changed since: its pass is run again, and the mask follows the new content.
    draw_shape(Path(hits[0].path), "blue", size=(320, 240))
    (again,) = add_masks_to_hits(hits[:1], "blue", tmp_path / "m", standin_models, model=counted)
    assert counted.vision.calls == 5 and again.mask_area > 0.3


def test_cli_mask_full_size_overlays(env, tmp_path):
    draw_shape(tmp_path / "wide.png", "red", size=(1600, 1200), box=(0.1, 0.2, 0.5, 0.8))
    sizes = {}
    for flag in ([], ["--full-size-overlays"]):
        out = tmp_path / ("full" if flag else "preview")
        r = CliRunner().invoke(
            cli, ["mask", str(tmp_path / "wide.png"), "red", "--out", str(out), "--json", *flag]
        )
        assert r.exit_code == 0, r.output
        (red,) = json.loads(r.output[r.output.index("{") :])["masks"]
        assert red["mask_path"] == str(out / "wide.red.mask.png")
        assert Image.open(red["mask_path"]).size == (1600, 1200)
        sizes[bool(flag)] = Image.open(red["overlay_path"]).size
    assert sizes == {False: (1024, 768), True: (1600, 1200)}
