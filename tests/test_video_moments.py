"""A video's moments are the seconds that show the thing, read from the clip's own run of scores.

Real H.264 clips (PyAV, tests/video_files.py) of a small red square on a light background,
on screen at known times, indexed once with the stand-in models (they rank colours), then
`wherein search red --kind video --json`. Each case is one clip:

- short: on screen 6-9 s of 20 s;
- long: 10-50 s of 60 s;
- two: 4-8 s and 14-18 s of 24 s;
- always: the whole 12 s;
- never: a blue square instead, 12 s (still a hit of a video search, with no moment).

A moment's edges may be off by one sampling interval (EVERY): the sampler takes a frame at
least every 2 s, and a small square appearing is not always a scene cut.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from video_files import BLUE, RED, solid, write_video

from wherein.search.cli import cli
from wherein.search.videos import matching_frames

EVERY = 2.0  # `wherein index`'s default --frame-every
FPS = 5
LIGHT = (247, 247, 247)


def square(spans, colour=RED):
    """A clip's frames: the square in colour while t is in one of spans, else the background."""

    def frame(t: float) -> np.ndarray:
        out = solid(LIGHT)
        if any(a <= t < b for a, b in spans):
            out[16:48, 32:64] = colour
        return out

    return frame


CLIPS = {
    "short": (20, [(6, 9)], RED),
    "long": (60, [(10, 50)], RED),
    "two": (24, [(4, 8), (14, 18)], RED),
    "always": (12, [(0, 12)], RED),
    "never": (12, [(0, 12)], BLUE),
}
EXPECTED = {name: (spans if colour == RED else []) for name, (_, spans, colour) in CLIPS.items()}


@pytest.fixture(scope="module")
def video_hits(standin_models, tmp_path_factory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("moments")
    for name, (seconds, spans, colour) in CLIPS.items():
        write_video(root / "clips" / f"{name}.mp4", square(spans, colour), seconds, fps=FPS)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WHEREIN_MODELS", str(standin_models))
        mp.setenv("WHEREIN_INDEX", str(root / "index"))
        runner = CliRunner()
        indexed = runner.invoke(cli, ["index", str(root / "clips"), "-q"])
        assert indexed.exit_code == 0, indexed.output
        found = runner.invoke(cli, ["search", "red", "--kind", "video", "-k", "10", "--json"])
        assert found.exit_code == 0, found.output
    return {Path(h["path"]).stem: h for h in json.loads(found.stdout)}


@pytest.mark.parametrize("name", list(CLIPS))
def test_a_clips_moments_are_the_seconds_that_show_it(video_hits, name):
    hit = video_hits[name]  # every clip is a hit of a video search, shown or not
    got = [(m["start"], m["end"]) for m in hit["moments"]]
    assert len(got) == len(EXPECTED[name]), got
    for (start, end), (a, b) in zip(got, EXPECTED[name], strict=True):
        assert abs(start - a) <= EVERY + 1e-6 and abs(end - b) <= EVERY + 1e-6, got
    for m in hit["moments"]:
        assert m["start"] <= m["time"] < m["end"]


def test_a_clip_that_never_shows_it_has_no_moment_though_its_best_frame_leads_it(video_hits):
    never = video_hits["never"]
    # Its frames all score alike: its best frame is as close to "the best" as a frame gets.
    assert never["probability"] < min(
        h["probability"] for n, h in video_hits.items() if n != "never"
    )
    assert never["moments"] == []


# -- the rule, on numbers --------------------------------------------------------------------
def logits_to_cos(logits, scale=10.0, bias=-5.0) -> np.ndarray:
    return (np.asarray(logits, dtype=np.float64) - bias) / scale


def test_a_frame_matches_when_it_stands_out_from_the_clip_and_clears_the_floor():
    cal = (10.0, -5.0)
    # A clip at logit -8 (p 0.0003) with two frames at -1 (p 0.27): those two stand out.
    x = logits_to_cos([-8, -8.1, -7.9, -1, -1, -8, -8.2])
    assert matching_frames(x, x, cal).tolist() == [0, 0, 0, 1, 1, 0, 0]
    # The same shape far under the floor (p 0.05): no frame shows it, however it stands out.
    low = logits_to_cos([-12, -12.1, -11.9, -6, -6, -12, -12.2])
    assert not matching_frames(low, low, cal).any()
    # Over the floor but not out of the clip's own noise: a clip that wanders is not a moment.
    noisy = logits_to_cos([-8, -5, -9, -2.5, -7, -4, -10, -6])
    assert not matching_frames(noisy, noisy, cal).any()
    # On screen most of the time (median over the floor): the frames over the floor.
    mostly = logits_to_cos([1, 1.2, -8, 0.8, 1, -9, 1.1])
    assert matching_frames(mostly, mostly, cal).tolist() == [1, 1, 0, 1, 1, 0, 1]
    # A search threshold decides alone.
    passes = np.array([True, False, False, False, False, False, False])
    assert matching_frames(x, x, cal, passes).tolist() == passes.tolist()


def test_an_image_query_matches_the_frames_over_the_clips_median_or_all_of_a_flat_clip():
    scores = np.array([0.30, 0.30, 0.42, 0.30, 0.31])
    assert matching_frames(scores, None, None).tolist() == [0, 0, 1, 0, 0]
    assert matching_frames(np.full(4, 0.3), None, None).all()
