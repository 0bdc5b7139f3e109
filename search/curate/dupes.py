"""Duplicate groups: exact (same content hash) and near (embedding cosine >= threshold).

Exact duplicates come from the catalog's sha256 column. Near duplicates come
from a FAISS range search of every indexed vector against the index (batched;
no pairwise loop in Python); an approximate (IVF) index is searched with a
slightly lower radius and the candidate pairs are re-scored exactly from the
catalog's float32 vectors. Pairs are joined into groups by union-find, so a
group is a chain of near-identical pairs: A~B and B~C put A and C together
even when A and C alone fall just below the threshold (each member's ``score``
is its cosine with the keeper, which shows that).

Default threshold: the index's model family says it (its registry entry's
``thresholds.near_duplicate``; an index from before families were recorded is
SigLIP 2 B/16's or the stand-ins', by its space; an unknown family 0.95):

- SigLIP 2: 0.95. Re-encodes, resizes and format conversions of one photo land
  at >= 0.95; different photos of the same scene usually below.
- the stand-in models: 0.998. The stand-in embedding is a colour histogram plus
  a 4x4 spatial colour histogram, so every image of one colour is close:
  measured on the test drawings, copies (JPEG q60, 50% resize, PNG -> JPEG) are
  at >= 0.9999, the same colour in another layout (a disc vs a square) at 0.993,
  a shifted square at 0.925, other colours at <= 0.68.

Keeper of a group (the one to keep): a file that still exists, then the largest
resolution (width x height), then the largest file, then the oldest (earliest
mtime), then the path in sort order.

Videos (files whose items are frames) group with videos only, by their frames aligned in
time: see video_dupes.py. Their candidate pairs come from the same range search (a frame
of one at the threshold of a frame of another); a photo never groups with a video.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from wherein.indexer.models.family import Thresholds
from wherein.indexer.models.registry import family_of_index
from wherein.indexer.normalize import unit_rows
from wherein.schemas.errors import ModelError, UsageError
from wherein.schemas.records import Hit
from wherein.search.curate import video_dupes as VD
from wherein.search.ranking import THRESHOLD_SLACK, exact_scores, tie_key

_APPROX_MARGIN = 0.01  # SQ8 scores are off by ~1e-3: search wider, cut on exact scores


def default_threshold(family: str | None, space: str | None) -> float:
    """The near-duplicate cosine of an index's model family (see the module docstring)."""
    try:
        return family_of_index(family, space).thresholds.near_duplicate
    except ModelError:  # a family no longer installed: the usual cut-off
        return Thresholds().near_duplicate


@dataclass
class DupeReport:
    hits: list[Hit]  # group by group, keeper first
    threshold: float | None  # None when only exact duplicates were looked for
    groups: int = 0
    redundant: int = 0  # files that are not keepers
    redundant_bytes: int = 0
    pairs: dict[tuple[int, int], float] = field(default_factory=dict, repr=False)


class UnionFind:
    def __init__(self) -> None:
        self.parent: dict[int, int] = {}

    def find(self, x: int) -> int:
        parent = self.parent
        parent.setdefault(x, x)
        root = x
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:  # path compression
            parent[x], x = root, parent[x]
        return root

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

    def groups(self) -> list[list[int]]:
        out: dict[int, list[int]] = defaultdict(list)
        for x in list(self.parent):
            out[self.find(x)].append(x)
        return [sorted(g) for g in out.values() if len(g) > 1]


