"""Moving pictures (the animation kind): animated GIF, WebP and APNG are files whose frames
are items at times, sampled as a video's are, found with their time and moments, masked
at a moment, and shown in the web app at that moment. A still GIF, WebP or PNG stays a
photo. Indexed with the stand-in models, which rank colours: "red" finds the red frames.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
from cli_run import run, search_json
from PIL import Image, ImageDraw
from video_files import RED as RED_VIDEO
from video_files import solid, write_video

from wherein.indexer.imaging import Locator
from wherein.indexer.kinds import registry

W, H = 96, 64
FRAME_MS = 250
FRAMES = 16
RED_FRAMES = range(4, 8)  # the red square shows in frames 4-7: 1.0 s to 2.0 s
RED_SPAN = (4 * FRAME_MS / 1000, 8 * FRAME_MS / 1000)
SQUARE = (24, 8, 72, 56)  # x0, y0, x1, y1
RED, PAPER = (220, 20, 20), (235, 235, 235)


def frame(i: int, red: bool) -> Image.Image:
    img = Image.new("RGB", (W, H), PAPER)
    d = ImageDraw.Draw(img)
    if red:
        d.rectangle((SQUARE[0], SQUARE[1], SQUARE[2] - 1, SQUARE[3] - 1), fill=RED)
    d.rectangle((i * 5, H - 4, i * 5 + 3, H - 1), fill=(60, 60, 60))  # every frame differs
    return img


def animated(path: Path, fmt: str, frames: int = FRAMES) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    images = [frame(i, i in RED_FRAMES) for i in range(frames)]
    images[0].save(
        path, format=fmt, save_all=True, append_images=images[1:], duration=FRAME_MS, loop=0
    )
    return path


@pytest.fixture()
def gif(shapes) -> Path:
    return animated(shapes / "moving" / "anim.gif", "GIF")


# -- what is a moving picture ------------------------------------------------------------
def test_animated_gif_webp_and_apng_are_animations_and_still_ones_photos(tmp_path):
    for name, fmt in (("a.gif", "GIF"), ("a.webp", "WEBP"), ("a.png", "PNG")):
        moving = animated(tmp_path / "moving" / name, fmt)
        still = animated(tmp_path / "still" / name, fmt, frames=1)
        assert registry.kind_of(moving).name == "animation", name
        assert registry.kind_of(still).name == "photo", name
    # The content decides, not the name: an animated GIF named .jpg, a still one named .apng.
    renamed = animated(tmp_path / "x" / "anim.jpg", "GIF")
    assert registry.kind_of(renamed).name == "animation"
    assert registry.kind_of(animated(tmp_path / "x" / "s.apng", "PNG", frames=1)).name == "photo"


def test_an_animation_is_timed_and_sampled_by_the_video_rules(gif):
    kind = registry.kind_of(gif)
    info = kind.probe(gif)
    assert (info.width, info.height) == (W, H)
    assert info.duration == pytest.approx(FRAMES * FRAME_MS / 1000)
    # Every 0.25 s: each frame, at its own time.
    every = [f.time for f in kind.sample(gif, 0.25, 600)]
    assert every == pytest.approx([i * FRAME_MS / 1000 for i in range(FRAMES)])
    # Every 2 s (the default): the first frame, and the cuts where the square comes and goes.
    default = [(f.time, f.reason) for f in kind.sample(gif, 2.0, 600)]
    assert default[:3] == [(0.0, "first"), (1.0, "scene"), (2.0, "scene")]
    # --max-frames spreads the samples over the whole length.
    spread = [f.time for f in kind.sample(gif, 0.25, 4)]
    assert len(spread) == 4 and spread[-1] >= 3.0
    shown = np.asarray(kind.image_at(gif, Locator("frame", t=1.5)))
    assert shown.shape == (H, W, 3) and tuple(shown[H // 2, W // 2]) == RED
    assert tuple(np.asarray(kind.image_at(gif, Locator("frame", t=3.0)))[H // 2, W // 2]) == PAPER


# -- indexed and searched ----------------------------------------------------------------
def test_red_finds_the_gif_at_a_red_moment_with_its_moments(env, shapes, gif):
    still = shapes / "moving" / "still.gif"
    frame(0, True).save(still, format="GIF")
    r = json.loads(run("index", shapes, "-q", "--json").stdout)
    assert r["frames"] >= 3 and r["skipped"] == 0
    hits = {Path(h["path"]).name: h for h in search_json("red", "-k", "20")}
    anim = hits["anim.gif"]
    assert anim["kind"] == "animation"
    assert RED_SPAN[0] <= anim["time"] < RED_SPAN[1]
    assert anim["duration"] == pytest.approx(FRAMES * FRAME_MS / 1000)
    assert anim["moments"], "the red frames make a moment"
    assert any(m["start"] <= anim["time"] < m["end"] for m in anim["moments"])
    assert all(RED_SPAN[0] <= m["time"] < RED_SPAN[1] for m in anim["moments"])
    assert hits["still.gif"]["kind"] == "photo" and hits["still.gif"]["time"] is None
    assert [Path(h["path"]).name for h in search_json("red", "--kind", "animation")] == ["anim.gif"]


def test_mask_at_a_time_of_an_animation(env, gif, tmp_path):
    r = run("mask", gif, "--time", 1.5, "red", "--out", tmp_path / "m", "--json")
    (m,) = json.loads(r.stdout)["masks"]
    assert (m["width"], m["height"]) == (W, H)
    x0, y0, x1, y1 = m["bbox"]["largest"]
    assert abs(x0 - SQUARE[0]) <= 6 and abs(y0 - SQUARE[1]) <= 6
    assert abs(x1 - SQUARE[2]) <= 6 and abs(y1 - SQUARE[3]) <= 6
    later = json.loads(run("mask", gif, "--time", 3, "red", "--no-files", "--json").stdout)
    assert later["time"] == 3 and later["masks"][0]["bbox"] is None  # the square is gone
    r = run("mask", gif, "red", "--no-files", ok=False)
    assert r.exit_code == 2 and "--time" in r.output
    r = run("mask", gif, "--time", 60, "red", "--no-files", ok=False)
    assert r.exit_code == 1 and "outside the animation" in r.output
    assert "Traceback" not in r.output


def test_search_mask_on_an_animation_hit_masks_its_best_frame(env, shapes, gif, tmp_path):
    """The hit's kind says it is timed: the mask is of the red frame at its time, named by it."""
    run("index", shapes, "-q")
    out = tmp_path / "m"
    r = run("search", "red", "--kind", "animation", "--mask", "--out", out, "--json")
    (hit,) = json.loads(r.stdout)
    assert RED_SPAN[0] <= hit["time"] < RED_SPAN[1]
    box = (hit.get("bbox") or {}).get("largest")  # the square: the first frame does not show it
    assert box is not None, hit
    x0, y0, x1, y1 = box
    assert abs(x0 - SQUARE[0]) <= 6 and abs(y0 - SQUARE[1]) <= 6
    assert abs(x1 - SQUARE[2]) <= 6 and abs(y1 - SQUARE[3]) <= 6
    assert f"anim.gif@{hit['time']:.2f}s" in Path(hit["mask_path"]).name


