"""Masks on a video's frames: `wherein mask VIDEO --time`, --mask on video hits, frame datasets.

Every video here is written by the test with PyAV: a red square on a light background at a
known place, shown only from SHOWN[0] to SHOWN[1] seconds, so a frame's mask can be checked
against where and when the square was drawn.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from wherein.indexer.models.clipseg import ClipSeg
from wherein.indexer.models.modeldir import ModelDir
from wherein.indexer.models.standins.palette import rgb255
from wherein.indexer.video.sample import frame_at
from wherein.schemas.records import Hit
from wherein.search.cache.vision_store import VisionStore
from wherein.search.cli import cli
from wherein.search.export.labels import export_hits, read_mask
from wherein.search.localize.masking import add_masks_to_hits, vision_cache
from wherein.search.web import schemas

from conftest import BACKGROUND, Counting, draw_shape

W, H = 160, 96
SQUARE = (56, 8, 152, 88)  # x0, y0, x1, y1 (exclusive) of the red square
SHOWN = (4.0, 8.0)  # seconds the square is on screen
SECONDS = 12.0


def frame_pixels(t: float) -> np.ndarray:
    frame = np.full((H, W, 3), BACKGROUND, np.uint8)
    if SHOWN[0] <= t < SHOWN[1]:
        x0, y0, x1, y1 = SQUARE
        frame[y0:y1, x0:x1] = rgb255("red")
    return frame


def write_clip(
    path: Path, fps: int = 10, pixels=frame_pixels, size=(W, H), seconds: float = SECONDS
) -> Path:
    """An H.264 clip as a phone writes it (a keyframe a second) showing pixels(t)."""
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = *size, "yuv420p"
        stream.codec_context.gop_size = fps
        stream.codec_context.time_base = Fraction(1, fps)
        for i in range(round(seconds * fps)):
            frame = av.VideoFrame.from_ndarray(pixels(i / fps), format="rgb24")
            frame.pts = i
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


@pytest.fixture()
def clip(tmp_path) -> Path:
    (tmp_path / "v").mkdir()
    return write_clip(tmp_path / "v" / "clip.mp4")


class CountedVision(Counting):
    """The vision graph, counting its runs; keeps the graph's path (the store's key)."""

    def __init__(self, graph) -> None:
        super().__init__(graph)
        self.path = graph.path


def counted_model(models: Path) -> tuple[ClipSeg, CountedVision]:
    """A model as a new process has it: nothing in memory."""
    model = ClipSeg.load(ModelDir(models), num_threads=1)
    model.vision = counted = CountedVision(model.vision)
    return model, counted


@pytest.fixture()
def model(standin_models) -> ClipSeg:
    return ClipSeg.load(ModelDir(standin_models), num_threads=1)


def near_square(box, tol: int = 6) -> bool:
    return all(abs(a - b) <= tol for a, b in zip(box, SQUARE, strict=True))


def video_hit(path: Path, time: float, rank: int = 1, item_id: int = 2) -> Hit:
    return Hit(
        rank=rank,
        path=str(path),
        score=0.5,
        probability=None,
        width=W,
        height=H,
        id=1,
        item_id=item_id,
        kind="video",
        time=time,
    )


def run(*args) -> object:
    return CliRunner().invoke(cli, [str(a) for a in args])


# -- wherein mask VIDEO --time ----------------------------------------------------------
def test_mask_at_a_time_covers_the_square_shown_then(env, clip, tmp_path):
    out = tmp_path / "m"
    r = run("mask", clip, "--time", 5.5, "red", "--out", out, "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    schemas.validator("mask.schema.json").validate(data)
    (m,) = data["masks"]
    assert data["time"] == 5.5 and (m["width"], m["height"]) == (W, H)
    assert near_square(m["bbox"]["largest"])
    assert m["mask_area"] == pytest.approx(96 * 80 / (W * H), abs=0.03)
    assert Path(m["mask_path"]).name == "clip.mp4@5.50s.red.mask.png"
    mask = read_mask(m["mask_path"])
    assert mask.shape == (H, W)
    x0, y0, x1, y1 = SQUARE
    assert mask[y0 + 5 : y1 - 5, x0 + 5 : x1 - 5].all() and not mask[:, :48].any()
    with Image.open(m["overlay_path"]) as overlay:
        assert overlay.size == (W, H)

    r = run("mask", clip, "--time", 1.0, "red", "--no-files", "--json")  # before the square
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["masks"][0]["bbox"] is None


def test_mask_time_needs_a_video_and_a_moment_inside_it(env, clip, tmp_path):
    r = run("mask", clip, "red", "--no-files")
    assert r.exit_code == 2 and "--time" in r.output and "video" in r.output
    draw_shape(tmp_path / "photo.png", "red")
    r = run("mask", tmp_path / "photo.png", "--time", 2, "red", "--no-files")
    assert r.exit_code == 2 and "--time applies to a video" in r.output
    r = run("mask", clip, "--time", 60, "red", "--no-files")
    assert r.exit_code == 1 and "outside the video (0 to 12.0 s)" in r.output
    assert "Traceback" not in r.output


# -- --mask on video hits ----------------------------------------------------------------
def test_video_hits_are_masked_on_their_frame_and_named_by_time(standin_models, model, clip):
    out = clip.parent / "masks"
    hits = [video_hit(clip, 5.0, rank=1), video_hit(clip, 2.0, rank=2, item_id=3)]
    shown, before = add_masks_to_hits(hits, "red", out, standin_models, model=model)
    assert near_square(shown.bbox["largest"]) and before.bbox is None
    assert Path(shown.mask_path).name == "1-clip.mp4@5.00s.red.mask.png"
    assert Path(before.mask_path).name == "2-clip.mp4@2.00s.red.mask.png"
    assert read_mask(shown.mask_path).shape == (H, W)


def test_a_second_mask_of_a_frame_reuses_its_vision_pass(standin_models, clip, tmp_path):
    model, counted = counted_model(standin_models)
    store_dir = tmp_path / "index" / "cache" / "vision"
    out = tmp_path / "m"
    store = VisionStore(store_dir)
    add_masks_to_hits([video_hit(clip, 5.0)], "red", out, standin_models, model=model, store=store)
    assert counted.calls == 1 and store.saved == 1
    (again,) = add_masks_to_hits(
        [video_hit(clip, 5.0)], "blue", out, standin_models, model=model, store=store
    )
    assert counted.calls == 1 and again.bbox is None  # the cached pass, another prompt
    add_masks_to_hits([video_hit(clip, 2.0)], "red", out, standin_models, model=model, store=store)
    assert counted.calls == 2 and store.saved == 2  # another moment is another frame
    assert vision_cache(model).passes == 2

    # A new process: the disk store answers for the frame, the vision graph never runs.
    later, recount = counted_model(standin_models)
    store2 = VisionStore(store_dir)
    (hit,) = add_masks_to_hits(
        [video_hit(clip, 5.0)], "red", out, standin_models, model=later, store=store2
    )
    assert recount.calls == 0 and store2.loaded == 1 and near_square(hit.bbox["largest"])


def test_an_indexed_videos_frame_pass_follows_its_content(standin_models, clip, tmp_path):
    """With the catalog's SHA-256 (the file as indexed), a copy elsewhere reads the stored
    pass; a file changed since indexing does not trust the hash."""
    import hashlib
    import os
    import shutil

    def indexed(path: Path) -> Hit:
        st = path.stat()
        hit = video_hit(path, 5.0)
        hit.sha256 = hashlib.sha256(clip.read_bytes()).hexdigest()
        hit.size, hit.mtime_ns = st.st_size, st.st_mtime_ns
        return hit

    store_dir, out = tmp_path / "cache" / "vision", tmp_path / "m"
    first, _ = counted_model(standin_models)
    add_masks_to_hits([indexed(clip)], "red", out, standin_models, model=first,
                      store=VisionStore(store_dir))  # fmt: skip
    copy = shutil.copy2(clip, tmp_path / "copy.mp4")
    later, counted = counted_model(standin_models)
    (hit,) = add_masks_to_hits([indexed(Path(copy))], "red", out, standin_models, model=later,
                               store=VisionStore(store_dir))  # fmt: skip
    assert counted.calls == 0 and near_square(hit.bbox["largest"])

    stale = indexed(Path(copy))
    os.utime(copy, ns=(1, 1))  # changed since "indexing": the catalog's hash is not trusted
    again, recount = counted_model(standin_models)
    add_masks_to_hits(
        [stale], "red", out, standin_models, model=again, store=VisionStore(store_dir)
    )
    assert recount.calls == 1


# -- frame datasets ------------------------------------------------------------------------
def masked_hits(standin_models, model, clip: Path, times: list[float]) -> list[Hit]:
    hits = [video_hit(clip, t, rank=i + 1, item_id=10 + i) for i, t in enumerate(times)]
    return add_masks_to_hits(hits, "red", clip.parent / "masks", standin_models, model=model)


def test_coco_export_of_video_hits_is_a_frame_dataset(standin_models, model, clip, tmp_path):
    hits = masked_hits(standin_models, model, clip, [5.0, 6.5, 1.0])
    dest = tmp_path / "out" / "dogs.coco.json"
    dest.parent.mkdir()
    export_hits(hits, dest, "coco", "red")
    doc = json.loads(dest.read_text())
    frames = tmp_path / "out" / "dogs.coco.frames"
    by_time = {img["time"]: img for img in doc["images"]}
    assert sorted(by_time) == [1.0, 5.0, 6.5]
    for t, img in by_time.items():
        path = Path(img["file_name"])
        assert path.parent == frames and path.name == f"clip.mp4@{t:.2f}s.jpg"
        assert img["video"] == str(clip) and (img["width"], img["height"]) == (W, H)
        with Image.open(path) as im:
            got = np.asarray(im.convert("RGB"), dtype=np.int16)
        want = frame_at(clip, t).array.astype(np.int16)
        assert np.abs(got - want).mean() < 3  # the frame at that time, JPEG-close
    ids = {img["id"] for img in doc["images"]}
    assert ids == {10, 11, 12}  # the frames' item ids
    boxes = {a["image_id"]: a["bbox"] for a in doc["annotations"]}
    assert set(boxes) == {by_time[5.0]["id"], by_time[6.5]["id"]}  # 1.0 s: no square, no mask
    for x, y, w, h in boxes.values():
        assert near_square((x, y, x + w, y + h))


def test_yolo_export_of_video_hits_holds_the_frames_as_images(
    standin_models, model, clip, tmp_path
):
    hits = masked_hits(standin_models, model, clip, [5.0])
    dest = tmp_path / "dogs.yolo"
    export_hits(hits, dest, "yolo", "red")
    (image,) = (dest / "images").iterdir()
    assert image.name == "clip.mp4@5.00s.jpg" and not image.is_symlink()
    with Image.open(image) as im:
        assert im.size == (W, H)
    label = (dest / "labels" / "clip.mp4@5.00s.txt").read_text().split()
    xs, ys = [float(v) * W for v in label[1::2]], [float(v) * H for v in label[2::2]]
    assert near_square((min(xs), min(ys), max(xs), max(ys)))
    assert (dest / "images.txt").read_text() == "./images/clip.mp4@5.00s.jpg\n"


def test_the_frames_folder_never_writes_over_what_is_not_ours(
    standin_models, model, clip, tmp_path
):
    hits = masked_hits(standin_models, model, clip, [5.0])
    dest = tmp_path / "dogs.coco.json"
    frames = tmp_path / "dogs.coco.frames"
    frames.mkdir()
    (frames / "notes.txt").write_text("mine")
    with pytest.raises(Exception, match="notes.txt"):
        export_hits(hits, dest, "coco", "red")
    assert not dest.exists() and sorted(p.name for p in frames.iterdir()) == ["notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []

    (frames / "notes.txt").unlink()
    export_hits(hits, dest, "coco", "red")
    first = listing(frames)
    export_hits(masked_hits(standin_models, model, clip, [6.5]), dest, "coco", "red")
    # An export again: its own earlier frames are replaced, nothing else is touched.
    assert first == ["clip.mp4@5.00s.jpg"]
    assert listing(frames) == ["clip.mp4@6.50s.jpg"]

    # A user's file named like a frame: not the export's (its manifest says what is), kept.
    theirs = frames / "clip.mp4@99.00s.jpg"
    theirs.write_bytes(b"a user's photo")
    with pytest.raises(Exception, match="clip.mp4@99.00s.jpg"):
        export_hits(hits, dest, "coco", "red")
    assert theirs.read_bytes() == b"a user's photo"
    theirs.unlink()

    # Those frames indexed since, and now an input of the export: never replaced.
    indexed = frames / "clip.mp4@6.50s.jpg"
    photo = Hit(rank=2, path=str(indexed), score=0.4, probability=None, width=W, height=H, id=40)
    again = masked_hits(standin_models, model, clip, [5.0])
    again += add_masks_to_hits([photo], "red", tmp_path / "m2", standin_models, model=model)
    before = indexed.read_bytes()
    with pytest.raises(Exception, match="an image this command reads"):
        export_hits(again, dest, "coco", "red")
    assert indexed.read_bytes() == before and listing(frames) == ["clip.mp4@6.50s.jpg"]


def listing(frames: Path) -> list[str]:
    """The frames in a frames folder (its manifest, a dot-file, left out)."""
    return sorted(p.name for p in frames.iterdir() if not p.name.startswith("."))


# -- end to end: an indexed folder of clips and photos --------------------------------------
@pytest.fixture()
def library(env, clip) -> Path:
    draw_shape(clip.parent / "photo.png", "red", size=(120, 90))
    draw_shape(clip.parent / "blue.png", "blue")
    r = run("index", clip.parent, "-q")
    assert r.exit_code == 0, r.output
    return clip.parent


def test_search_mask_segments_the_best_frame_of_a_video_hit(library, tmp_path):
    out = tmp_path / "m"
    r = run("search", "red", "--kind", "video", "--mask", "--out", out, "--json")
    assert r.exit_code == 0, r.output
    (hit,) = json.loads(r.stdout)
    assert hit["kind"] == "video" and SHOWN[0] <= hit["time"] < SHOWN[1]
    assert Path(hit["mask_path"]).name == f"1-clip.mp4@{hit['time']:.2f}s.red.mask.png"
    assert near_square(hit["bbox"]["largest"]) and read_mask(hit["mask_path"]).shape == (H, W)


def test_the_web_app_reuses_the_frame_pass_search_mask_stored(library, env, tmp_path):
    from fastapi.testclient import TestClient

    from wherein.search.web.app import create_app

    r = run("search", "red", "--kind", "video", "--mask", "--out", tmp_path / "m", "--json")
    assert r.exit_code == 0, r.output
    (hit,) = json.loads(r.stdout)
    app = create_app(env["index"], env["models"], prefetch_masks=0)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        params = {"prompt": "blue", "t": hit["time"]}
        m = client.get(f"/api/mask/{hit['id']}", params=params).json()
        status = client.get("/api/status").json()["masks"]
    assert m["bbox"] is None and (m["width"], m["height"]) == (W, H)
    assert status["vision_passes"] == 0 and status["vision_passes_loaded"] == 1


def test_select_mask_export_coco_writes_the_matching_frames(library, tmp_path):
    dest = tmp_path / "dogs.coco.json"
    r = run("select", "red", "-p", "0.5", "--mask", "--out", tmp_path / "m", "--export", dest)
    assert r.exit_code == 0, r.output
    doc = json.loads(dest.read_text())
    frames = [img for img in doc["images"] if "video" in img]
    photos = [img for img in doc["images"] if "video" not in img]
    assert [Path(p["file_name"]).name for p in photos] == ["photo.png"]
    (frame,) = frames
    assert SHOWN[0] <= frame["time"] < SHOWN[1]
    path = Path(frame["file_name"])
    assert path.parent == tmp_path / "dogs.coco.frames" and path.is_file()
    assert path.name == f"clip.mp4@{frame['time']:.2f}s.jpg"
    (ann,) = [a for a in doc["annotations"] if a["image_id"] == frame["id"]]
    x, y, w, h = ann["bbox"]
    assert near_square((x, y, x + w, y + h))


def test_select_without_mask_exports_rows_with_the_video_and_time(library, tmp_path):
    dest = tmp_path / "rows.jsonl"
    r = run("select", "red", "-p", "0.5", "--export", dest)
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in dest.read_text().splitlines()]
    (video,) = [row for row in rows if row["kind"] == "video"]
    assert video["path"] == str(library / "clip.mp4") and SHOWN[0] <= video["time"] < SHOWN[1]
    assert not list(tmp_path.glob("*.frames"))


@pytest.mark.scale
@pytest.mark.slow
def test_the_ray_engine_writes_the_same_frame_dataset(library, tmp_path):
    import ray

    local, far = tmp_path / "local" / "red.coco.json", tmp_path / "ray" / "red.coco.json"
    local.parent.mkdir(), far.parent.mkdir()
    r = run("select", "red", "-p", "0.5", "--mask", "--out", tmp_path / "m", "--export", local)
    assert r.exit_code == 0, r.output
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        r = run("select", "red", "-p", "0.5", "--mask", "--engine", "ray", "--export", far)
    finally:
        ray.shutdown()
    assert r.exit_code == 0, r.output
    want, got = (json.loads(p.read_text()) for p in (local, far))
    for doc in (want, got):
        doc["info"].pop("date_created")
        for img in doc["images"]:
            img["file_name"] = img["file_name"].replace(str(tmp_path), "T").replace("/ray/", "/")
            img["file_name"] = img["file_name"].replace("/local/", "/")
    assert got == want and any("video" in img for img in got["images"])
    ray_frames, local_frames = (tmp_path / e / "red.coco.frames" for e in ("ray", "local"))
    (name,) = listing(ray_frames)
    assert listing(local_frames) == [name]
    assert (ray_frames / name).read_bytes() == (local_frames / name).read_bytes()


# -- a video larger than the frames sampled for embedding ------------------------------------
HD = (1280, 720)
HD_SQUARE = (640, 160, 1120, 560)  # x0, y0, x1, y1 (exclusive): right of centre, in frame pixels


def hd_pixels(t: float) -> np.ndarray:
    """A 1280x720 frame showing a red square from 1 s to 2 s (frames are sampled for
    embedding at a smaller size: masks must still be made and reported on the full frame)."""
    pixels = np.full((HD[1], HD[0], 3), BACKGROUND, np.uint8)
    if 1.0 <= t < 2.0:
        x0, y0, x1, y1 = HD_SQUARE
        pixels[y0:y1, x0:x1] = rgb255("red")
    return pixels


def test_a_large_videos_masks_are_full_size_with_boxes_in_frame_pixels(env, tmp_path):
    (tmp_path / "hd").mkdir()
    hd = write_clip(tmp_path / "hd" / "hd.mp4", fps=5, pixels=hd_pixels, size=HD, seconds=3.0)
    r = run("mask", hd, "--time", 1.4, "red", "--out", tmp_path / "m", "--json")
    assert r.exit_code == 0, r.output
    (m,) = json.loads(r.stdout)["masks"]
    assert (m["width"], m["height"]) == HD
    assert all(abs(a - b) <= 24 for a, b in zip(m["bbox"]["largest"], HD_SQUARE, strict=True))
    assert read_mask(m["mask_path"]).shape == (HD[1], HD[0])

    r = run("index", hd.parent, "-q")
    assert r.exit_code == 0, r.output
    out = tmp_path / "s"
    r = run("search", "red", "--kind", "video", "--mask", "--out", out, "--json")
    assert r.exit_code == 0, r.output
    (hit,) = json.loads(r.stdout)
    assert 1.0 <= hit["time"] < 2.0 and (hit["width"], hit["height"]) == HD
    assert all(abs(a - b) <= 24 for a, b in zip(hit["bbox"]["largest"], HD_SQUARE, strict=True))
    mask = read_mask(hit["mask_path"])
    assert mask.shape == (HD[1], HD[0])
    x0, y0, x1, y1 = HD_SQUARE
    assert mask[y0 + 30 : y1 - 30, x0 + 30 : x1 - 30].all() and not mask[:, : x0 - 40].any()


def test_same_named_videos_from_two_folders_export_two_frames(env, tmp_path):
    """a/clip.mp4 and b/clip.mp4 matched at the same moment: a frame dataset holds a frame of
    each (the second named with its item id), never one file for both."""
    for folder in ("a", "b"):
        (tmp_path / "lib" / folder).mkdir(parents=True)
        write_clip(tmp_path / "lib" / folder / "clip.mp4")
    r = run("index", tmp_path / "lib", "-q")
    assert r.exit_code == 0, r.output
    dest = tmp_path / "out" / "red.coco.json"
    dest.parent.mkdir()
    args = ["red", "--kind", "video", "--mask", "--out", tmp_path / "m", "--export", dest]
    r = run("search", *args, "-k", "2")
    assert r.exit_code == 0, r.output
    doc = json.loads(dest.read_text())
    assert sorted(Path(img["video"]).parent.name for img in doc["images"]) == ["a", "b"]
    (time,) = {img["time"] for img in doc["images"]}  # the same moment of the same content
    names = {img["file_name"] for img in doc["images"]}
    assert len(names) == 2 and all(Path(n).is_file() for n in names), names
    assert listing(tmp_path / "out" / "red.coco.frames") == sorted(Path(n).name for n in names)
    for img in doc["images"]:
        with Image.open(img["file_name"]) as im:
            got = np.asarray(im.convert("RGB"), dtype=np.int16)
        want = frame_at(img["video"], time).array.astype(np.int16)
        assert np.abs(got - want).mean() < 3
