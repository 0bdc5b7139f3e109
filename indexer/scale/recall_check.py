"""Does an IVF quantizer still fit the vectors it holds? Recall@10 measured, not guessed.

After an append, the new vectors sit in the lists of a quantizer trained without
them. Where they come from a region its centroids do not cover, their neighbours
scatter over lists that the probe misses, and search quietly loses them.

The check: 200 of the appended vectors are the queries. The truth is the same
index searched with every list probed (nprobe = nlist: an exhaustive scan of its
codes); the answer is the search as `wherein search` runs it (the index's nprobe).
What differs is exactly what the quantizer decides, which lists are probed, over
the whole index: no subset, so no bias from sparser neighbours (a first version
compared against exact search on a 50,000-vector subset and read ~0.1 low on
unclustered data). The scalar quantizer's own error is on both sides and left out;
search re-scores candidates with the exact vectors anyway. Each query is itself in
the index and is left out of both lists.

Cost: one exhaustive pass over the codes per query, batched by FAISS: instant at
1M; at 100M (75 GiB of SQ8 codes) minutes on a many-core box, next to hours of
appending.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wherein.indexer.normalize import unit_rows
from wherein.indexer.store.catalog import Catalog

RECALL_TARGET = 0.90  # raw IVF recall@10; search re-scores a 4x over-fetch on top of it
QUERIES = 200
K = 10


@dataclass(frozen=True)
class Recall:
    recall: float
    queries: int
    target: float = RECALL_TARGET

    @property
    def ok(self) -> bool:
        return self.recall >= self.target

    def as_dict(self) -> dict:
        return {
            "recall_at_10": round(self.recall, 4),
            "queries": self.queries,
            "target": self.target,
        }


def measure(
    index,
    nprobe: int,
    cat: Catalog,
    new_ids: np.ndarray,
    target: float = RECALL_TARGET,
    seed: int = 0,
) -> Recall | None:
    """Recall@10 of ``index`` at ``nprobe`` for queries among ``new_ids``; None without queries."""
    import faiss

    rng = np.random.default_rng(seed)
    q_ids, q = cat.vectors_for(rng.permutation(new_ids)[: QUERIES * 2])
    q_ids, q = q_ids[:QUERIES], unit_rows(q[:QUERIES]) if len(q_ids) else q
    nlist = faiss.extract_index_ivf(index).nlist
    if len(q_ids) == 0 or index.ntotal <= K:
        return None
    # FAISS's Python wrapper takes fields as keywords; its stubs declare a bare constructor.
    everything = faiss.SearchParametersIVF(nprobe=nlist)  # type: ignore[call-arg, unused-ignore]
    at_nprobe = faiss.SearchParametersIVF(nprobe=nprobe)  # type: ignore[call-arg, unused-ignore]
    _, truth = index.search(q, K + 1, params=everything)
    _, got = index.search(q, K + 1, params=at_nprobe)
    hits = []
    for own, t, g in zip(q_ids, truth, got, strict=True):
        t = [i for i in t.tolist() if i != own and i >= 0][:K]
        g = [i for i in g.tolist() if i != own and i >= 0][:K]
        hits.append(len(set(t) & set(g)) / max(1, len(t)))
    return Recall(float(np.mean(hits)), len(q_ids), target)
