"""Masks exported as dataset labels (COCO, YOLO, PNG masks) read back by other tools, pixel for pixel."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
from cli_run import run
from PIL import Image, ImageDraw

from wherein.search.export.labels import (
    Instance,
    LabelExportError,
    LabelledImage,
    LabelWriter,
    encode_piece,
    read_mask,
    write_labels,
)
from wherein.search.localize import contours
from wherein.search.localize.masking import regions

mask_utils = pytest.importorskip("pycocotools.mask")

RED = {"red_square.jpg", "red_disc.png"}


def hits_of(result) -> list[dict]:
    return json.loads(result.stdout)


def iou(a: np.ndarray, b: np.ndarray) -> float:
    return float((a & b).sum() / max(1, (a | b).sum()))


def rasterise_outlines(loops: list[np.ndarray], shape: tuple[int, int]) -> np.ndarray:
    """Even-odd fill at pixel centres of axis-aligned corner polygons (holes included)."""
    inside = np.zeros(shape, dtype=bool)
    for loop in loops:
        ring = np.vstack([loop, loop[:1]])
        for (x0, y0), (x1, y1) in zip(ring[:-1], ring[1:]):
            if x0 == x1 and y0 != y1:  # a vertical edge flips every centre to its left
                inside[min(y0, y1) : max(y0, y1), :x0] ^= True
    return inside


def rasterise_polygons(polys: list[list[float]], h: int, w: int) -> np.ndarray:
    """pycocotools' own polygon fill: the oracle a COCO/YOLO consumer would use."""
    if not polys:
        return np.zeros((h, w), dtype=bool)
    return mask_utils.decode(mask_utils.merge(mask_utils.frPyObjects(polys, h, w))).astype(bool)


def yolo_mask(label_file: Path, w: int, h: int) -> np.ndarray:
    polys = []
    for line in label_file.read_text().splitlines():
        cls, *coords = line.split()
        xy = np.array(coords, dtype=float).reshape(-1, 2)
        assert (xy >= 0).all() and (xy <= 1).all()
        polys.append((xy * [w, h]).ravel().tolist())
    return rasterise_polygons(polys, h, w)


# -- outlines -----------------------------------------------------------------------------
def test_outlines_rebuild_every_mask_exactly():
    rng = np.random.default_rng(7)
    for trial in range(30):
        h, w = rng.integers(1, 40, size=2)
        mask = rng.random((h, w)) < rng.uniform(0.2, 0.8)
        loops = contours.outlines(mask)
        assert np.array_equal(rasterise_outlines(loops, mask.shape), mask), trial
        outer = [p for p in loops if contours.signed_area(p) > 0]
        assert len(outer) == len(regions(mask))  # 4-connected, like masking.regions
        assert sum(contours.signed_area(p) for p in loops) == mask.sum()


def test_polygons_of_a_holed_and_a_diagonal_mask():
    mask = np.zeros((10, 12), dtype=bool)
    mask[1:8, 1:8] = True
    mask[3:5, 3:5] = False  # a hole: YOLO polygons fill it
    mask[8, 8] = True  # touches the square only at a corner: its own polygon
    polys = contours.polygons(mask, tolerance=0, min_area=1)
    assert [contours.signed_area(p) for p in polys] == [49.0, 1.0]
    filled = rasterise_polygons([p.ravel().tolist() for p in polys], *mask.shape)
    hole = np.zeros_like(mask)
    hole[3:5, 3:5] = True
    assert np.array_equal(filled, mask | hole)


@pytest.mark.parametrize("shape", ["ellipse", "rect", "two"])
def test_simplified_polygons_rasterise_back_close_to_the_mask(shape):
    img = Image.new("1", (300, 200), 0)
    d = ImageDraw.Draw(img)
    if shape == "ellipse":
        d.ellipse((30, 20, 260, 180), fill=1)
    elif shape == "rect":
        d.polygon([(20, 30), (200, 10), (280, 150), (60, 190)], fill=1)
    else:
        d.ellipse((10, 10, 110, 110), fill=1)
        d.ellipse((150, 60, 290, 190), fill=1)
    mask = np.asarray(img, dtype=bool)
    polys = contours.polygons(mask)
    assert len(polys) == (2 if shape == "two" else 1)
    back = rasterise_polygons([p.ravel().tolist() for p in polys], *mask.shape)
    assert iou(back, mask) >= 0.98
    assert max(len(p) for p in polys) < mask.sum() ** 0.5  # simplified, not a staircase


# -- writer API (what a sharded writer builds on) -------------------------------------------
def _items(tmp_path: Path) -> list[LabelledImage]:
    items = []
    for i, (w, h) in enumerate([(64, 48), (50, 70), (30, 30)], start=1):
        path = tmp_path / f"img{i}.png"
        Image.new("RGB", (w, h)).save(path)
        m = np.zeros((h, w), dtype=bool)
        if i != 3:  # the third image has an empty mask: a background example
            m[5 * i : 30, 4 : 20 + i] = True
        items.append(LabelledImage(i, str(path), w, h, [Instance("dog", m, 0.5 + i / 10)]))
    return items


