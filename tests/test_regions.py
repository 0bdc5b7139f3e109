"""Regions of large photos (`wherein index --regions`): a small thing in a big photo is found,
with its region; photos without it keep their probabilities; an index gains regions without
re-embedding its photos, and keeps the setting."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from cli_run import run
from PIL import Image, ImageDraw

from wherein.indexer.models.standins.palette import COLOURS
from wherein.indexer.store.index_store import IndexStore
from wherein.schemas.records import HIT_SCHEMA_PATH

W, H = 2016, 1512  # large enough to be cut (3 MP: quick to draw and decode)
SPECK = (1400, 300, 150)  # x, y, side of the red square: 0.7% of the photo


def rgb(name: str) -> tuple[int, int, int]:
    return tuple(round(c * 255) for c in COLOURS[name])  # type: ignore[return-value]


def draw_photos(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    img = Image.new("RGB", (W, H), rgb("white"))
    x, y, side = SPECK
    ImageDraw.Draw(img).rectangle((x, y, x + side - 1, y + side - 1), fill=rgb("red"))
    img.save(root / "speck.png")
    Image.new("RGB", (W, H), rgb("white")).save(root / "plain.png")
    img = Image.new("RGB", (W, H), rgb("white"))
    ImageDraw.Draw(img).rectangle((300, 200, 1500, 1200), fill=rgb("blue"))
    img.save(root / "blue.png")
    img = Image.new("RGB", (W, H), rgb("blue"))  # its one region shows less blue than it
    ImageDraw.Draw(img).rectangle((500, 900, 599, 999), fill=rgb("yellow"))
    img.save(root / "sea.png")
    # Confetti: red spread all over among other colours, no red thing anywhere. Each of
    # its regions shows a share of red a little off the whole photo's, by chance.
    rng = np.random.default_rng(7)
    names = ["red", "green", "blue", "yellow", "purple", "white"]
    for n in range(3):
        cells = rng.integers(0, len(names), size=(H // 84, W // 84))
        arr = np.array([rgb(names[i]) for i in cells.ravel()], dtype=np.uint8)
        tiles = arr.reshape(*cells.shape, 3).repeat(84, 0).repeat(84, 1)
        Image.fromarray(tiles).save(root / f"confetti{n}.png")


def hits(*args) -> dict[str, dict]:
    out = json.loads(run("search", *args, "--json").stdout)
    return {Path(h["path"]).name: h for h in out}


def whole_vectors(index: Path) -> dict[int, bytes]:
    """file id -> the bytes of its whole item's vector."""
    with IndexStore.open(index) as store:
        cat = store.catalog
        ids = [row[0] for row in cat.known_files().values()]
        return {i: v.tobytes() for i, v in cat.file_vectors(ids).items()}


@pytest.fixture()
def photos(tmp_path) -> Path:
    draw_photos(tmp_path / "photos")
    return tmp_path / "photos"


def test_a_small_red_square_in_a_big_photo_is_found_with_its_region(env, photos):
    plain_index = env["index"].with_name("plain")
    run("index", photos, "-q", "--index", plain_index)
    before = hits("red", "-k", "9", "--index", plain_index)
    # One glance at the whole photo: the square is too small to count.
    assert before["speck.png"]["probability"] < 1.2 * before["plain.png"]["probability"]
    assert "speck.png" not in hits("red", "-p", "0.05", "--index", plain_index)

    run("index", photos, "-q", "--regions")
    found = hits("red", "-p", "0.05")
    assert "speck.png" in found and not {"plain.png", "blue.png"} & found.keys()
    speck = found["speck.png"]
    assert speck["probability"] >= 3 * before["plain.png"]["probability"]
    x0, y0, x1, y1 = speck["region"]
    x, y, side = SPECK
    assert x0 <= x and y0 <= y and x + side <= x1 and y + side <= y1  # where it is, whole
    assert (x1 - x0) * (y1 - y0) < W * H / 8  # and a small part of the photo
    jsonschema.Draft202012Validator(json.loads(HIT_SCHEMA_PATH.read_text())).validate(speck)
    # The whole photo matched best: no region.
    assert hits("blue", "-k", "9")["sea.png"]["region"] is None
    # Item by item (--frames): the speck's region and its whole photo, each located.
    items = json.loads(run("search", "red", "--frames", "-k", "40", "--json").stdout)
    speck_items = [h for h in items if h["path"].endswith("speck.png")]
    assert [h["region"] for h in speck_items][0] == speck["region"]
    assert None in [h["region"] for h in speck_items]


