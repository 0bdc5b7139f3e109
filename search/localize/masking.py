"""Where in an image a prompt matches: CLIPSeg probability map -> mask, regions, files.

Coordinates are original pixels in viewing orientation (EXIF applied, as
`imaging.decode` returns the image); boxes are [x0, y0, x1, y1] with x1/y1
EXCLUSIVE, like a Pillow crop box, so width = x1 - x0.
"""

from __future__ import annotations

import dataclasses
import os
import re
import threading
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from wherein.indexer.imaging import DecodeError, decode
from wherein.schemas.errors import WhereinError
from wherein.schemas.models import CLIPSEG_MASK_THRESHOLD

OVERLAY_MAX_SIDE = 2048  # overlays are for looking at; the mask PNG keeps full size
OVERLAY_TINT = (255, 0, 110)  # magenta: rare in photos
OVERLAY_ALPHA = 0.6
MAX_WORKERS = 4  # each worker holds its own interpreters (the real vision graph is ~170 MB)
# Fields add_masks_to_hits sets on each hit (schemas/records.py Hit, schemas/hit.schema.json).
HIT_MASK_FIELDS = ("mask_path", "overlay_path", "bbox", "mask_area", "mask_score")


# -- connected regions -----------------------------------------------------------------
@dataclass(frozen=True)
class Region:
    area: int  # pixels
    bbox: tuple[int, int, int, int]  # x0, y0, x1, y1 (exclusive)


def regions(mask: np.ndarray) -> list[Region]:
    """4-connected regions of a boolean mask, largest first.

    One vectorised pass finds the horizontal runs; labelling then works on runs,
    so it costs what the mask's outline costs, not its pixel count (a
    bilinear-upsampled CLIPSeg mask has few runs even on a 24-megapixel photo).
    """
    mask = np.asarray(mask, dtype=bool)
    h, w = mask.shape
    padded = np.zeros((h, w + 2), dtype=bool)
    padded[:, 1:-1] = mask
    # A change between columns j-1 and j of the mask (outside is False): in row-major
    # order changes alternate start, end, start, end... within every row.
    change = np.flatnonzero(padded[:, 1:] != padded[:, :-1])
    if len(change) == 0:
        return []
    rows, x0 = np.divmod(change[0::2], w + 1)
    x1 = change[1::2] - rows * (w + 1)  # exclusive end
    n = len(rows)
    # Runs overlap vertically (4-connectivity) when a0 < b1 and b0 < a1 on adjacent rows.
    stride = w + 1
    start_key = rows * stride + x0
    end_key = rows * stride + x1
    lo = np.searchsorted(end_key, (rows + 1) * stride + x0, side="right")
    hi = np.searchsorted(start_key, (rows + 1) * stride + x1, side="left")
    count = np.maximum(hi - lo, 0)
    a = np.repeat(np.arange(n), count)
    b = np.repeat(lo, count) + (np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count))
    label = _components(n, a, b)
    _, comp = np.unique(label, return_inverse=True)
    k = int(comp.max()) + 1
    area = np.bincount(comp, weights=x1 - x0, minlength=k).astype(np.int64)
    bx0 = np.full(k, w)
    by0 = np.full(k, h)
    bx1 = np.zeros(k, dtype=np.int64)
    by1 = np.zeros(k, dtype=np.int64)
    np.minimum.at(bx0, comp, x0)
    np.minimum.at(by0, comp, rows)
    np.maximum.at(bx1, comp, x1)
    np.maximum.at(by1, comp, rows + 1)
    order = sorted(range(k), key=lambda i: (-area[i], by0[i], bx0[i]))
    return [
        Region(int(area[i]), (int(bx0[i]), int(by0[i]), int(bx1[i]), int(by1[i]))) for i in order
    ]


