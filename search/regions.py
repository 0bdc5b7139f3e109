"""Photos with regions in search results: one hit per photo, and where in it the query matched.

A large photo indexed with ``--regions`` yields its whole item and a few region items (tiles,
each with its box; indexer/regions.py). A search ranks items, then folds a photo's items into
one hit, as it folds a video's frames (unless ``--frames`` asks for the items one by one):

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
- the hit names the item that decided its score: the best region (by score, equal scores
  by item id, as every ranking is: ranking.py) only when that region, after its ``log(n)``,
  scores above the whole photo; its ``region`` is then that region's box, ``[x0, y0, x1,
  y1]`` in the photo's pixels: where in the photo it matched, which the web outlines and a
  mask crops first. Otherwise the whole photo decided and ``region`` is null: a region a
  little above the whole photo by chance is not shown as where the thing is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from wherein.search.ranking import rank_order, tie_key


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
    best: int  # position of the item that decided the score (a region: where it matched)
    score: float  # the photo's score (calibrated with text: photo_cosine of the scores)
    text_cos: float | None  # photo_cosine of the text cosines: its probability's (None: no text)


def fold_photo(
    item_ids: np.ndarray,
    scores: np.ndarray,
    text_cos: np.ndarray | None,
    whole: np.ndarray,
    logit_scale: float | None,
) -> Folded:
    """One photo's items folded into its hit: its calibrated score and text cosine, and the
    item that decided the score (see the module docstring; ties by item id). Without text,
    the photo scores as its best item, which is then what decided."""
    order = rank_order(scores, item_ids)
    if text_cos is None or not logit_scale:
        best = int(order[0])
        return Folded(best, float(scores[best]), None)
    score = photo_cosine(scores, whole, logit_scale)
    # The region decided only if the photo's score is above its whole item's (compared as
    # ranking compares: rounded, so the choice is the same on every CPU).
    by_region = not whole.any() or tie_key(score) > tie_key(scores[whole].max())
    best = int(next(i for i in order if bool(whole[i]) != by_region))
    return Folded(best, score, photo_cosine(text_cos, whole, logit_scale))
