"""Videos in `wherein dupes` and `wherein unique` (search/curate/video_dupes.py).

The unit tests compare synthetic clips (frame times and vectors, no model); the end-to-end
tests `wherein index` real H.264 videos written with PyAV (tests/video_files.py) and a
re-encode of one of them, on the stand-in models.
"""

from __future__ import annotations

import json
from pathlib import Path

import av
import jsonschema
import numpy as np
import pytest
from cli_run import run
from PIL import Image
from video_files import BLUE, GREEN, RED, segments, solid, write_video

from wherein.schemas.records import HIT_SCHEMA_PATH
from wherein.search.curate import video_dupes as VD

YELLOW, MAGENTA = (230, 220, 20), (210, 20, 200)
REAL = 0.95  # the real models' default threshold (dupes.REAL_THRESHOLD)


# -- synthetic clips --------------------------------------------------------------------------
def scenes(seed: int, n: int = 4, dim: int = 32) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, dim))
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def clip(
    story: np.ndarray,
    times,
    scene_length: float = 3.0,
    noise: float = 0.02,
    seed: int = 0,
    duration: float | None = 12.0,
    file_id: int = 1,
) -> VD.Clip:
    """A clip showing story[k] from k * scene_length s on, sampled at times, each frame's
    vector off by a little noise (an encode's artefacts)."""
    times = np.asarray(times, np.float64)
    rng = np.random.default_rng(seed)
    at = story[np.minimum((times // scene_length).astype(int), len(story) - 1)]
    v = at + noise * rng.normal(size=at.shape)
    return VD.Clip(file_id, times, v / np.linalg.norm(v, axis=1, keepdims=True), duration)


EVERY_2S = np.arange(0.0, 12.0, 2.0)  # 0, 2, ..., 10
KEYFRAMES = np.arange(0.5, 12.0, 1.5)  # another encode: samples fall elsewhere, and more


def test_a_reencode_sampled_at_other_times_is_the_same_clip():
    story = scenes(1)
    a = clip(story, EVERY_2S, seed=1)
    b = clip(story, KEYFRAMES, seed=2, duration=12.04)  # a frame longer: the container's say
    score = VD.similarity(a, b)
    assert score is not None and score >= REAL
    assert VD.similarity(b, a) == score  # both ways, so the order of a pair does not matter


def test_two_clips_that_share_their_opening_shot_are_not_the_same():
    a = clip(scenes(1), EVERY_2S, seed=1)
    story = scenes(2)
    story[0] = scenes(1)[0]  # the same first scene (0-3 s), then another film
    b = clip(story, EVERY_2S, seed=2)
    score = VD.similarity(a, b)
    assert score is not None and score < REAL
    # ... which the first frames do match: one frame alone would have grouped them
    assert VD.best_matches(a, b, VD.window_of(a, b))[0] >= REAL


def test_the_same_frames_in_another_order_are_not_the_same_clip():
    """What a per-video signature (a mean vector) cannot tell apart."""
    story = scenes(3)
    every = np.arange(0.0, 12.0, 1.5)  # two frames of each 3-s scene
    a = clip(story, every, seed=1)
    b = clip(story[::-1].copy(), every, seed=2)
    ma, mb = a.vectors.mean(0), b.vectors.mean(0)
    assert float(ma @ mb) / float(np.linalg.norm(ma) * np.linalg.norm(mb)) > 0.99
    score = VD.similarity(a, b)
    assert score is not None and score < REAL


def test_a_trimmed_cut_is_not_a_copy():
    story = scenes(4)
    a = clip(story, EVERY_2S, seed=1)
    b = clip(story, EVERY_2S[:4], seed=2, duration=7.0)  # the first 7 s of it
    assert VD.similarity(a, b) is None
    # within the slack (max(0.5 s, 2 %)) the lengths agree
    assert VD.same_length(a, clip(story, EVERY_2S, duration=12.45))
    assert not VD.same_length(a, clip(story, EVERY_2S, duration=12.6))


def test_most_frames_must_match_not_all():
    story = scenes(5, n=6, dim=32)
    times = np.arange(0.0, 20.0, 2.0)  # 10 frames
    a = clip(story, times, seed=1, duration=20.0)
    glitch = clip(story, times, seed=2, duration=20.0)
    glitch.vectors[4] = scenes(99, n=1)[0]  # one broken frame in ten: 90 % still match
    score = VD.similarity(a, glitch)
    assert score is not None and score >= REAL
    glitch.vectors[7] = scenes(98, n=1)[0]
    glitch.vectors[1] = scenes(97, n=1)[0]  # three in ten: 70 % < 80 %
    score = VD.similarity(a, glitch)
    assert score is not None and score < REAL


def test_the_window_follows_the_sampling_of_long_videos():
    """A 2-hour video sampled on a 12 s grid: a copy's samples fall up to a slot apart."""
    story = scenes(6, n=200)
    a = clip(story, np.arange(0.0, 7200.0, 12.0), scene_length=36.0, duration=7200.0, seed=1)
    b = clip(story, np.arange(5.0, 7200.0, 12.0), scene_length=36.0, duration=7200.0, seed=2)
    assert VD.window_of(a, b) == pytest.approx(12.0)
    score = VD.similarity(a, b)
    assert score is not None and score >= REAL


def test_share_score_is_the_cosine_most_frames_reach():
    best = np.array([0.99, 0.98, 0.2, 0.97, 0.96])
    assert VD.share_score(best, 0.8) == pytest.approx(0.96)  # 4 of 5 reach 0.96
    assert VD.share_score(best, 1.0) == pytest.approx(0.2)
    assert VD.share_score(np.zeros(0)) == -1.0


# -- real videos, end to end ---------------------------------------------------------------------
def as_json(*args) -> list[dict]:
    return json.loads(run(*args, "--json").stdout)


def groups_of(hits) -> list[set[str]]:
    out: dict[int, set[str]] = {}
    for h in hits:
        out.setdefault(h["group"], set()).add(Path(h["path"]).name)
    return sorted(out.values(), key=lambda g: (-len(g), sorted(g)))


def other_story(t: float) -> np.ndarray:  # red 0-4 s (as segments), then yellow, magenta
    return solid((RED, YELLOW, MAGENTA)[min(int(t // 4), 2)])


def transcode(src: Path, dst: Path, size: tuple[int, int], bit_rate: int) -> Path:
    """Decode src and encode it again: another size, bitrate, GOP and container."""
    with av.open(str(src)) as inp, av.open(str(dst), "w") as out:
        s_in = inp.streams.video[0]
        stream = out.add_stream("libx264", rate=s_in.average_rate)
        stream.width, stream.height, stream.pix_fmt = *size, "yuv420p"
        stream.bit_rate = bit_rate
        stream.codec_context.gop_size = 25
        for n, frame in enumerate(inp.decode(s_in)):
            rgb = frame.to_image().resize(size, Image.BILINEAR)
            new = av.VideoFrame.from_image(rgb)
            new.pts = n
            for packet in stream.encode(new):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return dst


@pytest.fixture()
def library(env, tmp_path) -> Path:
    """A clip, its re-encode (.mov, smaller, other bitrate and GOP), a byte copy of it, a
    clip that opens on the same red shot, and photos of that red (one a copy of the other)."""
    root = tmp_path / "library"
    root.mkdir()
    clip = write_video(root / "clip.mp4", segments, seconds=12.0, gop=10)
    transcode(clip, root / "clip_small.mov", (64, 48), bit_rate=60_000)
    (root / "copy").mkdir()
    (root / "copy" / "clip.mp4").write_bytes(clip.read_bytes())
    write_video(root / "other.mp4", other_story, seconds=12.0, gop=10)
    Image.fromarray(solid(RED)).save(root / "red.jpg", quality=95)
    Image.open(root / "red.jpg").save(root / "red_q70.jpg", quality=70)
    Image.fromarray(solid(BLUE)).save(root / "blue.png")
    Image.fromarray(solid(GREEN)).save(root / "green.png")
    run("index", root, "-q")
    return root


CLIPS = {"clip.mp4", "clip_small.mov"}  # clip.mp4 twice: the original and its byte copy
PHOTOS = {"red.jpg", "red_q70.jpg"}


def test_a_reencoded_clip_groups_with_it_and_a_different_clip_does_not(library):
    hits = as_json("dupes")
    assert groups_of(hits) == [CLIPS, PHOTOS]
    clips = [h for h in hits if Path(h["path"]).name in CLIPS]
    assert len(clips) == 3 and all(h["group_size"] == 3 for h in clips)
    by_path = {h["path"]: h for h in clips}
    # the keeper: the largest picture, then the oldest of the two byte-identical files
    assert by_path[str(library / "clip.mp4")]["keeper"]
    assert by_path[str(library / "copy" / "clip.mp4")]["match"] == "exact"
    small = by_path[str(library / "clip_small.mov")]
    assert small["match"] == "near" and small["score"] >= 0.998
    # the photo of the red opening frame is a photo's copy, never the video's
    assert not any(h["group"] == small["group"] for h in hits if h["path"].endswith(".jpg"))
    # a video's row is the video's (its kind and length), in the hits' schema
    assert all(h["kind"] == "video" and h["duration"] == pytest.approx(12.0) for h in clips)
    validator = jsonschema.Draft202012Validator(json.loads(HIT_SCHEMA_PATH.read_text()))
    for h in hits:
        validator.validate(h)


def test_redundant_lists_the_copies_never_the_original(library):
    from test_curate import _as_if_real_models

    _as_if_real_models(library.parent / "index")
    listed = {h["path"] for h in as_json("dupes", "--redundant", "--threshold", "0.998")}
    assert str(library / "clip.mp4") not in listed
    assert {str(library / "clip_small.mov"), str(library / "copy" / "clip.mp4")} <= listed
    assert not listed & {str(library / "other.mp4")}
    exact = as_json("dupes", "--exact", "--redundant")
    assert [h["path"] for h in exact] == [str(library / "copy" / "clip.mp4")]


def test_a_video_is_one_entry_in_unique(library):
    hits = as_json("unique", "--all")
    paths = [h["path"] for h in hits]
    assert len(paths) == len(set(paths))  # one row per file, not one per frame
    assert set(paths) == {str(p) for p in library.rglob("*") if p.is_file()}
    # A video's frames are not its neighbours: other.mp4 is the one file that shows yellow
    # and magenta (two frames of each), so it is the oddest even with one neighbour.
    odd = as_json("unique", "--all", "--neighbours", "1")
    assert Path(odd[0]["path"]).name == "other.mp4" and odd[0]["uniqueness"] > 0
    copies = {Path(h["path"]).name for h in odd if h["uniqueness"] < 1e-3}  # a copy's at ~0
    assert copies >= CLIPS | PHOTOS and "other.mp4" not in copies
