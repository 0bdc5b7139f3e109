"""Uniqueness: how far each image is from its k nearest neighbours in the index.

uniqueness = mean cosine distance (1 - cosine) to the k nearest other images,
found with the index's own k-NN search (batched over the catalog's vectors).
High = unlike anything else (an odd image, a mislabelled one, a rare scene);
near 0 = it has close copies. An exact copy counts as a neighbour at distance
0, so duplicated images rank low. On an approximate (IVF) index the neighbours
and cosines are approximate too (recall ~0.97, cosines within ~1e-3).

A video (a file whose items are frames) is one entry: its uniqueness is the mean of its
frames', each frame's neighbours being the nearest items of other files (photos and other
videos' frames: a photo whose scene a video holds is not odd), never the video's own frames.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from wherein.indexer.normalize import unit_rows
from wherein.schemas.errors import UsageError
from wherein.schemas.records import Hit
from wherein.search.curate.video_dupes import Frames
from wherein.search.ranking import rank_order


def uniqueness(store, k: int = 10, batch: int = 1024) -> tuple[np.ndarray, np.ndarray, int]:
    """(ids, uniqueness, k used): k shrinks to n - 1 on small indexes. ids are item ids: a
    photo's, or a video's first frame's (one entry per video)."""
    if k < 1:
        raise UsageError("--k must be at least 1")
    store.ensure_vectors(persist=False)
    index = store.vectors.index
    n = 0 if index is None else int(index.ntotal)
    if n < 2:
        return np.zeros(0, dtype=np.int64), np.zeros(0), 0
    k = min(k, n - 1)
    frames = Frames(store.catalog)
    own = Counter(frames.file_ids.tolist())  # items of each video: a frame's query skips them
    all_ids, all_u = [], []
    for ids, vecs in store.catalog.iter_vectors(batch):
        files = frames.file_of(ids)
        fetch = min(n, k + max((own.get(int(f), 1) for f in files), default=1))
        scores, found = index.search(unit_rows(vecs), fetch)
        # Drop each item's own file (by file: with exact copies it need not come first).
        found_files = frames.file_of(found.ravel()).reshape(found.shape)
        not_self = (found_files != files[:, None]) & (found >= 0)
        for q in range(len(ids)):
            s = scores[q][not_self[q]][:k]
            all_u.append(float(np.mean(1.0 - np.clip(s, -1.0, 1.0))) if len(s) else 0.0)
        all_ids.append(files)
    file_ids, u = np.concatenate(all_ids), np.array(all_u)
    if not frames:
        return file_ids, u, k
    # One entry per file: a photo's own, a video's mean over its frames.
    uniq, inverse = np.unique(file_ids, return_inverse=True)
    mean = np.bincount(inverse, weights=u) / np.bincount(inverse)
    named = np.array(
        [frames.first_item(int(f)) if frames.is_video(int(f)) else int(f) for f in uniq],
        np.int64,
    )
    return named, mean, k


def unique_hits(store, k: int = 10, top: int | None = 20) -> list[Hit]:
    """The most unique images first; score = mean cosine to the k neighbours, extra: uniqueness, k."""
    ids, u, k_used = uniqueness(store, k)
    order = rank_order(u, ids)  # most unique first; equal (to 6 places): by id
    if top is not None:
        order = order[:top]
    rows = store.catalog.hit_rows(ids[order])
    hits: list[Hit] = []
    for i in order:
        row = rows.get(int(ids[i]))
        if row is None:
            continue
        hits.append(
            Hit.from_row(
                row,
                len(hits) + 1,
                1.0 - float(u[i]),
                None,
                extra={"uniqueness": round(float(u[i]), 6), "k": k_used},
            )
        )
    return hits