def _components(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Connected components of an edge list: each node gets the smallest node id of its component.

    Min-label propagation with pointer jumping, iterated to a fixpoint; at the
    fixpoint every edge joins equal labels and every label names a member.
    """
    label = np.arange(n)
    while True:
        new = label.copy()
        np.minimum.at(new, a, label[b])
        np.minimum.at(new, b, label[a])
        new = new[new]
        if np.array_equal(new, label):
            return label
        label = new


# -- one mask ----------------------------------------------------------------------------
def _axis(n_out: int, n_in: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Half-pixel-centred bilinear taps along one axis, clamped at the edges."""
    x = np.clip((np.arange(n_out, dtype=np.float64) + 0.5) * (n_in / n_out) - 0.5, 0, n_in - 1)
    i0 = np.floor(x).astype(np.intp)
    return i0, np.minimum(i0 + 1, n_in - 1), (x - i0).astype(np.float32)


def stretch(prob: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Bilinear resize of a map to size=(W, H): the squash the input went through, undone.

    Enlarging is separable numpy (equal to Pillow's BILINEAR within 1e-6, ~3x
    faster on a camera photo); shrinking either side goes through Pillow, which
    antialiases.
    """
    w, h = size
    prob = np.asarray(prob, dtype=np.float32)
    if prob.shape == (h, w):
        return prob
    if w < prob.shape[1] or h < prob.shape[0]:
        return np.asarray(Image.fromarray(prob).resize((w, h), Image.BILINEAR), dtype=np.float32)
    c0, c1, wc = _axis(w, prob.shape[1])
    r0, r1, wr = _axis(h, prob.shape[0])
    cols = prob[:, c0] + (prob[:, c1] - prob[:, c0]) * wc  # [h_in, W]
    out = cols[r0]
    out += (cols[r1] - out) * wr[:, None]
    return out


@dataclass
class MaskResult:
    """The mask of one prompt on one image, at the image's original (viewing) size."""

    prompt: str
    soft: np.ndarray  # float32 [H, W] probabilities
    mask: np.ndarray  # bool [H, W]: soft > threshold
    regions: list[Region]
    threshold: float = CLIPSEG_MASK_THRESHOLD
    source: np.ndarray | None = None  # the model's 352x352 map: overlays resample from it

    @classmethod
    def from_probability(
        cls,
        prompt: str,
        prob: np.ndarray,
        size: tuple[int, int],
        threshold: float = CLIPSEG_MASK_THRESHOLD,
    ) -> MaskResult:
        """Stretch a 352x352 probability map back to size=(W, H): the input was squashed, so no aspect fix."""
        prob = np.asarray(prob, dtype=np.float32)
        soft = stretch(prob, size)
        mask = soft > threshold
        return cls(prompt, soft, mask, regions(mask), threshold, prob)

    @property
    def size(self) -> tuple[int, int]:
        return self.mask.shape[1], self.mask.shape[0]

    @cached_property
    def area(self) -> float:
        """Fraction of the image inside the mask."""
        return float(self.mask.mean()) if self.mask.size else 0.0

    @cached_property
    def score(self) -> float:
        """Mean probability inside the mask (0 when the mask is empty): how sure the mask is."""
        return float(self.soft[self.mask].mean()) if self.mask.any() else 0.0

    @property
    def bbox_largest(self) -> list[int] | None:
        return list(self.regions[0].bbox) if self.regions else None

    @property
    def bbox_union(self) -> list[int] | None:
        if not self.regions:
            return None
        boxes = np.array([r.bbox for r in self.regions])
        return [
            int(boxes[:, 0].min()),
            int(boxes[:, 1].min()),
            int(boxes[:, 2].max()),
            int(boxes[:, 3].max()),
        ]

    @property
    def bbox(self) -> dict[str, list[int]] | None:
        """The hit schema's form: {"largest": box, "union": box}, None for an empty mask."""
        if not self.regions:
            return None
        return {"largest": self.bbox_largest, "union": self.bbox_union}  # type: ignore[dict-item]

    def summary(self) -> dict[str, Any]:
        return {
            "prompt": self.prompt,
            "width": self.size[0],
            "height": self.size[1],
            "mask_area": round(self.area, 6),
            "mask_score": round(self.score, 6),
            "bbox": self.bbox,
            "regions": len(self.regions),
        }

    # -- files -------------------------------------------------------------------------
    def save_mask(self, path: Path) -> Path:
        """Binary PNG at the original size: 1-bit, white inside the mask, black outside."""
        Image.fromarray(self.mask).save(path)  # bool -> mode "1": small and fast to write
        return path

    def overlay(self, image: Image.Image, max_side: int = OVERLAY_MAX_SIDE) -> Image.Image:
        """The photo with the soft map as a tint and the largest region's box outlined."""
        w, h = self.size
        s = min(1.0, max_side / max(w, h))
        ow, oh = max(1, round(w * s)), max(1, round(h * s))
        base = image if image.size == (ow, oh) else image.resize((ow, oh), Image.BILINEAR)
        soft = self.soft
        if soft.shape != (oh, ow):
            soft = (
                stretch(self.source, (ow, oh))
                if self.source is not None
                else stretch(soft, (ow, oh))
            )
        alpha = Image.fromarray(
            (np.clip(soft, 0, 1) * (OVERLAY_ALPHA * 255) + 0.5).astype(np.uint8)
        )
        out = Image.composite(Image.new("RGB", (ow, oh), OVERLAY_TINT), base.convert("RGB"), alpha)
        box = self.bbox_largest
        if box is not None:
            x0, y0, x1, y1 = box
            line = max(2, round(max(ow, oh) / 250))
            ImageDraw.Draw(out).rectangle(
                (x0 * s, y0 * s, max(x0 * s, x1 * s - 1), max(y0 * s, y1 * s - 1)),
                outline=OVERLAY_TINT,
                width=line,
            )
        return out

    def save_overlay(
        self, path: Path, image: Image.Image, max_side: int = OVERLAY_MAX_SIDE
    ) -> Path:
        self.overlay(image, max_side).save(path, quality=88)
        return path


# -- images and hits -------------------------------------------------------------------
_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def _pool(workers: int) -> ThreadPoolExecutor:
    """One pool per size for the process: LiteRTGraph keeps one interpreter per thread,
    so long-lived threads load the graphs once, not on every search."""
    with _POOLS_LOCK:
        pool = _POOLS.get(workers)
        if pool is None:
            pool = _POOLS[workers] = ThreadPoolExecutor(
                workers, thread_name_prefix=f"wherein-mask{workers}"
            )
        return pool


def plan_parallelism(k: int, cores: int | None = None) -> tuple[int, int]:
    """(workers, interpreter threads) for k masks, so that workers x threads ~ cores."""
    cores = max(1, cores or os.cpu_count() or 1)
    workers = max(1, min(k, cores, MAX_WORKERS))
    return workers, max(1, cores // workers)


def open_for_mask(path: str | Path) -> tuple[Image.Image, tuple[int, int]]:
    """Decode in viewing orientation; big JPEGs decode at reduced scale (enough for 352 and overlays)."""
    return decode(Path(path), draft_size=OVERLAY_MAX_SIDE // 2)


def mask_image(
    model, image: Image.Image, size: tuple[int, int], prompts: Sequence[str]
) -> list[MaskResult]:
    """One vision pass for all prompts; masks at size=(W, H)."""
    feats = model.image_features(image)
    return [
        MaskResult.from_probability(p, model.decode(feats, model.encode_prompt(p)), size)
        for p in prompts
    ]


def slug(text: str, limit: int = 40) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return s[:limit].rstrip("-") or "prompt"


def mask_file(
    model, path: str | Path, prompts: Sequence[str], out_dir: Path | None = None
) -> list[tuple[MaskResult, dict[str, str]]]:
    """Masks of several prompts on one image; with out_dir, writes <stem>.<prompt>.mask.png / .overlay.jpg."""
    path = Path(path)
    try:
        image, size = open_for_mask(path)
    except DecodeError as exc:
        raise WhereinError(f"{path}: {exc}") from None
    results = mask_image(model, image, size, prompts)
    out: list[tuple[MaskResult, dict[str, str]]] = []
    used: set[str] = set()
    for res in results:
        files: dict[str, str] = {}
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            name, i = f"{path.stem}.{slug(res.prompt)}", 2
            while name in used:
                name, i = f"{path.stem}.{slug(res.prompt)}-{i}", i + 1
            used.add(name)
            files["mask"] = str(res.save_mask(out_dir / f"{name}.mask.png"))
            files["overlay"] = str(res.save_overlay(out_dir / f"{name}.overlay.jpg", image))
        out.append((res, files))
    return out


def _hit_get(hit: Any, name: str) -> Any:
    return hit[name] if isinstance(hit, dict) else getattr(hit, name)


def with_fields(hit: Any, values: dict[str, Any]) -> Any:
    """A copy of hit (a dataclass or a dict) with values set.

    A dataclass gets its own fields replaced; values it has no field for go into
    its `extra` dict when it has one, else they are dropped with a warning.
    """
    if isinstance(hit, dict):
        return {**hit, **values}
    if dataclasses.is_dataclass(hit):
        names = {f.name for f in dataclasses.fields(hit)}
        changes = {k: v for k, v in values.items() if k in names}
        missing = {k: v for k, v in values.items() if k not in names}
        if missing and isinstance(getattr(hit, "extra", None), dict):
            changes["extra"] = {**hit.extra, **missing}
        elif missing:
            warnings.warn(
                f"{type(hit).__name__} has no field(s) {', '.join(sorted(missing))}; "
                "those mask results are dropped",
                stacklevel=3,
            )
        return dataclasses.replace(hit, **changes)
    raise TypeError(f"hits must be dataclasses or dicts, got {type(hit).__name__}")


def add_masks_to_hits(
    hits: list,
    prompt: str,
    out_dir: Path,
    models_root: Path,
    min_mask_area: float | None = None,
    model=None,
    on_error: Callable[[Any, str], None] | None = None,
) -> list:
    """Mask `prompt` on each hit's image; write <out_dir>/<rank>-<stem>.mask.png and .overlay.jpg.

    Returns new hits (same order, ranks unchanged) with mask_path, overlay_path,
    bbox = {"largest": box of the largest 4-connected region, "union": box of all
    regions} (None when the mask is empty), boxes [x0, y0, x1, y1] in original
    viewing-orientation pixels with x1/y1 exclusive, mask_area (fraction of the
    image) and mask_score (mean probability inside the mask). With
    min_mask_area, hits whose mask covers less are dropped; a hit whose file
    cannot be decoded any more keeps None mask fields (and is dropped when
    min_mask_area is set). The prompt's cond is computed once; masks run in a
    long-lived thread pool (its threads keep their interpreters between
    searches), workers x interpreter threads ~ cores.
    """
    if not hits:
        return []
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    workers, threads = plan_parallelism(len(hits))
    if model is None:
        from wherein.indexer.models.clipseg import load_cached

        model = load_cached(models_root, threads)
    cond = model.encode_prompt(prompt)

    def one(hit: Any) -> dict[str, Any]:
        path = Path(_hit_get(hit, "path"))
        try:
            image, size = open_for_mask(path)
        except DecodeError as exc:
            if on_error is not None:
                on_error(hit, str(exc))
            return dict.fromkeys(HIT_MASK_FIELDS)
        res = MaskResult.from_probability(
            prompt, model.decode(model.image_features(image), cond), size
        )
        stem = f"{_hit_get(hit, 'rank')}-{path.stem}"
        return {
            "mask_path": str(res.save_mask(out_dir / f"{stem}.mask.png")),
            "overlay_path": str(res.save_overlay(out_dir / f"{stem}.overlay.jpg", image)),
            "bbox": res.bbox,
            "mask_area": round(res.area, 6),
            "mask_score": round(res.score, 6),
        }

    values = [one(h) for h in hits] if workers == 1 else list(_pool(workers).map(one, hits))
    out = []
    for hit, v in zip(hits, values, strict=True):
        if min_mask_area is not None and (v["mask_area"] is None or v["mask_area"] < min_mask_area):
            continue
        out.append(with_fields(hit, v))
    return out
