"""The tiling `wherein index --regions` cuts 12-MP photos with: a ~100-px thing is found well
above photos without it, and an index keeps cutting with the tiling it first recorded
(indexer/regions.py's TILINGS), or refuses one it does not know."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from cli_run import run
from PIL import Image, ImageDraw
from test_regions import hits, rgb

from wherein.indexer.store.index_store import IndexStore

W, H = 4032, 3024  # 12 MP, as issue 27's table


def test_a_100px_thing_in_a_12mp_photo_is_3x_a_photo_without_it(env, tmp_path):
    photos = tmp_path / "photos"
    photos.mkdir()
    x, y, side = 2900, 700, 100  # 0.08% of the photo: 6 px of the whole photo's 224
    img = Image.new("RGB", (W, H), rgb("white"))
    ImageDraw.Draw(img).rectangle((x, y, x + side - 1, y + side - 1), fill=rgb("red"))
    img.save(photos / "speck.jpg", quality=90)
    Image.new("RGB", (W, H), rgb("white")).save(photos / "plain.jpg", quality=90)
    run("index", photos, "-q", "--regions")
    found = hits("red", "-k", "9")
    assert found["speck.jpg"]["probability"] >= 3 * found["plain.jpg"]["probability"]
    x0, y0, x1, y1 = found["speck.jpg"]["region"]
    assert x0 <= x and y0 <= y and x + side <= x1 and y + side <= y1
    assert found["plain.jpg"]["region"] is None


def confetti(path: Path, seed: int) -> None:
    """Colour blocks all over a 3-MP photo: busy everywhere."""
    rng = np.random.default_rng(seed)
    names = ["red", "green", "blue", "yellow", "purple", "white"]
    cells = rng.integers(0, len(names), size=(1512 // 84, 2016 // 84))
    arr = np.array([rgb(names[i]) for i in cells.ravel()], dtype=np.uint8)
    Image.fromarray(arr.reshape(*cells.shape, 3).repeat(84, 0).repeat(84, 1)).save(path)


def regions_of(index: Path, path: Path) -> int:
    with IndexStore.open(index) as store:
        cat = store.catalog
        file_id = cat.ids_for_paths([str(path)])[str(path)]
        return sum(box is not None for _, box in cat.photo_regions([file_id])[file_id])


def test_an_index_keeps_the_tiling_it_recorded(env, tmp_path):
    photos = tmp_path / "photos"
    photos.mkdir()
    confetti(photos / "a.png", 1)
    run("index", photos, "-q", "--regions")
    assert regions_of(env["index"], photos / "a.png") == 2  # today's budget
    # An index made when the tiling was pyramid-v1 (4 regions a photo) keeps cutting its new
    # photos that way.
    with IndexStore.open(env["index"], write=True) as store, store.catalog.transaction():
        store.catalog.set_meta("regions", "pyramid-v1")
    confetti(photos / "b.png", 2)
    run("index", photos, "-q")
    assert regions_of(env["index"], photos / "b.png") == 4
    # A tiling this wherein does not know (a newer one's): refused, nothing embedded.
    with IndexStore.open(env["index"], write=True) as store, store.catalog.transaction():
        store.catalog.set_meta("regions", "pyramid-v99")
    confetti(photos / "c.png", 3)
    res = run("index", photos, "-q", ok=False)
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert "Error:" in res.output and "pyramid-v99" in res.output and "newer" in res.output
    with IndexStore.open(env["index"]) as store:
        assert str(photos / "c.png") not in store.catalog.ids_for_paths([str(photos / "c.png")])