def test_pieces_merge_in_any_order_into_the_same_coco(tmp_path):
    items = _items(tmp_path)
    write_labels(items, tmp_path / "one.coco.json", "coco", ["dog"])
    # Pieces made elsewhere (pickled, as a Ray worker returns them), merged in reverse order.
    pieces = [pickle.loads(pickle.dumps(encode_piece(it, "coco", ["dog"]))) for it in items]
    with LabelWriter(tmp_path / "two.coco.json", "coco", ["dog"]) as w:
        for p in reversed(pieces):
            w.add(p)
    one = json.loads((tmp_path / "one.coco.json").read_text())
    two = json.loads((tmp_path / "two.coco.json").read_text())

    def by_image(doc):
        return {
            a["image_id"]: {k: v for k, v in a.items() if k != "id"} for a in doc["annotations"]
        }

    assert by_image(one) == by_image(two) and len(by_image(one)) == 2
    assert sorted(i["id"] for i in one["images"]) == sorted(i["id"] for i in two["images"])
    for item in items[:2]:
        seg = by_image(one)[item.id]["segmentation"]
        assert np.array_equal(mask_utils.decode(seg).astype(bool), item.instances[0].mask)


def test_a_failed_export_leaves_nothing(tmp_path):
    items = _items(tmp_path)
    dest = tmp_path / "out.yolo"
    with pytest.raises(RuntimeError), LabelWriter(dest, "yolo", ["dog"]) as w:
        w.add(w.encode(items[0]))
        raise RuntimeError("interrupted")
    assert not dest.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    with pytest.raises(LabelExportError, match="not one of"):
        write_labels(items, tmp_path / "x.coco.json", "coco", ["cat"])
    assert not (tmp_path / "x.coco.json").exists()
    (tmp_path / "full.masks").mkdir()
    (tmp_path / "full.masks" / "keep.txt").write_text("mine")
    with pytest.raises(LabelExportError, match="not empty"):
        write_labels(items, tmp_path / "full.masks", "masks", ["dog"])


# -- end to end: wherein search/select --mask --export -------------------------------------
@pytest.fixture()
def indexed(env, shapes) -> Path:
    run("index", shapes, "-q")
    return shapes


def test_search_exports_coco_that_pycocotools_reads_pixel_for_pixel(indexed, tmp_path):
    from pycocotools.coco import COCO

    out = tmp_path / "red.coco.json"
    hits = hits_of(
        run(
            "search", "red", "-k", "3", "--mask", "--out", tmp_path / "m", "--export", out, "--json"
        )
    )
    coco = COCO(str(out))
    assert [c["name"] for c in coco.loadCats(coco.getCatIds())] == ["red"]
    assert sorted(coco.getImgIds()) == sorted(h["id"] for h in hits)
    for h in hits:
        (img,) = coco.loadImgs(h["id"])
        assert (img["file_name"], img["width"], img["height"]) == (
            h["path"],
            h["width"],
            h["height"],
        )
        anns = coco.loadAnns(coco.getAnnIds(imgIds=h["id"]))
        mask = read_mask(h["mask_path"])
        if Path(h["path"]).name not in RED:
            assert anns == [] and not mask.any()  # no red: listed, no annotation
            continue
        (ann,) = anns
        assert np.array_equal(coco.annToMask(ann).astype(bool), mask)
        x0, y0, x1, y1 = h["bbox"]["union"]
        assert ann["bbox"] == [x0, y0, x1 - x0, y1 - y0]
        assert ann["area"] == mask.sum() and ann["score"] == pytest.approx(h["mask_score"])


def test_select_exports_yolo_polygons_that_rasterise_back(indexed, tmp_path):
    yaml = pytest.importorskip("yaml")
    out = tmp_path / "red.yolo"
    hits = hits_of(
        run(
            "select",
            "red",
            "-p",
            "0.5",
            "--mask",
            "--out",
            tmp_path / "m",
            "--export",
            out,
            "--json",
        )
    )
    assert {Path(h["path"]).name for h in hits} == RED
    data = yaml.safe_load((out / "data.yaml").read_text())
    assert data["names"] == {0: "red"} and data["path"] == str(out)
    assert (out / data["train"]).read_text().splitlines() == [
        f"./images/{Path(h['path']).stem}-{h['id']}{Path(h['path']).suffix}" for h in hits
    ]
    for h in hits:
        image = out / f"images/{Path(h['path']).stem}-{h['id']}{Path(h['path']).suffix}"
        assert os.path.samefile(image, h["path"])  # a link to the original
        label = out / "labels" / f"{image.stem}.txt"
        assert all(line.split()[0] == "0" for line in label.read_text().splitlines())
        back = yolo_mask(label, h["width"], h["height"])
        assert iou(back, read_mask(h["mask_path"])) >= 0.9


