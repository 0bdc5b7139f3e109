"""Video duplicates: the same clip re-encoded (other bitrate, size or container), by its frames.

A video is a file whose items are frames sampled every few seconds and at scene cuts (see
wherein.indexer.video.sample), so it has many vectors. Two videos are the same clip when

- their durations agree: within max(0.5 s, 2 % of the longer) — a re-encode keeps the
  length to a frame or two, a trimmed or extended cut does not;
- their frames match in time, both ways: for each frame of one, the best cosine among the
  other's frames within a window of its time (max(1 s, either video's median spacing of
  frames): two encodes put their keyframes and scene cuts at other times, so their sampled
  frames fall up to a spacing apart) reaches the threshold, for at least 80 % of the frames
  of each.

The score of a pair is the cosine that 80 % of the frames reach in the weaker direction (the
0.2 quantile of the best matches), so one number is compared with the same threshold as a
photo's cosine. Why frames aligned in time rather than one signature per video (a mean
vector): a mean blurs what happens when, so two clips of one scene told in another order,
or a clip and a cut of it, would look alike; and frames compare in the photos' own
embedding space, so the photos' thresholds carry over. Two different clips that share one
similar frame (the same opening shot) match on that frame only: far below 80 %.

A photo and a video never group, even when the photo equals one of the video's frames: a
photo holds one moment and a video the time around it (a Live Photo is a still and its
clip by design), so deleting either one loses something the other does not hold, and
``dupes --redundant`` must not suggest it. Byte-identical videos group by their hash, as
photos do.

This module is model-free: it sees frame times and vectors, never pixels.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from wherein.indexer.normalize import unit_rows

MIN_SHARE = 0.8  # of each video's frames that must find their match
MIN_WINDOW = 1.0  # seconds either side of a frame's time
DURATION_SLACK = 0.5  # seconds
DURATION_SHARE = 0.02  # of the longer duration
_EPS = 1e-3  # seconds: frame times are float renderings of exact pts
_CLIP_CACHE = 64  # videos held while the candidate pairs are verified


@dataclass
class Clip:
    """One video as the comparison sees it."""

    file_id: int
    times: np.ndarray  # [n] seconds, ascending
    vectors: np.ndarray  # [n, d] unit rows, in the order of times
    duration: float | None = None  # None: unknown (the last frame's time stands in)

    @property
    def length(self) -> float:
        if self.duration is not None:
            return float(self.duration)
        return float(self.times[-1]) if len(self.times) else 0.0

    def spacing(self) -> float:
        """The median time between two sampled frames (0 for a single frame)."""
        return float(np.median(np.diff(self.times))) if len(self.times) > 1 else 0.0


def window_of(a: Clip, b: Clip) -> float:
    """How far from a frame's time its match may lie (see the module docstring)."""
    return max(MIN_WINDOW, a.spacing(), b.spacing())


def same_length(a: Clip, b: Clip) -> bool:
    longer = max(a.length, b.length)
    slack = max(DURATION_SLACK, DURATION_SHARE * longer)
    if a.duration is None or b.duration is None:
        slack += window_of(a, b)  # the last sampled frame falls up to a spacing short of the end
    return abs(a.length - b.length) <= slack + _EPS


def best_matches(a: Clip, b: Clip, window: float) -> np.ndarray:
    """For each frame of a, its best cosine with a frame of b within window seconds
    (-1 where b has none so near)."""
    if not len(a.times) or not len(b.times):
        return np.full(len(a.times), -1.0)
    cos = np.asarray(a.vectors, np.float64) @ np.asarray(b.vectors, np.float64).T
    near = np.abs(a.times[:, None] - b.times[None, :]) <= window + _EPS
    return np.where(near, np.clip(cos, -1.0, 1.0), -1.0).max(axis=1)


def share_score(best: np.ndarray, share: float = MIN_SHARE) -> float:
    """The cosine that at least `share` of the frames reach."""
    if not len(best):
        return -1.0
    need = max(1, math.ceil(share * len(best) - 1e-9))
    return float(np.sort(best)[::-1][need - 1])