def find_duplicates(
    store, threshold: float | None = None, exact_only: bool = False, batch: int = 1024
) -> DupeReport:
    """Duplicate groups of an open IndexStore; threshold None = the space's default."""
    cat = store.catalog
    if threshold is None and not exact_only:
        threshold = default_threshold(cat.get_meta("family"), cat.get_meta("space"))
    if threshold is not None and not -1.0 <= threshold <= 1.0:
        raise UsageError("--threshold is a cosine: between -1 and 1")
    frames = VD.Frames(cat)
    uf, videos = UnionFind(), UnionFind()  # photos by item id, videos by file id
    for ids in cat.exact_duplicate_groups():
        for kind in (videos, uf):
            same = [i for i in ids if frames.is_video(i) == (kind is videos)]
            for other in same[1:]:
                kind.union(same[0], other)
    pairs: dict[tuple[int, int], float] = {}
    video_pairs: dict[tuple[int, int], float] = {}
    if not exact_only:
        assert threshold is not None  # set to the space's default above
        store.ensure_vectors(persist=False)
        pairs, candidates = _near_pairs(store, float(threshold), batch, frames)
        video_pairs = VD.verified_pairs(frames, candidates, float(threshold), THRESHOLD_SLACK)
        for a, b in pairs:
            uf.union(a, b)
        for a, b in video_pairs:
            videos.union(a, b)
    report = DupeReport([], None if exact_only else threshold, pairs=pairs)
    groups = [_describe(cat, g, pairs) for g in uf.groups()]
    groups += [_describe_videos(cat, frames, g, video_pairs) for g in videos.groups()]
    groups = [g for g in groups if len(g) > 1]  # members whose rows went are left out
    groups.sort(key=lambda g: (-len(g), g[0][0]["path"]))
    for number, members in enumerate(groups, 1):
        report.groups += 1
        for row, score, match in members:
            keeper = match == "keeper"
            if not keeper:
                report.redundant += 1
                report.redundant_bytes += int(row["size"] or 0)
            report.hits.append(
                Hit.from_row(
                    row,
                    len(report.hits) + 1,
                    score,
                    None,
                    extra={
                        "group": number,
                        "group_size": len(members),
                        "keeper": keeper,
                        "match": match,
                    },
                )
            )
    return report


def _near_pairs(
    store, threshold: float, batch: int, frames: VD.Frames
) -> tuple[dict[tuple[int, int], float], set[tuple[int, int]]]:
    """(photo pairs, video candidates): (a, b) with a < b -> exact cosine, for every pair of
    photo items at or above threshold; and the pairs of videos (file ids) with a frame each
    that close, for video_dupes to verify. Frames and photos never pair."""
    index = store.vectors.index
    if index is None or index.ntotal < 2:
        return {}, set()
    choice = store.vectors.choice
    approx = choice is not None and choice.kind != "flat"
    # The cut below is on threshold - THRESHOLD_SLACK; FAISS's float32 scores are off by
    # ~1e-7 (flat) or ~1e-3 (SQ8): ask it for a little more.
    radius = threshold - (_APPROX_MARGIN if approx else 2 * THRESHOLD_SLACK)
    pairs: dict[tuple[int, int], float] = {}
    candidates: set[tuple[int, int]] = set()
    for ids, vecs in store.catalog.iter_vectors(batch):
        lims, scores, found = index.range_search(unit_rows(vecs), radius)
        query_frame = np.zeros(len(ids), bool)
        photo_found = np.ones(len(found), bool)
        if frames:
            candidates.update(VD.candidate_pairs(frames, ids, found, lims))
            query_frame, photo_found = frames.is_frame(ids), ~frames.is_frame(found)
        for q, a in enumerate(ids.tolist()):
            lo, hi = int(lims[q]), int(lims[q + 1])
            if query_frame[q]:
                continue
            for b, s, photo in zip(
                found[lo:hi].tolist(),
                scores[lo:hi].tolist(),
                photo_found[lo:hi].tolist(),
                strict=True,
            ):
                if b != a and photo:
                    key = (a, b) if a < b else (b, a)
                    pairs[key] = max(pairs.get(key, -2.0), float(s))
    if approx and pairs:
        pairs = _rescore(store.catalog, pairs)
    return {k: v for k, v in pairs.items() if v >= threshold - THRESHOLD_SLACK}, candidates