def test_png_masks_with_manifest(indexed, tmp_path):
    out = tmp_path / "red-masks"
    hits = hits_of(
        run(
            "search",
            "red",
            "-k",
            "3",
            "--mask",
            "--out",
            tmp_path / "m",
            "--export",
            out,
            "--format",
            "masks",
            "--json",
        )
    )
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["categories"] == [{"id": 1, "name": "red"}]
    assert [e["id"] for e in manifest["images"]] == [h["id"] for h in hits]
    for h, entry in zip(hits, manifest["images"]):
        index = np.asarray(Image.open(out / entry["mask"]))
        mask = read_mask(h["mask_path"])
        assert np.array_equal(index == 1, mask) and set(np.unique(index)) <= {0, 1}
        (ann,) = entry["annotations"]
        assert (ann["category_id"], ann["category"]) == (1, "red")
        assert ann["area"] == mask.sum() and ann["bbox"] == h.get("bbox", {}).get("union")


def test_png_masks_hold_one_value_per_category(tmp_path):
    Image.new("RGB", (40, 30)).save(tmp_path / "a.png")
    masks = [np.zeros((30, 40), dtype=bool) for _ in range(3)]
    masks[0][:10] = True
    masks[1][10:20, :20] = True
    masks[2][25:, 30:] = True
    item = LabelledImage(
        5, str(tmp_path / "a.png"), 40, 30, [Instance(c, m) for c, m in zip("abc", masks)]
    )
    out = write_labels([item], tmp_path / "x.masks", "masks", ["c", "b", "a"])
    index = np.asarray(Image.open(out / "masks" / "a-5.png"))
    expected = np.zeros((30, 40), dtype=np.uint8)
    for value, m in zip((3, 2, 1), masks):  # ids follow the categories' order
        expected[m] = value
    assert np.array_equal(index, expected)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["categories"] == [
        {"id": 1, "name": "c"},
        {"id": 2, "name": "b"},
        {"id": 3, "name": "a"},
    ]
    assert [a["bbox"] for a in manifest["images"][0]["annotations"]] == [
        [0, 0, 40, 10],
        [0, 10, 20, 20],
        [30, 25, 40, 30],
    ]


def test_category_from_labels_names_each_mask_by_its_stored_label(indexed, tmp_path):
    out = tmp_path / "shapes.coco.json"
    res = run(
        "search", "red", "-k", "2", "--mask", "--export", out, "--category-from-labels", ok=False
    )
    assert res.exit_code == 1 and "wherein label" in res.output and not out.exists()
    run("label", "--labels", "red shape,blue shape", "--json")
    hits = hits_of(
        run(
            "search",
            "red",
            "-k",
            "2",
            "--mask",
            "--out",
            tmp_path / "m",
            "--export",
            out,
            "--category-from-labels",
            "--json",
        )
    )
    doc = json.loads(out.read_text())
    cats = {c["id"]: c["name"] for c in doc["categories"]}
    assert list(cats.values()) == ["blue shape", "red shape"]  # every stored label, not the prompt
    assert {Path(h["path"]).name for h in hits} == RED
    assert [cats[a["category_id"]] for a in doc["annotations"]] == ["red shape", "red shape"]


def test_label_exports_need_masks_and_a_usable_destination(indexed, tmp_path):
    out = tmp_path / "red.coco.json"
    res = run("search", "red", "--export", out, ok=False)
    assert res.exit_code == 2 and "--mask" in res.output and not out.exists()
    res = run("select", "red", "-p", "0.5", "--export", tmp_path / "x.yolo", ok=False)
    assert res.exit_code == 2 and "--mask" in res.output
    (tmp_path / "busy.yolo").mkdir()
    (tmp_path / "busy.yolo" / "a").write_text("x")
    res = run(
        "select",
        "red",
        "-p",
        "0.5",
        "--mask",
        "--out",
        tmp_path / "m",
        "--export",
        tmp_path / "busy.yolo",
        ok=False,
    )
    assert res.exit_code == 1 and "not empty" in res.output
    assert not (tmp_path / "m").exists()  # refused before any mask was made
    res = run("dupes", "--export", tmp_path / "d.coco.json", ok=False)
    # dupes has no --mask: the error does not offer it
    assert res.exit_code == 2 and "makes none" in res.output and "--mask" not in res.output
    # Plain exports still work from search, as from select.
    hits = hits_of(run("search", "red", "-k", "2", "--export", tmp_path / "r.jsonl", "--json"))
    rows = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert rows == hits
