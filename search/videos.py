"""Videos in search results: one hit per video, and the moments where it matches.

A video is a file whose items are its sampled frames, each with its own vector and its
time ``t`` in seconds. A search ranks frames like photos, then folds a video's frames into
one hit (unless ``--frames`` asks for the frames one by one):

- the hit is the video's best frame: its score and probability rank the video, its ``time``
  says where to look; equal scores break by item id, as every ranking does (ranking.py);
- ``moments`` are the stretches of the video where it matches, in time order, each
  ``{start, end, time, score, probability}``: the seconds it starts and ends, and the time,
  score and probability of its best frame.

Which frames match (``matching_frames``):

- with a threshold (``--min-probability P`` or ``--min-score S``), the frames that pass it;
- else the frames that *stand out from the clip's own run of scores*. With a text term each
  frame's calibrated logit ``x = scale * cosine + bias`` (the sigmoid's argument) is read
  against the clip's baseline: its median ``m`` and robust spread
  ``s = max(1.4826 * MAD, MOMENT_MIN_SPREAD)`` (MAD: the median absolute deviation, 1.4826
  makes it a standard deviation for normal noise; the minimum, half a logit, keeps a clip of
  near-identical frames from turning jitter into moments). A frame matches when
  ``x >= max(FLOOR, m + MOMENT_SPREADS * s)`` (3 spreads: odds at least ~4.5 times the
  clip's usual frame), where ``FLOOR`` is the logit of ``MOMENT_MIN_PROBABILITY`` (0.05):
  a frame the model gives under 1 chance in 20 does not show the thing, however it compares
  with the rest of the clip, so a clip that never shows it gets no moment whatever its best
  frame's score. When the baseline itself clears the floor, the thing is on screen most of
  the time: then every frame over the floor matches (a clip that always shows it is one
  moment, and the stretches where it leaves the screen fall below the floor).
  An image-only query has no calibration and so no floor: the frames at least
  ``MOMENT_SPREADS`` spreads (``MOMENT_MIN_SCORE_SPREAD``, 0.01 of cosine, at least) over
  the clip's median score; a clip with no frame standing out matches throughout (it is a
  hit, and nothing in it is more so than the rest).

A moment is a run of matching frames, consecutive in time. A sampled frame stands for the
video until the next sample (the sampler takes one at least every few seconds and at every
scene cut, so what a frame shows holds until then): a moment starts at its first frame's
time and ends at the time of the frame sampled after its last one (the video's duration
when none follows).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from wherein.schemas.records import MOMENT_FIELDS
from wherein.search.ranking import THRESHOLD_SLACK, rank_order

MOMENT_MIN_PROBABILITY = 0.05
MOMENT_SPREADS = 3.0
MOMENT_MIN_SPREAD = 0.5  # calibrated logit
MOMENT_MIN_SCORE_SPREAD = 0.01  # cosine, for an image-only query
MAD_TO_SIGMA = 1.4826


def stand_out(values: np.ndarray, min_spread: float) -> float:
    """The level a clip's frame must reach to stand out from the clip's own run of values:
    median + MOMENT_SPREADS robust spreads (MAD, at least min_spread)."""
    values = np.asarray(values, dtype=np.float64)
    median = float(np.median(values))
    spread = max(MAD_TO_SIGMA * float(np.median(np.abs(values - median))), min_spread)
    return median + MOMENT_SPREADS * spread


def moment_level(logits: np.ndarray) -> float:
    """The calibrated logit a frame of this clip must reach to match (module docstring)."""
    floor = float(np.log(MOMENT_MIN_PROBABILITY / (1 - MOMENT_MIN_PROBABILITY)))
    if float(np.median(logits)) >= floor:  # on screen most of the time
        return floor
    return max(floor, stand_out(logits, MOMENT_MIN_SPREAD))


def matching_frames(
    scores: np.ndarray,
    text_cos: np.ndarray | None,
    calibration: tuple[float, float] | None,
    passes: np.ndarray | None = None,
) -> np.ndarray:
    """Which of a video's frames match (see the module docstring). calibration: the text
    tower's (scale, bias) when the query has a text part; passes: the frames that pass the
    search's threshold, when it has one."""
    if passes is not None:
        return np.asarray(passes, dtype=bool)
    if text_cos is not None and calibration is not None:
        scale, bias = calibration
        logits = scale * np.asarray(text_cos, dtype=np.float64) + bias
        return logits >= moment_level(logits) - scale * THRESHOLD_SLACK
    scores = np.asarray(scores, dtype=np.float64)
    level = stand_out(scores, MOMENT_MIN_SCORE_SPREAD)
    above = scores >= level - THRESHOLD_SLACK
    return above if above.any() else np.ones(len(scores), dtype=bool)


def moments(
    times: np.ndarray,
    item_ids: np.ndarray,
    scores: np.ndarray,
    probs: np.ndarray | None,
    matching: np.ndarray,
    duration: float | None,
) -> list[dict[str, Any]]:
    """The runs of matching frames as moments, in time order; frames given by time."""
    out: list[dict[str, Any]] = []
    n = len(times)
    i = 0
    while i < n:
        if not matching[i]:
            i += 1
            continue
        j = i
        while j + 1 < n and matching[j + 1]:
            j += 1
        start = times[i]
        last = max(float(times[j]), duration or 0.0)  # the run reaches the last frame
        end = times[j + 1] if j + 1 < n else last
        best = i + int(rank_order(scores[i : j + 1], item_ids[i : j + 1])[0])
        values = (
            float(start),
            float(end),
            float(times[best]),
            float(scores[best]),
            None if probs is None else float(probs[best]),
        )
        out.append(dict(zip(MOMENT_FIELDS, values, strict=True)))
        i = j + 1
    return out


def first_per_file(order: list[int], file_of: list[int | None]) -> list[int]:
    """The positions in ``order`` (a ranking) that are their file's first: one per file, best
    first. file_of[i] is the file of position i (None: gone from the catalog, left out)."""
    seen: set[int] = set()
    out: list[int] = []
    for i in order:
        f = file_of[i]
        if f is None or f in seen:
            continue
        seen.add(f)
        out.append(i)
    return out


def nth_file_position(files: list[int | None], n: int) -> int | None:
    """The index in ``files`` (items in FAISS's order) of the item that brings the n-th
    distinct file; None when fewer than n files are there."""
    seen: set[int] = set()
    for pos, f in enumerate(files):
        if f is None or f in seen:
            continue
        seen.add(f)
        if len(seen) == n:
            return pos
    return None


def clock(seconds: float) -> str:
    """12.7 -> '0:12', 83 -> '1:23', 3725 -> '1:02:05': a player's clock, whole seconds."""
    s = int(seconds)
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"
