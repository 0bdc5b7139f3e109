"""Media kinds (wherein.indexer.kinds): content decides what a file is, whatever its name.

A JPEG renamed ``.mp4`` is a photo (indexed, found, shown as an image, never played as a
video); a real video named ``.jpg`` stays a video; a HEIC stays a photo. Indexed with the
stand-in models, which rank colours.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from cli_run import run, search_json
from PIL import Image
from test_animation import animated
from video_files import RED, solid, write_video

from wherein.indexer.kinds import registry
from wherein.indexer.store.index_store import IndexStore


def red_jpeg(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (64, 48), RED).save(path, format="JPEG", quality=95)
    return path


def test_content_decides_the_kind_not_the_name(tmp_path):
    jpeg = red_jpeg(tmp_path / "red.mp4")
    clip = write_video(tmp_path / "clip.jpg", lambda t: solid(RED), seconds=1, fmt="mp4")
    heic = tmp_path / "p.mp4"  # what an iPhone's HEIC starts with: ISO BMFF, an image brand
    heic.write_bytes(b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + bytes(64))
    assert registry.kind_of(jpeg).name == "photo"
    assert registry.kind_of(clip).name == "video"
    assert registry.kind_of(heic).name == "photo"
    # No signature any kind knows: the name decides (a damaged .mp4 is a video's skip).
    (tmp_path / "fake.mp4").write_text("not a video")
    assert registry.kind_of(tmp_path / "fake.mp4").name == "video"


def test_a_jpeg_named_mp4_is_indexed_and_found_as_a_photo(env, shapes):
    red_jpeg(shapes / "renamed" / "red.mp4")
    run("index", shapes, "-q")
    hits = search_json("red", "-k", "3")
    top = hits[0]
    assert Path(top["path"]).name == "red.mp4"
    assert (top["kind"], top["time"], top["moments"], top["duration"]) == (
        "photo",
        None,
        None,
        None,
    )
    with IndexStore.open(env["index"], write=False) as store:
        cat = store.catalog
        row = cat.row_by_path(top["path"])
        assert row["file_kind"] == "photo" and cat.video_rows([row["id"]]) == {}
    assert [h["path"] for h in search_json("red", "--kind", "video")] == []
    assert top["path"] in [h["path"] for h in search_json("red", "--kind", "photo")]


@pytest.mark.parametrize("engine", ["index", "embed"])
def test_a_files_format_is_its_contents_not_its_name(env, shapes, tmp_path, engine):
    """The hit's format says what the file is, in both engines (embed + build-index carry
    it in the shards): a JPEG named .mp4 is a jpeg, a clip named .jpg an mp4, a WebP a webp."""
    red_jpeg(shapes / "renamed" / "red.mp4")
    write_video(shapes / "renamed" / "clip.jpg", lambda t: solid(RED), seconds=1, fmt="mp4")
    if engine == "index":
        run("index", shapes, "-q")
    else:
        run("embed", shapes, "--out", tmp_path / "emb", "-q")
        run("build-index", tmp_path / "emb", "-q")
    formats = {Path(h["path"]).name: h["format"] for h in search_json("red", "-k", "20")}
    assert formats["red.mp4"] == "jpeg" and formats["red_square.jpg"] == "jpeg", formats
    assert formats["clip.jpg"] == "mp4", formats
    assert formats["blue_wide.webp"] == "webp" and formats["green.bmp"] == "bmp", formats


def test_a_jpeg_named_mp4_is_served_as_an_image_not_a_video(env, shapes):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from wherein.search.web.app import create_app

    path = red_jpeg(shapes / "renamed" / "red.mp4")
    run("index", shapes, "-q")
    with IndexStore.open(env["index"], write=False) as store:
        file_id = store.catalog.row_by_path(str(path))["id"]
    app = create_app(env["index"], env["models"], prefetch_masks=0)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        r = client.get(f"/api/video/{file_id}")
        assert r.status_code == 404, r.text
        record = client.get(f"/api/hit/{file_id}").json()
        assert record["kind"] == "photo" and "video_url" not in record
        image = client.get(record["image_url"])
        assert image.status_code == 200 and image.headers["content-type"].startswith("image/")


def test_status_counts_the_files_of_each_kind(env, shapes):
    """Photos (6 shapes), one video and one animation: index says what it sampled of each
    kind, status counts each kind in its text and --json; an animation is not a video."""
    write_video(shapes / "clips" / "clip.mp4", lambda t: solid(RED), seconds=4, fps=5)
    animated(shapes / "moving" / "anim.gif", "GIF")
    summary = run("index", shapes).stdout
    assert "; 1 animation, 1 video sampled (" in summary, summary
    info = json.loads(run("status", "--json").stdout)
    kinds = info["kinds"]
    assert {k: c["files"] for k, c in kinds.items()} == {"photo": 6, "video": 1, "animation": 1}
    assert kinds["video"]["frames"] >= 2 and kinds["animation"]["frames"] >= 2
    frames = kinds["video"]["frames"] + kinds["animation"]["frames"]
    assert f"sampled ({frames} frames embedded)" in summary
    assert (info["videos"], info["frames"]) == (1, kinds["video"]["frames"])
    with IndexStore.open(env["index"], write=False) as store:  # photos by subtraction, or read
        assert store.catalog.kind_counts("photo") == store.catalog.kind_counts()
    table = run("status").stdout.splitlines()
    assert "photos     6" in table
    assert f"videos     1 ({kinds['video']['frames']} frames)" in table
    assert f"animations 1 ({kinds['animation']['frames']} frames)" in table


def test_a_rebuilt_catalog_keeps_each_files_kind_and_frames(env, shapes):
    """--rebuild-catalog salvages a video and an animation as what they are, with their
    frames: nothing is decoded again, and search finds them as before, at their time."""
    write_video(shapes / "clips" / "clip.mp4", lambda t: solid(RED), seconds=4, fps=5)
    animated(shapes / "moving" / "anim.gif", "GIF")
    run("index", shapes, "-q")
    before = json.loads(run("status", "--json").stdout)["kinds"]
    hits = {h["path"]: (h["kind"], h["time"], h["moments"]) for h in search_json("red", "-k", "20")}
    out = json.loads(run("index", shapes, "--rebuild-catalog", "-q", "--json").stdout)
    assert out["rebuilt_catalog"]["rows_reused"] == before["photo"]["files"] + 2, out
    assert out["embedded"] == 0 and out["frames"] == 0, out  # nothing sampled again
    assert json.loads(run("status", "--json").stdout)["kinds"] == before
    again = {
        h["path"]: (h["kind"], h["time"], h["moments"]) for h in search_json("red", "-k", "20")
    }
    assert again == hits
    assert {k for k, _, _ in again.values()} == {"photo", "video", "animation"}
    check = json.loads(run("status", "--check", "--json").stdout)["check"]
    assert check["ok"] and not check.get("notes"), check
    # A frame lost with the damage: the video comes back unfinished, and the next run
    # embeds that frame alone (as after a run stopped mid-video).
    conn = sqlite3.connect(env["index"] / "catalog.db")
    with conn:
        (lost,) = conn.execute(
            "SELECT max(it.id) FROM items it JOIN images i ON i.id = it.image_id "
            "WHERE i.kind = 'video'"
        ).fetchone()
        conn.execute("DELETE FROM embeddings WHERE item_id = ?", (lost,))
        conn.execute("DELETE FROM items WHERE id = ?", (lost,))
    conn.close()
    out = json.loads(run("index", shapes, "--rebuild-catalog", "-q", "--json").stdout)
    assert (out["embedded"], out["sampled"], out["frames"]) == (1, {"video": 1}, 1), out
    assert json.loads(run("status", "--json").stdout)["kinds"] == before


def test_status_check_names_each_timed_kind_left_unfinished(env, shapes):
    """A run stopped midway through an animation and a video: the note counts each by its
    kind, as status does, never an animation as a video."""
    write_video(shapes / "clips" / "clip.mp4", lambda t: solid(RED), seconds=4, fps=5)
    animated(shapes / "moving" / "anim.gif", "GIF")
    animated(shapes / "moving" / "other.webp", "WEBP")
    run("index", shapes, "-q")
    conn = sqlite3.connect(env["index"] / "catalog.db")
    with conn:  # what a stopped run leaves: the files' rows, their frames not all in
        conn.execute("UPDATE videos SET complete = 0")
    conn.close()
    check = json.loads(run("status", "--check", "--json").stdout)["check"]
    assert check["ok"], check
    assert check["notes"] == [
        "2 animations, 1 video not indexed to their end (a run stopped midway through them): "
        "this finishes on the next index run over them"
    ], check
