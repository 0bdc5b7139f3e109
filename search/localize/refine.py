"""Coarse to fine: the small regions of a mask segmented again on a crop around each.

CLIPSeg sees a photo squashed to 352x352: on a 4032x3024 photo one of its 22x22 tokens is
about 183x137 px, so a thing of a few hundred pixels is a bump of one or two tokens in the
map, drawn blurred, or not drawn at all. After that whole pass (level 0):

1. **Small regions** of the map (`small_boxes`): the connected regions over the mask
   threshold, and the bumps over CANDIDATE_P (a thing the pass saw but did not call), whose
   box spans at most SMALL_SIDE of the map on each side; the MAX_CROPS with the highest peak.
2. **Crops** (`crop_box`): a square around each, CONTEXT times its longest side (the model
   needs to see what is around a thing), at least CLIPSEG_IMAGE_SIZE photo pixels and at most
   the photo; crops that overlap become one (their union box).
3. **One more vision pass per crop** (the photo decoded at the reduction that keeps each crop
   at least CLIPSEG_IMAGE_SIZE pixels: libjpeg's 1/2..1/8 scaling), and the prompt's decoder.
   A crop's pass depends on the photo and its box alone, so the caller may keep it (the
   vision store does, masking.crop_passes): another prompt whose crop is the same box (a
   hit's region always is) runs only the decoder there.
4. **Merged at the photo's size** (`masking.MaskResult.composed`): inside a crop the crop's
   map replaces the coarser one; the runs, regions, boxes, area and score are measured on
   the merged mask, so every box, area, PNG, export and overlay is the refined one.

A hint (a hit's `region`, the box of the photo's tile that matched best in a `--regions`
index) is the first crop (level 1): its map replaces the whole pass inside it, and its own
small regions are refined as the whole pass's are (level 2); the whole pass's regions inside
the hint get no crop of their own (the hint's map saw them closer). When the whole pass finds
nothing at all and the caller allows it (`wherein mask` alone, no hint), the photo is
**sliced** (`slice_boxes`: a SLICES grid of overlapping tiles, one pass each) to find
small regions to refine; the tiles are a search, not part of the mask (they cost
len(slice_boxes) passes, on top of one per small region).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

from wherein.indexer.imaging import jpeg_scale
from wherein.schemas.models import CLIPSEG_IMAGE_SIZE, CLIPSEG_MASK_THRESHOLD
from wherein.search.localize.regions import Runs, regions_of_runs

CANDIDATE_P = 0.1  # a bump the whole pass saw but did not call (the background is ~0.003)
SMALL_SIDE = 1 / 3  # of the map's side: a region that spans more is drawn well enough
CONTEXT = 2.0  # a crop's side over the region's longest side
MIN_CROP = CLIPSEG_IMAGE_SIZE  # photo px: a crop never smaller than the model's input
MAX_CROPS = 4  # refinements per mask at most (each is one vision pass)
SLICES = (3, 2)  # tiles across, down (for a landscape photo; turned for a portrait one)
SLICE_OVERLAP = 0.25  # of a tile's side

Box = tuple[int, int, int, int]  # x0, y0, x1, y1 (exclusive), photo px


@dataclass(frozen=True)
class Refinement:
    """A crop's own map: `prob` (352x352) covers `box` of the photo; level orders the passes
    (a finer one replaces a coarser one where they overlap)."""

    box: Box
    prob: np.ndarray
    level: int = 2

    @property
    def size(self) -> tuple[int, int]:
        return (self.box[2] - self.box[0], self.box[3] - self.box[1])


def small_boxes(prob: np.ndarray, size: tuple[int, int], limit: int = MAX_CROPS) -> list[Box]:
    """The boxes (photo px) of the map's small regions and bumps, highest peak first. A bump
    around regions over the threshold (their halo) is one thing with them: its box stands
    for theirs, so one thing takes one crop."""
    prob = np.asarray(prob, dtype=np.float32)
    mh, mw = prob.shape
    w, h = size
    found: dict[Box, float] = {}  # map px -> peak
    cores: list[Box] = []
    for level in (CLIPSEG_MASK_THRESHOLD, CANDIDATE_P):
        for r in regions_of_runs(Runs.of_mask(prob > level)):
            x0, y0, x1, y1 = r.bbox
            if level == CLIPSEG_MASK_THRESHOLD:
                cores.append(r.bbox)
            if x1 - x0 > SMALL_SIDE * mw or y1 - y0 > SMALL_SIDE * mh:
                continue
            if level == CANDIDATE_P:
                for c in cores:
                    if inside(c, r.bbox):
                        found.pop(c, None)
            found[r.bbox] = float(prob[y0:y1, x0:x1].max())
    ranked = sorted(found.items(), key=lambda bp: (-bp[1], bp[0]))  # ties: by position
    return [
        (
            int(x0 * w / mw),
            int(y0 * h / mh),
            min(w, int(np.ceil(x1 * w / mw))),
            min(h, int(np.ceil(y1 * h / mh))),
        )
        for (x0, y0, x1, y1), _ in ranked[:limit]
    ]


def crop_box(box: Sequence[float], size: tuple[int, int]) -> Box:
    """A square crop around box with context (CONTEXT x its longest side, at least MIN_CROP),
    shifted to lie inside the photo and cut to it."""
    w, h = size
    x0, y0, x1, y1 = box
    side = max(CONTEXT * max(x1 - x0, y1 - y0), MIN_CROP)
    sw, sh = min(side, w), min(side, h)
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    left = min(max(0.0, cx - sw / 2), w - sw)
    top = min(max(0.0, cy - sh / 2), h - sh)
    return (round(left), round(top), round(left + sw), round(top + sh))


def merge_boxes(boxes: Sequence[Box]) -> list[Box]:
    """Overlapping boxes joined into their union, until none overlap (few boxes: a loop)."""
    out = [tuple(b) for b in boxes]
    merged = True
    while merged:
        merged = False
        for i in range(len(out)):
            for j in range(i + 1, len(out)):
                a, b = out[i], out[j]
                if a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]:
                    out[i] = (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3]))
                    del out[j]
                    merged = True
                    break
            if merged:
                break
    return sorted(out)  # type: ignore[arg-type]


def slice_boxes(size: tuple[int, int]) -> list[Box]:
    """Overlapping tiles over the photo (SLICES across its long side), for a photo the whole
    pass found nothing in."""
    w, h = size
    across, down = SLICES if w >= h else SLICES[::-1]
    out = []
    for n, length in ((across, w), (down, h)):
        side = length / (n - (n - 1) * SLICE_OVERLAP)
        step = side * (1 - SLICE_OVERLAP)
        spans = [(round(i * step), min(length, round(i * step + side))) for i in range(n)]
        out.append(spans)
    return [(x0, y0, x1, y1) for y0, y1 in out[1] for x0, x1 in out[0]]


def is_large(size: tuple[int, int]) -> bool:
    """Whether a photo is big enough for a crop to see more than the whole pass did."""
    return min(size) >= 2 * MIN_CROP


class Refiner:
    """Runs the crops of one image for one prompt: model, the prompt's cond, and the image
    (decoded on first need, at the reduction each crop allows).

    A crop's pass depends on the photo and the crop's box only (each box is cut from the
    photo decoded at that box's own reduction), so `cached` (box, compute -> features) may
    keep it for another prompt on the same photo; `passes` counts the passes this refiner
    ran, not those `cached` had."""

    def __init__(
        self,
        model,
        cond: np.ndarray,
        size: tuple[int, int],
        load: Callable[[int], Image.Image],
        cached: Callable[[Box, Callable[[], Any]], Any] | None = None,
    ) -> None:
        self.model = model
        self.cond = cond
        self.size = size
        self._load = load  # draft_size -> the image decoded at least 2x that on its short side
        self._cached = cached or (lambda _box, compute: compute())
        self._images: dict[int, Image.Image] = {}  # by libjpeg reduction
        self._full: Image.Image | None = None  # when drafts are ignored: one image for all
        self.passes = 0

    def image_for(self, box: Box) -> Image.Image:
        """The photo decoded so that the crop box keeps about MIN_CROP pixels a side (one
        decode per libjpeg reduction; a loader that ignores the draft size decodes once)."""
        w, h = self.size
        reduce = max(1.0, min(box[2] - box[0], box[3] - box[1]) / MIN_CROP)
        draft = max(1, int(np.ceil(min(w, h) / (2 * reduce))))
        scale = jpeg_scale(w, h, draft)
        image = self._full if self._full is not None else self._images.get(scale)
        if image is None:
            image = self._images[scale] = self._load(draft)
            if scale > 1 and image.width >= w:  # the loader decodes in full (a PNG, a frame)
                self._full = image
        return image

    def features(self, box: Box):
        """The vision pass on the crop box (`cached`'s, else run here)."""

        def compute():
            image = self.image_for(box)
            sx, sy = image.width / self.size[0], image.height / self.size[1]
            crop = image.crop((box[0] * sx, box[1] * sy, box[2] * sx, box[3] * sy))
            self.passes += 1
            return self.model.image_features(crop)

        return self._cached(box, compute)

    def prob(self, box: Box) -> np.ndarray:
        """The prompt's map on the crop box: one vision pass (or a kept one) and the decoder."""
        return self.model.decode(self.features(box), self.cond)

    def refine(
        self, prob: np.ndarray, hint: Sequence[float] | None = None, slice_if_empty: bool = False
    ) -> list[Refinement]:
        """The refinements of a whole-pass map (`prob`): the hint's crop first, then the crops
        around the small regions of the whole pass and of the hint's map (module docstring).
        At most one pass per small region, and none for a region the hint's crop already saw
        closer (it lies inside the hint: the hint's own small regions stand for it)."""
        size = self.size
        if not is_large(size):
            return []
        out: list[Refinement] = []
        regions = small_boxes(prob, size)
        if hint is not None:
            box = clamp_box(hint, size)
            if box is not None:
                hint_prob = self.prob(box)
                out.append(Refinement(box, hint_prob, level=1))
                outside = [r for r in regions if not inside(r, box)]
                regions = [*in_crop(small_boxes(hint_prob, _size(box)), box), *outside]
        elif slice_if_empty and not regions and not (prob > CLIPSEG_MASK_THRESHOLD).any():
            for tile in slice_boxes(size):
                regions += in_crop(small_boxes(self.prob(tile), _size(tile)), tile)
        crops = merge_boxes([crop_box(b, size) for b in regions[:MAX_CROPS]])
        # The largest crop first: a loader that ignores the draft size (a video's frame, a
        # PNG) then decodes once, in full, for all of them (image_for).
        largest = sorted(crops, key=lambda c: (-min(_size(c)), c))
        probs = {c: self.prob(c) for c in largest}
        out += [Refinement(c, probs[c], level=2) for c in crops]
        return out


def inside(box: Box, outer: Box) -> bool:
    return outer[0] <= box[0] and outer[1] <= box[1] and box[2] <= outer[2] and box[3] <= outer[3]


def _size(box: Box) -> tuple[int, int]:
    return (box[2] - box[0], box[3] - box[1])


def in_crop(boxes: Sequence[Box], crop: Box) -> list[Box]:
    """Boxes measured in a crop's own pixels, as photo pixels."""
    x, y = crop[0], crop[1]
    return [(b[0] + x, b[1] + y, b[2] + x, b[3] + y) for b in boxes]


def clamp_box(box: Sequence[float], size: tuple[int, int]) -> Box | None:
    """A hint box cut to the photo, whole pixels; None when nothing of it is inside."""
    w, h = size
    x0, y0 = max(0, int(np.floor(box[0]))), max(0, int(np.floor(box[1])))
    x1, y1 = min(w, int(np.ceil(box[2]))), min(h, int(np.ceil(box[3])))
    return (x0, y0, x1, y1) if x1 > x0 and y1 > y0 else None
