"""Photos with regions in search results: one hit per photo, and where in it the query matched.

A large photo indexed with ``--regions`` yields its whole item and a few region items (tiles,
each with its box; indexer/regions.py). A search ranks items, then folds a photo's items into
one hit, as it folds a video's frames (unless ``--frames`` asks for the items one by one):

- the hit names the photo's best item by score (the cosine with the full query), equal
  scores broken by item id, as every ranking is (ranking.py): its ``region`` is that item's
  box, ``[x0, y0, x1, y1]`` in the photo's pixels (where in the photo it matched), or null
  when the whole photo matched best;
- its ``score`` and ``probability`` are calibrated so that more regions do not make more
  false matches. A photo cut into n - 1 regions has n looks at the query, and the best of n
  looks at a photo without the thing scores higher than one look does, by chance: the best
  region counts only by what it has over that, ``log(n)`` in calibrated logits (the
  sigmoid's argument), the odds of one look in n:

      logit(photo) = max(logit(whole), logit(best region) - log(n))

  and its score likewise (the region's less ``log(n) / logit_scale``), so the ranking agrees
  with the probabilities. A photo whose regions do not stand out keeps its whole photo's
  score and probability; a small thing that fills its tile raises them.
  ``--min-probability`` cuts on that probability. A query without text has no calibration:
  the photo scores as its best item.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from wherein.search.ranking import rank_order


def look_elsewhere(n_items: int) -> float:
    """What a photo's best region gives up, in calibrated logits, for being one of n looks
    (the whole photo and its regions) at the query: log(n)."""
    return math.log(max(1, n_items))


def photo_cosine(cos: np.ndarray, whole: np.ndarray, logit_scale: float) -> float:
    """A photo's cosine with the query (see the module docstring): its whole item's, or its
    best region's less log(n) / logit_scale, whichever is higher. cos: each item's cosine;
    whole: which item is the whole photo."""
    regions = cos[~whole]
    best = float(cos[whole].max()) if whole.any() else -math.inf
    if len(regions):
        best = max(best, float(regions.max()) - look_elsewhere(len(cos)) / logit_scale)
    return best


@dataclass(frozen=True)
class Folded:
    best: int  # the best item's position in the arrays folded: where it matched
    score: float  # the photo's score (calibrated with text: photo_cosine of the scores)
    text_cos: float | None  # photo_cosine of the text cosines: its probability's (None: no text)


def fold_photo(
    item_ids: np.ndarray,
    scores: np.ndarray,
    text_cos: np.ndarray | None,
    whole: np.ndarray,
    logit_scale: float | None,
) -> Folded:
    """One photo's items folded into its hit: its best item by score (ties by item id),
    and its calibrated score and text cosine (see the module docstring)."""
    best = int(rank_order(scores, item_ids)[0])
    if text_cos is None or not logit_scale:
        return Folded(best, float(scores[best]), None)
    return Folded(
        best,
        photo_cosine(scores, whole, logit_scale),
        photo_cosine(text_cos, whole, logit_scale),
    )
