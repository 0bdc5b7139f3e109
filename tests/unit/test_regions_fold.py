"""A photo's items folded into its hit (search/regions.py): the best item gives the score and
the region; the probability counts a region only by what it has over chance."""

from __future__ import annotations

import math

import numpy as np

from wherein.search.regions import fold_photo, look_elsewhere, photo_cosine

SCALE = 16.0  # the stand-ins' logit scale: a cosine of 1/16 is one logit


def test_the_photo_scores_as_its_best_item_and_names_it():
    ids = np.array([10, 11, 12, 13])
    scores = np.array([0.20, 0.31, 0.25, 0.31])  # two regions tie: the lower id wins
    whole = np.array([True, False, False, False])
    f = fold_photo(ids, scores, None, whole, None)
    assert (f.best, f.score, f.text_cos) == (1, 0.31, None)
    f = fold_photo(ids, np.array([0.4, 0.31, 0.25, 0.31]), None, whole, None)
    assert f.best == 0  # the whole photo matched best: no region


def test_a_region_counts_by_what_it_has_over_the_odds_of_n_looks():
    whole = np.array([True, False, False, False, False])
    n = len(whole)
    assert look_elsewhere(n) == math.log(5) and look_elsewhere(1) == 0.0
    # Regions a little above the whole photo (chance, among 5 looks): the whole's cosine.
    chance = np.array([0.10, 0.10 + 1.5 / SCALE, 0.09, 0.10, 0.08])
    assert photo_cosine(chance, whole, SCALE) == 0.10
    # A region well above it: its cosine less log(5) / scale.
    found = np.array([0.10, 0.10 + 4.0 / SCALE, 0.09, 0.10, 0.08])
    assert math.isclose(photo_cosine(found, whole, SCALE), 0.10 + (4.0 - math.log(5)) / SCALE)
    # More regions ask more of the best one.
    fewer = np.array([0.10, 0.10 + 4.0 / SCALE])
    assert photo_cosine(fewer, np.array([True, False]), SCALE) > photo_cosine(found, whole, SCALE)


def test_with_text_the_best_item_says_where_and_the_calibrated_cosines_say_how_much():
    ids = np.array([1, 2, 3])
    whole = np.array([True, False, False])
    text = np.array([0.05, 0.30, 0.06])
    f = fold_photo(ids, text.copy(), text, whole, SCALE)
    assert f.best == 1 and math.isclose(f.text_cos, 0.30 - math.log(3) / SCALE)
    assert f.score == f.text_cos  # the ranking agrees with the probability
    # A region just above the whole photo by chance: the photo keeps its whole score, and
    # the whole photo is what decided it (no region shown where nothing stood out).
    near = np.array([0.05, 0.06, 0.04])
    f = fold_photo(ids, near.copy(), near, whole, SCALE)
    assert (f.best, f.score, f.text_cos) == (0, 0.05, 0.05)
    # Just enough over the odds of 3 looks: the region decides, and is named.
    over = np.array([0.05, 0.05 + (math.log(3) + 0.01) / SCALE, 0.04])
    f = fold_photo(ids, over.copy(), over, whole, SCALE)
    assert f.best == 1 and f.score > 0.05
    # Regions only (no whole item among those folded): the best region decides.
    f = fold_photo(ids[1:], near[1:].copy(), near[1:], whole[1:], SCALE)
    assert f.best == 0