def test_photos_without_the_thing_keep_their_probabilities(env, photos):
    plain_index = env["index"].with_name("plain")
    run("index", photos, "-q", "--index", plain_index)
    run("index", photos, "-q", "--regions")
    with IndexStore.open(env["index"]) as store:  # every photo has regions but the flat one
        named = store.catalog.ids_for_paths([str(p) for p in photos.iterdir()])
        cut = store.catalog.photo_regions(named.values())
        assert {Path(p).name for p, i in named.items() if len(cut.get(i, [])) > 1} == {
            p.name for p in photos.iterdir()
        } - {"plain.png"}
    things = {"red": "speck.png", "yellow": "sea.png", "green": None}  # a small thing in one
    for query, thing in things.items():
        before = hits(query, "-k", "9", "--index", plain_index)
        after = hits(query, "-k", "9")
        assert before.keys() == after.keys()
        assert thing is None or after[thing]["probability"] > 1.4 * before[thing]["probability"]
        assert thing is None or after[thing]["region"] is not None
        for name in after.keys() - {thing}:
            assert after[name]["probability"] <= before[name]["probability"] + 1e-9, (query, name)
            # Where nothing stood out, no region is shown as where it matched.
            assert after[name]["region"] is None, (query, name)


def test_an_index_gains_regions_without_re_embedding_and_keeps_the_setting(
    env, photos, monkeypatch, tmp_path
):
    from wherein.indexer.models.image_tower import ImageTower

    seen: list[int] = []
    real_embed = ImageTower.embed

    def counting(self, batch):
        seen.append(len(batch))
        return real_embed(self, batch)

    monkeypatch.setattr(ImageTower, "embed", counting)
    run("index", photos, "-q")
    assert sum(seen) == 7
    whole = whole_vectors(env["index"])
    seen.clear()
    report = json.loads(run("index", photos, "--regions", "--json").stdout)
    assert (report["embedded"], report["unchanged"], report["photos_cut"]) == (0, 7, 7)
    assert report["regions"] > 0 and sum(seen) == report["regions"]  # only the regions
    assert whole_vectors(env["index"]) == whole  # the same ids, the same vectors
    assert hits("red", "-k", "1", "--glob", "speck.png")["speck.png"]["region"] is not None
    # The index keeps the setting: a new photo is cut by a plain run, nothing else is.
    shutil.copyfile(photos / "speck.png", tmp_path / "speck.png")
    img = Image.open(photos / "speck.png").transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    img.save(photos / "flipped.png")
    seen.clear()
    report = json.loads(run("index", photos, "--json").stdout)
    assert (report["embedded"], report["photos_cut"], report["regions"]) == (1, 0, 1)
    assert sum(seen) == 2  # its whole view and its one region
    assert hits("red", "-k", "1", "--glob", "flipped.png")["flipped.png"]["region"]
    seen.clear()
    report = json.loads(run("index", photos, "--json").stdout)
    assert (report["embedded"], report["regions"], sum(seen)) == (0, 0, 0)


def test_watch_cuts_the_photos_it_indexes_once_the_index_has_regions(env, tmp_path):
    from test_watch import Watcher

    live = tmp_path / "live"
    draw_photos(live)
    run("index", live, "-q", "--regions")  # --watch below is not told: the index says so
    w = Watcher(live, env)
    try:
        w.wait_ready()
        img = Image.open(live / "speck.png").transpose(Image.Transpose.FLIP_TOP_BOTTOM)
        img.save(live / "new.png")
        w.wait_reported("embedded", 1)
        with IndexStore.open(env["index"]) as store:
            new = store.catalog.ids_for_paths([str(live / "new.png")])[str(live / "new.png")]
            assert store.catalog.photo_regions([new])[new][1][1] is not None  # a region item
    finally:
        code, _, err = w.stop()
    assert code == 130 and "Traceback" not in err


@pytest.mark.parametrize("fmt", ["coco", "yolo", "masks"])
def test_label_exports_carry_each_hits_region(env, photos, tmp_path, fmt):
    run("index", photos, "-q", "--regions")
    dest = tmp_path / {"coco": "red.coco.json", "yolo": "red.yolo", "masks": "red.masks"}[fmt]
    out = run("search", "red", "-k", "9", "--mask", "--out", tmp_path / "m", "--json",
              "--export", dest)  # fmt: skip
    want = {h["path"]: h["region"] for h in json.loads(out.stdout)}
    assert want[str(photos / "speck.png")] is not None and want[str(photos / "plain.png")] is None
    if fmt == "coco":
        from pycocotools.coco import COCO

        coco = COCO(str(dest))  # still a valid COCO file for its readers
        images = coco.loadImgs(coco.getImgIds())
        got = {im["file_name"]: im["region"] for im in images}
        for ann in coco.loadAnns(coco.getAnnIds()):
            assert len(ann["bbox"]) == 4 and ann["image_id"] in coco.imgs
    else:
        listing = (dest / "images.jsonl") if fmt == "yolo" else (dest / "manifest.json")
        if fmt == "yolo":
            rows = [json.loads(line) for line in listing.read_text().splitlines()]
            assert [r["image"] for r in rows] == (dest / "images.txt").read_text().split()
        else:
            rows = json.loads(listing.read_text())["images"]
        got = {r["path"]: r["region"] for r in rows}
    assert got == want