def similarity(a: Clip, b: Clip) -> float | None:
    """The pair's score (see the module docstring); None when the durations disagree."""
    if not same_length(a, b):
        return None
    window = window_of(a, b)
    return min(share_score(best_matches(a, b, window)), share_score(best_matches(b, a, window)))


class Frames:
    """The catalog's embedded frames: which video each belongs to, and each video's clip,
    loaded on demand (the last few kept: candidate pairs come sorted)."""

    def __init__(self, cat) -> None:
        self.cat = cat
        self.item_ids = cat.embedded_ids("frame")  # ascending
        file_of = cat.item_files(self.item_ids.tolist())
        self.file_ids = np.array([file_of[int(i)] for i in self.item_ids], np.int64)
        # file id -> its frames' (item id, t), by time
        self._frames = cat.embedded_frames(sorted(set(self.file_ids.tolist())))
        self.clip = lru_cache(maxsize=_CLIP_CACHE)(self._load)

    def __bool__(self) -> bool:
        return bool(len(self.item_ids))

    def is_video(self, file_id: int) -> bool:
        return file_id in self._frames

    @property
    def videos(self) -> list[int]:
        return sorted(self._frames)

    def is_frame(self, items: np.ndarray) -> np.ndarray:
        if not len(self.item_ids):
            return np.zeros(len(items), bool)
        pos = np.searchsorted(self.item_ids, items).clip(0, len(self.item_ids) - 1)
        return self.item_ids[pos] == items

    def file_of(self, items: np.ndarray) -> np.ndarray:
        """Each item's file id: a frame's video; any other item (a photo's) stands for itself."""
        items = np.asarray(items, np.int64)
        out = items.copy()
        hit = self.is_frame(items)
        if hit.any():
            out[hit] = self.file_ids[np.searchsorted(self.item_ids, items[hit])]
        return out

    def first_item(self, file_id: int) -> int:
        """The item a video's hit names: its first frame."""
        return self._frames[file_id][0][0]

    def _load(self, file_id: int) -> Clip:
        frames = self._frames.get(file_id, [])
        got, vecs = self.cat.vectors_for([i for i, _ in frames])
        vec_of = dict(zip(got.tolist(), unit_rows(vecs), strict=True)) if len(got) else {}
        kept = [(i, t) for i, t in frames if i in vec_of]
        times = np.array([t for _, t in kept], np.float64)
        vectors = np.stack([vec_of[i] for i, _ in kept]) if kept else np.zeros((0, 0), np.float32)
        return Clip(file_id, times, vectors, self._duration(file_id))

    def _duration(self, file_id: int) -> float | None:
        """The container's duration, as hit_rows gives it for a frame (None where unknown)."""
        if file_id not in self._frames:
            return None
        row = self.cat.hit_rows([self.first_item(file_id)]).get(self.first_item(file_id), {})
        duration = row.get("duration")
        return None if duration is None else float(duration)


def candidate_pairs(
    frames: Frames, ids: np.ndarray, found: np.ndarray, lims: np.ndarray
) -> Iterator[tuple[int, int]]:
    """(video a, video b), a < b, for each frame query whose range-search results hold a frame
    of another video (what similarity then verifies)."""
    is_query_frame = frames.is_frame(ids)
    if not is_query_frame.any():
        return
    bounds = np.asarray(lims, np.int64)
    q_of = np.repeat(np.arange(len(ids)), bounds[1:] - bounds[:-1])
    keep = is_query_frame[q_of] & frames.is_frame(found)
    if not keep.any():
        return
    fa = frames.file_of(ids[q_of[keep]])
    fb = frames.file_of(found[keep])
    other = fa != fb
    lo, hi = np.minimum(fa[other], fb[other]), np.maximum(fa[other], fb[other])
    for a, b in np.unique(np.stack([lo, hi], axis=1), axis=0).tolist() if len(lo) else []:
        yield int(a), int(b)


def verified_pairs(
    frames: Frames, candidates: Iterable[tuple[int, int]], threshold: float, slack: float
) -> dict[tuple[int, int], float]:
    """The candidate pairs that are the same clip, with their score."""
    out: dict[tuple[int, int], float] = {}
    for a, b in sorted(set(candidates)):
        score = similarity(frames.clip(a), frames.clip(b))
        if score is not None and score >= threshold - slack:
            out[(a, b)] = score
    return out
