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
- else the frames *close to the best*: with a text term, those whose calibrated logit
  (``scale * cosine + bias``, the sigmoid's argument) is within ``MOMENT_LOGIT_GAP`` (2) of
  the best frame's, i.e. a text cosine within 2 / scale of it (SigLIP 2's scale is about 117:
  0.017; the stand-ins' 16: 0.125). Where probabilities are small, as SigLIP's mostly are,
  that is a probability at least e^-2 (about 1/7) of the best frame's. An image-only query
  has no calibration: frames within ``MOMENT_SCORE_GAP`` (0.02) of the best score.

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

MOMENT_LOGIT_GAP = 2.0
MOMENT_SCORE_GAP = 0.02


def matching_frames(
    scores: np.ndarray,
    text_cos: np.ndarray | None,
    logit_scale: float | None,
    passes: np.ndarray | None = None,
) -> np.ndarray:
    """Which of a video's frames match (see the module docstring); passes: the frames
    that pass the search's threshold, when it has one."""
    if passes is not None:
        return np.asarray(passes, dtype=bool)
    if text_cos is not None and logit_scale:
        gap = MOMENT_LOGIT_GAP / logit_scale
        return text_cos >= text_cos.max() - gap - THRESHOLD_SLACK
    return scores >= scores.max() - MOMENT_SCORE_GAP - THRESHOLD_SLACK


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
