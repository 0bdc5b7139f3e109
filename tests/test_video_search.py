"""Videos in search results: one hit per video with its best frame's time and its moments,
--frames, --kind, k counting files, ties, and the exports' video columns.

The videos are written by the test with PyAV (coloured frames at known times, see
tests/test_video_media.py) next to the coloured-shape photos, and indexed with the stand-in
models, which rank colours: "red" finds the red frames.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import numpy as np
import pytest
import referencing
from cli_run import run, search_json
from video_files import BLUE, GREEN, RED, W, solid, write_video

from wherein.indexer.store.index_store import IndexStore
from wherein.schemas.records import HIT_CORE_FIELDS, HIT_SCHEMA_PATH, SEARCH_SCHEMA_PATH
from wherein.search.export.hits import read_export
from wherein.search.service.search import Query, SearchRequest, open_index, search
from wherein.search.videos import clock, moments

EVERY = 2.0  # seconds between sampled frames at most (`wherein index`'s default)
FPS = 10
# clip.mp4: blue 0-4 s, red 4-8 s, green 8-12 s, red 12-14 s, blue 14-16 s
TIMELINE = [(0, 4, BLUE), (4, 8, RED), (8, 12, GREEN), (12, 14, RED), (14, 16, BLUE)]
RED_SPANS = [(4.0, 8.0), (12.0, 14.0)]


def clip_colour(t: float) -> np.ndarray:
    return solid(next(rgb for a, b, rgb in TIMELINE if a <= t < b))


@pytest.fixture()
def library(env, shapes) -> Path:
    """The shape photos and clip.mp4, indexed by `wherein index`."""
    (shapes / "clips").mkdir()
    write_video(shapes / "clips" / "clip.mp4", clip_colour, seconds=16, fps=FPS)
    run("index", shapes, "-q")
    return shapes


def in_spans(t: float, spans, slack: float = 0.0) -> bool:
    return any(a - slack <= t < b + slack for a, b in spans)


@pytest.fixture()
def validator():
    hit = json.loads(HIT_SCHEMA_PATH.read_text())
    result = json.loads(SEARCH_SCHEMA_PATH.read_text())
    registry = referencing.Registry().with_resources(
        (s["$id"], referencing.Resource.from_contents(s)) for s in (hit, result)
    )
    return {
        "hit": jsonschema.Draft202012Validator(hit),
        "result": jsonschema.Draft202012Validator(result, registry=registry),
    }


# -- one hit per video -----------------------------------------------------------------
def test_red_finds_the_video_at_a_red_moment_with_its_moments(library, validator):
    hits = search_json("red")
    videos = [h for h in hits if h["kind"] == "video"]
    assert len(videos) == 1, "one hit per video, not one per frame"
    clip = videos[0]
    assert clip["rank"] == 1  # solid red frames beat the red shapes on a light background
    assert Path(clip["path"]).name == "clip.mp4"
    assert in_spans(clip["time"], RED_SPANS)
    # The moments are the red stretches: the sampler takes a frame at each cut, so their
    # edges are the cuts', to a frame.
    got = [(m["start"], m["end"]) for m in clip["moments"]]
    assert len(got) == len(RED_SPANS)
    for (start, end), (a, b) in zip(got, RED_SPANS, strict=True):
        assert abs(start - a) <= 1 / FPS + 1e-6 and abs(end - b) <= 1 / FPS + 1e-6
    assert clip["duration"] == pytest.approx(16, abs=0.2)
    for m in clip["moments"]:
        assert in_spans(m["time"], [(m["start"], m["end"])])
        assert m["probability"] > 0.5
    assert clip["time"] in [m["time"] for m in clip["moments"]]  # the best moment's best frame
    assert {h["kind"] for h in hits} == {"photo", "video"}
    assert all(h["moments"] is None and h["duration"] is None for h in hits if h is not clip)
    for h in hits:
        validator["hit"].validate(h)


def growing(t: float) -> np.ndarray:
    """Red covering more of the frame as time goes on: every sampled frame scores apart."""
    frame = solid((247, 247, 247))
    frame[:, : round(W * (0.6 + 0.3 * t / 10))] = RED  # 60-90%: more than the photos' 50%
    return frame


def test_k_counts_files_not_frames(library):
    # Every frame of growing.mp4 outranks the red photos, and no two tie: FAISS's first k
    # items are all its frames, and the search must look further to fill k files.
    write_video(library / "clips" / "growing.mp4", growing, seconds=10, fps=FPS)
    run("index", library, "-q")
    for k in (2, 3):
        hits = search_json("red", "-k", str(k))
        assert len({h["path"] for h in hits}) == len(hits) == k
        assert [Path(h["path"]).name for h in hits[:2]] == ["clip.mp4", "growing.mp4"]
    assert search_json("red", "-k", "3")[2]["kind"] == "photo"
    frames = search_json("red", "-k", "2", "--frames")
    assert [h["kind"] for h in frames] == ["video", "video"]
    assert len({h["path"] for h in frames}) == 1


def test_frames_lists_the_matching_frames_one_by_one(library):
    frames = [h for h in search_json("red", "--frames", "-p", "0.5") if h["kind"] == "video"]
    times = sorted(h["time"] for h in frames)
    # Every red frame sampled, and only red ones (a sample each second, and at each cut).
    assert times and all(in_spans(t, RED_SPANS) for t in times)
    assert len(times) >= sum(b - a for a, b in RED_SPANS) / EVERY
    assert len(set(h["item_id"] for h in frames)) == len(frames)
    assert all(h["moments"] is None for h in frames)
    paths = run("search", "red", "--frames", "-p", "0.5", "--kind", "video", "--paths").stdout
    assert paths.splitlines() == [frames[0]["path"]]  # a video's path once


def test_min_probability_moments_are_the_frames_that_pass(library):
    clip = next(h for h in search_json("red", "-p", "0.5") if h["kind"] == "video")
    assert len(clip["moments"]) == len(RED_SPANS)
    assert not [h for h in search_json("purple", "-p", "0.5") if h["kind"] == "video"]


def test_kind_keeps_photos_or_videos(library):
    photos = search_json("red", "--kind", "photo", "-k", "3")
    assert len(photos) == 3 and {h["kind"] for h in photos} == {"photo"}
    # Filtered before FAISS: the red frames crowd the top, yet the photos fill k.
    assert len(search_json("red", "--kind", "photo", "--frames", "-k", "2")) == 2
    videos = search_json("red", "--kind", "video")
    assert [Path(h["path"]).name for h in videos] == ["clip.mp4"]
    bad = run("search", "red", "--kind", "sound", ok=False)
    assert bad.exit_code == 2 and "Traceback" not in bad.output


def test_equal_videos_rank_by_item_id(library, env):
    clip = library / "clips" / "clip.mp4"
    shutil.copy(clip, library / "clips" / "copy.mp4")
    run("index", library, "-q")
    hits = search_json("red", "--kind", "video")
    assert [Path(h["path"]).name for h in hits] == ["clip.mp4", "copy.mp4"]
    assert hits[0]["score"] == hits[1]["score"] and hits[0]["item_id"] < hits[1]["item_id"]
    assert search_json("red", "--kind", "video", "-k", "1") == hits[:1]
    # Within a video, equal frames: the earliest (smallest item id) is the best.
    for m in hits[0]["moments"]:
        assert m["time"] == min(
            h["time"]
            for h in search_json("red", "--frames", "-p", "0.5", "--kind", "video")
            if h["path"] == hits[0]["path"]
            and m["start"] <= h["time"] <= m["end"]
            and h["score"] == m["score"]
        )


def test_table_shows_where_in_the_video(library):
    table = run("search", "red", "-k", "2").stdout
    clip = search_json("red", "-k", "1")[0]
    assert f"clip.mp4 @ {clock(clip['time'])}" in table


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_exports_carry_time_duration_and_moments(library, tmp_path, suffix):
    dest = tmp_path / f"hits{suffix}"
    run("search", "red", "-k", "3", "--export", dest)
    rows = read_export(dest)
    expected = search_json("red", "-k", "3")
    assert [r["path"] for r in rows] == [h["path"] for h in expected]
    for row, hit in zip(rows, expected, strict=True):
        for name in ("kind", "time", "duration", "moments", "item_id"):
            assert row.get(name) == hit[name], name
    if suffix == ".csv":  # the new columns come after the ones that were there
        header = dest.read_text().splitlines()[0].split(",")
        assert header[: len(HIT_CORE_FIELDS)] == list(HIT_CORE_FIELDS)
        assert header[-2:] == ["duration", "moments"]


# -- the service -------------------------------------------------------------------------
def test_the_service_returns_what_the_cli_prints(library, validator):
    with open_index() as searcher:
        result = search(searcher, SearchRequest("red", k=3, kind="video"))
    d = result.to_dict()
    validator["result"].validate(d)
    assert d["hits"] == search_json("red", "-k", "3", "--kind", "video")
    assert d["models"]["standin"] is True and set(d["timings"]) >= {"total_ms"}
    assert d["query"] == str(Query.parse("red")) and d["mask_prompt"] == "red"
    # One folder as a string (what the web app has) is that folder, not its characters.
    with open_index() as searcher:
        clips = search(searcher, SearchRequest("red", under=str(library / "clips"))).hits
    assert [Path(h.path).name for h in clips] == ["clip.mp4"]


# -- moments, without models -------------------------------------------------------------
def test_moments_are_runs_of_matching_frames_each_holding_until_the_next_sample():
    times = np.arange(10, dtype=np.float64)
    scores = np.array([0, 0.9, 0.95, 0.9, 0, 0, 0.8, 0, 0, 0.9])
    got = moments(times, np.arange(10) + 100, scores, None, scores > 0.5, duration=10.4)
    assert [(m["start"], m["end"], m["time"]) for m in got] == [
        (1.0, 4.0, 2.0),
        (6.0, 7.0, 6.0),
        (9.0, 10.4, 9.0),  # the last run reaches the end of the video
    ]
    tied = moments(times[:3], np.arange(3), np.array([0.9, 0.9, 0.0]), None, [1, 1, 0], None)
    assert [(m["start"], m["end"], m["time"]) for m in tied] == [(0.0, 2.0, 0.0)]


def test_clock():
    assert [clock(t) for t in (0, 12.7, 83, 3725)] == ["0:00", "0:12", "1:23", "1:02:05"]


# -- select and label over videos ----------------------------------------------------------
def test_select_gives_a_video_one_row_at_its_time_or_its_frames(library):
    rows = json.loads(run("select", "red", "-p", "0.5", "--json").stdout)
    clips = [r for r in rows if r["kind"] == "video"]
    assert len(clips) == 1 and in_spans(clips[0]["time"], RED_SPANS)
    frames = json.loads(
        run("select", "red", "-p", "0.5", "--frames", "--kind", "video", "--json").stdout
    )
    assert len(frames) > 1 and all(in_spans(r["time"], RED_SPANS) for r in frames)


def test_label_is_per_file_the_best_over_its_frames(library, env):
    out = json.loads(run("label", "-l", "red,blue,green", "--json").stdout)
    clip = [h for h in out if Path(h["path"]).name == "clip.mp4"]
    assert len(clip) == 1  # one row per file, not per frame
    # The clip shows every colour at some time: each label's best frame says so (frames
    # overwriting each other would leave only the last frame's colour).
    assert all(p > 0.5 for p in clip[0]["labels"].values())
    with IndexStore.open(env["index"]) as store:
        stored = [r for r in store.catalog.read_labels() if r["path"].endswith("clip.mp4")]
    assert {r["label"]: r["probability"] for r in stored} == pytest.approx(clip[0]["labels"])


def test_per_file_labels_are_the_best_of_each_files_items():
    from wherein.search.curate.labels import LabelRun, per_file

    p = np.array([[0.9, 0.1], [0.2, 0.3], [0.1, 0.8], [0.7, 0.2], [0.5, 0.5]])
    run = LabelRun(["a", "b"], "{}", ["a", "b"], "m", np.array([1, 7, 8, 9, 10]), p - 0.5, p)
    # 1 is a photo; 7, 8 and 9 frames of video 7; 10 is gone from the catalog.
    got = per_file(run, {1: 1, 7: 7, 8: 7, 9: 7})
    assert got.ids.tolist() == [1, 8]  # the video's row: its frame with the likeliest label
    assert got.probabilities.tolist() == [[0.9, 0.1], [0.7, 0.8]]
    assert got.cosines.tolist() == (got.probabilities - 0.5).tolist()


# -- --like a video ------------------------------------------------------------------
def test_like_an_indexed_video_searches_by_what_its_frames_show(env, shapes):
    """--like VIDEO (and the web app's like_id) uses the mean of its frames: a clip that is
    mostly green finds the green photo before the red and blue ones. A video not indexed is
    one clear error, not an attempt to decode it as a photo."""
    clip = write_video(
        shapes / "greenish.mp4", lambda t: solid(GREEN if t < 6 else RED), seconds=8, fps=FPS
    )
    run("index", shapes, "-q")
    hits = search_json("--like", clip, "--kind", "photo")
    assert Path(hits[0]["path"]).name == "green.bmp"
    assert Path(hits[1]["path"]).name.startswith("red_")
    video_id = search_json("green", "--kind", "video")[0]["id"]
    with open_index(env["index"]) as s:
        by_id = s.search(Query(()).like_id(video_id), kind="photo")
    assert [h.path for h in by_id[:2]] == [h["path"] for h in hits[:2]]
    stray = shutil.copy(clip, shapes.parent / "not_indexed.mp4")
    res = run("search", "--like", stray, ok=False)
    assert res.exit_code == 2 and "a video is used with --like once it is indexed" in res.output


def test_min_probability_on_a_mixed_query_cuts_on_the_text_part(library):
    """`red --like blue_square.png:2 -p 0.5`: -p is the calibrated probability of the text
    part ("red"), not of the mix. The blue frames score above the red ones on the mix (the
    blue photo weighs 2) but are not red: the clip's hit, its time and its moments are at
    red frames."""
    blue = library / "blue_square.png"
    hits = search_json("red", "--like", f"{blue}:2", "-p", "0.5")
    clip = next(h for h in hits if h["kind"] == "video")
    assert clip["probability"] >= 0.5 and in_spans(clip["time"], RED_SPANS), clip
    assert len(clip["moments"]) == len(RED_SPANS)
    assert all(in_spans(m["time"], RED_SPANS) for m in clip["moments"]), clip["moments"]
    assert all(h["probability"] >= 0.5 for h in hits)
    assert Path(blue).name not in {Path(h["path"]).name for h in hits}  # blue is not red
