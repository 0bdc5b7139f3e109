"""Photos embedded from a tar shard (``ARCHIVE.tar#member``) are found, masked and shown like
files: they are not "missing", `search --mask` draws them, the web app serves their
thumbnails and masks, and a changed or removed archive is refused as a changed file is."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import numpy as np
import pytest
from cli_run import run, search_json
from fastapi.testclient import TestClient
from PIL import Image

from wherein.search.web.app import create_app

from conftest import draw_shape

BOX = (0.5, 0.25, 0.9, 0.75)  # the red square's place in its photo, as fractions


@pytest.fixture()
def shard_index(env, tmp_path) -> tuple[Path, Path, tuple[int, int, int, int]]:
    """(tar shard, index built from it by embed + build-index, red square's pixel box)."""
    photos = tmp_path / "members"
    red_box = draw_shape(photos / "red.jpg", "red", size=(320, 240), box=BOX, quality=95)
    draw_shape(photos / "blue.jpg", "blue", size=(320, 240))
    shard = tmp_path / "shard-0000.tar"
    with tarfile.open(shard, "w") as tf:
        for name in ("red.jpg", "blue.jpg"):
            tf.add(photos / name, name)
    run("embed", shard, "--out", tmp_path / "emb", "-q")
    index = tmp_path / "built"
    run("build-index", tmp_path / "emb", "--index", index, "-q")
    return shard, index, red_box


def _top(index: Path, *args: object) -> dict:
    return search_json("red", "--index", index, "-k", "1", *args)[0]


def test_a_tar_members_hit_is_not_missing_until_its_archive_is(shard_index):
    shard, index, _ = shard_index
    hit = _top(index)
    assert hit["path"] == f"{shard}#red.jpg" and hit["exists"] is True
    assert "no longer exist" not in run("search", "red", "--index", index).output
    shard.rename(shard.with_suffix(".moved"))
    assert _top(index)["exists"] is False


def test_search_masks_a_tar_members_photo_where_the_thing_is(shard_index, tmp_path):
    _, index, (x0, y0, x1, y1) = shard_index
    hit = _top(index, "--mask", "--out", tmp_path / "masks")
    assert "mask_skipped" not in hit, hit.get("mask_skipped")
    mask = np.asarray(Image.open(hit["mask_path"])) > 0
    ys, xs = np.nonzero(mask)
    assert mask.shape == (240, 320)
    assert abs(xs.min() - x0) <= 12 and abs(xs.max() - x1) <= 12
    assert abs(ys.min() - y0) <= 12 and abs(ys.max() - y1) <= 12


def test_the_web_app_shows_and_masks_a_tar_member_and_refuses_a_changed_archive(
    shard_index, standin_models
):
    shard, index, (x0, y0, x1, y1) = shard_index
    app = create_app(index, standin_models, prefetch_masks=0)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        r = client.get("/api/search", params={"q": "red", "per_page": 1})
        assert r.status_code == 200, r.text
        (hit,) = r.json()["hits"]
        assert hit["path"].endswith("#red.jpg") and hit["exists"] is True
        thumb = client.get(hit["thumb_url"])
        assert thumb.status_code == 200, thumb.text
        shown = np.asarray(Image.open(io.BytesIO(thumb.content)).convert("RGB"), dtype=int)
        h, w, _ = shown.shape
        assert abs(w / h - 320 / 240) < 0.02
        # The member's own pixels: red where the square is, not where it is not.
        assert shown[h // 2, round(w * 0.7)][0] > 200 > shown[h // 2, round(w * 0.7)][2]
        assert shown[h // 2, round(w * 0.2)].min() > 200
        mask = client.get(f"/api/mask/{hit['id']}", params={"prompt": "red"})
        assert mask.status_code == 200, mask.text
        bx0, by0, bx1, by1 = mask.json()["bbox"]["largest"]  # x1, y1 exclusive
        assert abs(bx0 - x0) <= 12 and abs(bx1 - x1) <= 12
        assert abs(by0 - y0) <= 12 and abs(by1 - y1) <= 12

        # The archive rewritten (its member now another photo): refused, as a changed file is.
        other = shard.parent / "other.jpg"
        draw_shape(other, "green", size=(320, 240))
        with tarfile.open(shard, "w") as tf:
            tf.add(other, "red.jpg")
        st = os.stat(shard)
        os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        assert client.get(f"/api/image/{hit['id']}").status_code == 409
        shard.unlink()
        gone = client.get(f"/api/image/{hit['id']}")
        assert gone.status_code == 404 and json.loads(gone.text)["error"]


def test_an_animation_in_a_shard_is_shown_and_masked_at_its_moment(env, tmp_path, standin_models):
    """An animated GIF inside a shard: its hit is the red moment, the web app shows that
    frame (not the first, blue one) and `search --mask` masks it."""
    frames = [Image.new("RGB", (160, 120), colour) for colour in ("blue", "blue", "red", "red")]
    gif = tmp_path / "anim.gif"
    frames[0].save(gif, save_all=True, append_images=frames[1:], duration=500, loop=0)
    shard = tmp_path / "shard-0000.tar"
    with tarfile.open(shard, "w") as tf:
        tf.add(gif, "anim.gif")
    run("embed", shard, "--out", tmp_path / "emb", "-q")
    index = tmp_path / "built"
    run("build-index", tmp_path / "emb", "--index", index, "-q")

    hit = _top(index, "--mask", "--out", tmp_path / "masks")
    assert hit["kind"] == "animation" and 1.0 <= hit["time"] < 2.0, hit
    assert "mask_skipped" not in hit, hit.get("mask_skipped")
    assert (np.asarray(Image.open(hit["mask_path"])) > 0).mean() > 0.9  # the red frame, whole

    app = create_app(index, standin_models, prefetch_masks=0)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        (shown,) = client.get("/api/search", params={"q": "red", "per_page": 1}).json()["hits"]
        frame = client.get(shown["image_url"])
        assert frame.status_code == 200, frame.text
        r, g, b = Image.open(io.BytesIO(frame.content)).convert("RGB").getpixel((80, 60))
        assert r > 200 and b < 60, (r, g, b)