def test_the_web_app_shows_the_frame_at_the_moment(env, shapes, gif):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from wherein.search.web.app import create_app

    run("index", shapes, "-q")
    app = create_app(env["index"], env["models"], prefetch_masks=0)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        r = client.get("/api/search", params={"q": "red", "per_page": 20})
        assert r.status_code == 200, r.text
        (hit,) = [h for h in r.json()["hits"] if Path(h["path"]).name == "anim.gif"]
        assert "video_url" not in hit and f"t={hit['time']!r}" in hit["image_url"]
        image = client.get(hit["image_url"])
        assert image.status_code == 200, image.text
        import io

        with Image.open(io.BytesIO(image.content)) as shown:
            r_, g, b = shown.convert("RGB").getpixel((shown.width // 2, shown.height // 2))
        assert r_ > 180 and g < 80 and b < 80  # the red frame, not the first (paper) one


def test_embed_and_build_index_give_the_animation_its_kind_and_frames(env, gif, tmp_path):
    """The scale path asks the same kind: frames as shard rows, the file's kind carried."""
    run("embed", gif.parent, "--out", tmp_path / "emb", "-q")
    index = tmp_path / "built"
    run("build-index", tmp_path / "emb", "--index", index, "-q")
    hits = search_json("red", "--index", index)
    (anim,) = [h for h in hits if Path(h["path"]).name == "anim.gif"]
    assert anim["kind"] == "animation" and RED_SPAN[0] <= anim["time"] < RED_SPAN[1]
    assert anim["moments"] and anim["duration"] == pytest.approx(FRAMES * FRAME_MS / 1000)


def test_an_animation_in_a_tar_shard_is_an_animation_with_its_frames(env, gif, tmp_path):
    """embed on a webdataset shard asks each member's content, as index asks a file's: an
    animated GIF or APNG is an animation sampled from its bytes, a still one a photo, and a
    video under a photo's name a failed item that says why (its frames need a file)."""
    apng = animated(tmp_path / "m" / "anim.png", "PNG")
    still = animated(tmp_path / "m" / "still.gif", "GIF", frames=1)
    clip = write_video(tmp_path / "m" / "clip.mp4", lambda t: solid(RED_VIDEO), seconds=2, fps=5)
    shard = tmp_path / "shard-0000.tar"
    with tarfile.open(shard, "w") as tf:
        for path, name in ((gif, "1.gif"), (apng, "2.apng"), (still, "3.gif"), (clip, "4.jpg")):
            tf.add(path, name)
    run("embed", shard, "--out", tmp_path / "emb", "-q")
    index = tmp_path / "built"
    run("build-index", tmp_path / "emb", "--index", index, "-q")
    hits = {h["path"].rsplit("#", 1)[-1]: h for h in search_json("red", "--index", index)}
    for name in ("1.gif", "2.apng"):
        anim = hits[name]
        assert anim["kind"] == "animation" and RED_SPAN[0] <= anim["time"] < RED_SPAN[1], name
        assert anim["moments"] and anim["duration"] == pytest.approx(FRAMES * FRAME_MS / 1000)
    assert hits["3.gif"]["kind"] == "photo" and hits["3.gif"]["time"] is None
    (skip,) = json.loads(run("status", "--json", "--index", index).stdout)["skipped"]
    assert skip["path"].endswith("#4.jpg") and "a video in a tar shard" in skip["reason"], skip


def test_the_ray_decode_task_samples_a_tar_members_animation(gif, tmp_path):
    """--engine ray's decode task (run here, without Ray) gives a tar member's animated GIF
    the frame rows the kind samples from its bytes."""
    from wherein.indexer.scale.ray_embed import decode_batch
    from wherein.indexer.scale.sources import tar_items
    from wherein.schemas.models import ImageInput

    shard = tmp_path / "shard-0000.tar"
    with tarfile.open(shard, "w") as tf:
        tf.add(gif, "1.gif")
    (item,) = tar_items(str(shard))
    batch = {"id": [1], "shard": [0], "uri": [item.uri], "offset": [item.offset],
             "length": [item.length]}  # fmt: skip
    spec = ImageInput(16, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    rows = [r for b in decode_batch(batch, True, spec) for r in zip(b["kind"], b["t"], b["media"])]
    times = [f.time for f in registry.kind_of(gif).sample(gif, 2.0, 600)]
    assert rows == [("frame", pytest.approx(t), "animation") for t in times]