def test_ray_mask_pieces_carry_the_region_and_mask_as_search_does(env, photos, tmp_path):
    """`select --mask --engine ray` masks each hit in an actor (ray_masks.mask_item): its piece
    carries the hit's region, and the region is the first crop, as in a local `--mask`."""
    from wherein.indexer.models.modeldir import ModelDir
    from wherein.indexer.models.registry import load_segmenter
    from wherein.search.export.pieces import Categories
    from wherein.search.localize.mask_shards import Item
    from wherein.search.localize.ray_masks import STAGES, mask_item

    run("index", photos, "-q", "--regions")
    model = load_segmenter(ModelDir(env["models"]), 1)
    spent = dict.fromkeys(STAGES, 0.0)
    with_region = 0
    for query in ("red", "yellow"):
        out = run("search", query, "-k", "9", "--mask", "--out", tmp_path / query, "--json")
        cond = model.encode_prompt(query)
        for hit in json.loads(out.stdout):
            item = Item(hit["id"], hit["path"], query, region=hit["region"])
            outcome = mask_item(model, cond, query, item, "coco", Categories([query]), spent)
            assert outcome.piece is not None and outcome.values is not None
            assert outcome.piece.record["image"]["region"] == hit["region"]
            got = (outcome.values["bbox"], outcome.values["mask_area"])
            assert got == (hit.get("bbox"), hit.get("mask_area")), (query, hit["path"])
            with_region += hit["region"] is not None
    assert with_region >= 2  # the speck's and the sea's


def _region_items(index: Path, path: Path) -> list:
    """The boxes of a photo's region items in the catalog."""
    with IndexStore.open(index) as store:
        cat = store.catalog
        file_id = cat.ids_for_paths([str(path)])[str(path)]
        return [box for _, box in cat.photo_regions([file_id]).get(file_id, []) if box]


@pytest.mark.parametrize("lost", ["nothing", "meta", "meta and tiled"])
def test_a_rebuilt_catalog_keeps_the_regions_setting(env, tmp_path, lost):
    """--rebuild-catalog takes back the index's settings: from the damaged file's meta, else
    the model from vectors.json and the regions setting from the tiling its photos were cut
    by; where nothing tells it, the report says so in one line. Then a new photo added by a
    plain run is cut into regions, as before the damage."""
    import sqlite3

    photos = tmp_path / "lib"
    photos.mkdir()
    draw_photos(tmp_path / "all")
    for name in ("speck.png", "blue.png"):
        shutil.copyfile(tmp_path / "all" / name, photos / name)
    run("index", photos, "-q", "--regions")
    settings = {k: v for k, v in json.loads(run("status", "--json").stdout).items()
                if k in ("family", "space", "model_file", "regions", "model_id", "dim")}  # fmt: skip
    assert settings["regions"] and settings["family"], settings
    if lost != "nothing":
        db = sqlite3.connect(env["index"] / "catalog.db")
        with db:
            db.execute("DROP TABLE meta")
            if lost == "meta and tiled":
                db.execute("DROP TABLE tiled")
        db.close()
    if lost == "meta and tiled":  # the text report's line (--json: settings_unknown)
        done = run("index", photos, "--rebuild-catalog")
        notes = [line for line in done.stderr.splitlines() if line.startswith("not known")]
        assert notes == [
            "not known after the rebuild: whether it cut photos into regions "
            "(run `wherein index --regions` if so)"
        ], done.stderr
        kept = json.loads(run("status", "--json").stdout)
        assert kept["regions"] is None and kept["family"] == settings["family"], kept
        return
    report = json.loads(run("index", photos, "--rebuild-catalog", "--json").stdout)
    assert report["rebuilt_catalog"].get("settings_unknown") == [], report
    kept = json.loads(run("status", "--json").stdout)
    assert report["rebuilt_catalog"]["rows_reused"] == 2 and report["embedded"] == 0, report
    assert {k: kept[k] for k in settings} == settings
    assert _region_items(env["index"], photos / "speck.png")  # its lost regions, cut again
    img = Image.open(photos / "speck.png").transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    img.save(photos / "flipped.png")
    report = json.loads(run("index", photos, "--json").stdout)
    assert (report["embedded"], report["regions"]) == (1, 1), report
    assert _region_items(env["index"], photos / "flipped.png")