def _rescore(cat, pairs: dict[tuple[int, int], float]) -> dict[tuple[int, int], float]:
    ids = sorted({i for p in pairs for i in p})
    got, vecs = cat.vectors_for(ids)
    pos = {int(i): n for n, i in enumerate(got)}
    vecs = unit_rows(vecs)
    return {
        (a, b): float(exact_scores(vecs[pos[a]], vecs[pos[b]]))
        for a, b in pairs
        if a in pos and b in pos
    }


def _keeper_key(row: dict, exists: bool):
    pixels = (row["width"] or 0) * (row["height"] or 0)
    return (not exists, -pixels, -(row["size"] or 0), row["mtime_ns"] or 0, row["path"])


def _describe(
    cat, ids: list[int], pairs: dict[tuple[int, int], float]
) -> list[tuple[dict, float, str]]:
    """[(row, cosine with keeper, 'keeper' | 'exact' | 'near')], keeper first, then by cosine
    (see wherein.search.ranking), then by id."""
    rows = cat.hit_rows(ids)  # keyed by item id: vectors and pairs are the items'
    present = [rows[i] for i in ids if i in rows]
    if not present:
        return []
    keeper = min(present, key=lambda r: _keeper_key(r, os.path.exists(r["path"])))
    got, vecs = cat.vectors_for([r["item_id"] for r in present])
    vec_of = dict(zip(got.tolist(), unit_rows(vecs))) if len(got) else {}
    # Exact copies share one vector: use any of them when the keeper's own is pending.
    kvec = (
        vec_of.get(keeper["item_id"])
        if keeper["item_id"] in vec_of
        else next(
            (
                vec_of[r["item_id"]]
                for r in present
                if r["sha256"] == keeper["sha256"] and r["item_id"] in vec_of
            ),
            None,
        )
    )
    out = []
    for r in present:
        if r["item_id"] == keeper["item_id"]:
            out.append((r, 1.0, "keeper"))
        elif r["sha256"] == keeper["sha256"]:
            out.append((r, 1.0, "exact"))
        elif kvec is not None and r["item_id"] in vec_of:
            cos = float(exact_scores(vec_of[r["item_id"]], kvec))
            out.append((r, float(np.clip(cos, -1.0, 1.0)), "near"))
        else:
            best = max((s for (a, b), s in pairs.items() if r["item_id"] in (a, b)), default=0.0)
            out.append((r, best, "near"))
    # Equal cosines (to SCORE_DECIMALS) by id: last-bit differences between CPUs must not
    # reorder a group.
    out.sort(key=lambda t: (t[2] != "keeper", -float(tie_key(t[1])), t[0]["id"]))
    return out


def _describe_videos(
    cat, frames: VD.Frames, files: list[int], pairs: dict[tuple[int, int], float]
) -> list[tuple[dict, float, str]]:
    """_describe for a group of videos: the score is each one's similarity with the keeper
    (video_dupes.similarity); a hit names the video's first frame."""
    item_of = {f: frames.first_item(f) for f in files}
    rows = cat.hit_rows(item_of.values())
    present = [rows[item_of[f]] for f in files if item_of[f] in rows]
    if not present:
        return []
    keeper = min(present, key=lambda r: _keeper_key(r, os.path.exists(r["path"])))
    kclip = frames.clip(keeper["id"])
    out = []
    for r in present:
        if r["id"] == keeper["id"]:
            out.append((r, 1.0, "keeper"))
        elif r["sha256"] == keeper["sha256"]:
            out.append((r, 1.0, "exact"))
        else:
            score = VD.similarity(frames.clip(r["id"]), kclip) if len(kclip.times) else None
            if score is None:  # a chain's far end (or the keeper's frames are pending)
                score = max((s for p, s in pairs.items() if r["id"] in p), default=0.0)
            out.append((r, score, "near"))
    out.sort(key=lambda t: (t[2] != "keeper", -float(tie_key(t[1])), t[0]["id"]))
    return out
