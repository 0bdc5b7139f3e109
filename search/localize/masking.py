"""Where in an image a prompt matches: CLIPSeg probability map -> mask, regions, files.

Coordinates are original pixels in viewing orientation (EXIF applied, as
`imaging.decode` reports the size); boxes are [x0, y0, x1, y1] with x1/y1
EXCLUSIVE, like a Pillow crop box, so width = x1 - x0.

Cost model: the photo-size mask is measured (regions, boxes, area, score) from
the 352x352 map without being built (`probmap`); it exists as pixels only
when the mask PNG is written (1 bit per pixel, `bitpng`). The image is decoded
reduced (JPEG draft to CLIPSeg's input size) and overlays are previews at most
PREVIEW_MAX_SIDE px on the long side unless the photo's full size is asked for.
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
import threading
import warnings
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from wherein.indexer.imaging import DecodeError, decode
from wherein.indexer.kinds import registry as media
from wherein.indexer.members import read_located, stat_located
from wherein.indexer.outputs import MARK, write_output
from wherein.indexer.paths import make_folder
from wherein.schemas.errors import WhereinError
from wherein.schemas.locations import tar_member
from wherein.schemas.models import CLIPSEG_IMAGE_SIZE, CLIPSEG_MASK_THRESHOLD
from wherein.schemas.records import HIT_MASK_FIELDS
from wherein.search.cache.vision import Seen, VisionCache
from wherein.search.cache.vision_store import VisionStore, content_key, rounded
from wherein.search.localize.bitpng import encode_1bit
from wherein.search.localize.probmap import enlarges, stretch, sum_over_runs, threshold_runs
from wherein.search.localize.refine import Box, Refinement, Refiner
from wherein.search.localize.regions import Region, Runs, regions, regions_of_runs

__all__ = [
    "HIT_MASK_FIELDS",
    "MaskResult",
    "Region",
    "add_masks_to_hits",
    "mask_file",
    "mask_of",
    "regions",
    "stretch",
]

PREVIEW_MAX_SIDE = 1024  # overlays are for looking at; the mask PNG keeps the photo's size
OVERLAY_TINT = (255, 0, 110)  # magenta: rare in photos
OVERLAY_ALPHA = 0.6
OVERLAY_QUALITY = 88
MAX_WORKERS = 4  # each worker holds its own interpreters (the real vision graph is ~170 MB)
# Images whose vision pass a process keeps (~7 MB each): at least search's default k, so a
# second prompt on one search's hits runs only the decoder.
VISION_CACHE = 12


# -- one mask ----------------------------------------------------------------------------
@dataclass(eq=False)
class MaskResult:
    """The mask of one prompt on one image, measured at the image's original (viewing) size.

    The photo-size probability map (`soft`) and mask (`mask`) are built only
    when read; regions, area and score come from runs of the mask.
    """

    prompt: str
    source: np.ndarray  # the model's 352x352 probability map
    size: tuple[int, int]  # (W, H) of the photo as a viewer shows it
    runs: Runs
    inside_sum: float  # sum of the photo-size probabilities inside the mask
    regions: list[Region]
    threshold: float = CLIPSEG_MASK_THRESHOLD
    # Crops segmented again (refine.py): inside each, its map replaces the coarser one.
    refinements: tuple[Refinement, ...] = ()

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
        size = (int(size[0]), int(size[1]))
        runs, total = measured_runs(prob, size, threshold)
        return cls(prompt, prob, size, runs, total, regions_of_runs(runs), threshold)

    @classmethod
    def composed(
        cls,
        prompt: str,
        prob: np.ndarray,
        size: tuple[int, int],
        refinements: Sequence[Refinement],
        threshold: float = CLIPSEG_MASK_THRESHOLD,
    ) -> MaskResult:
        """The whole pass's map (`prob`) with the crops' maps merged in at the photo's size:
        each pixel takes the finest pass over it (a higher level; a crop over the whole pass).
        Runs, regions, area and score are the merged mask's."""
        if not refinements:
            return cls.from_probability(prompt, prob, size, threshold)
        prob = np.asarray(prob, dtype=np.float32)
        size = (int(size[0]), int(size[1]))
        layers = sorted(refinements, key=lambda r: r.level)
        parts: list[Runs] = []
        total = 0.0
        # Each layer's runs only: regions are labelled once, on the merged mask.
        for i, layer in enumerate([None, *layers]):
            above = [r.box for r in layers[i:] if layer is None or r.level > layer.level]
            if layer is None:
                source, (dx, dy) = prob, (0, 0)
            else:
                source, (dx, dy) = layer.prob, (layer.box[0], layer.box[1])
            runs, inside = measured_runs(source, layer.size if layer else size, threshold)
            cut = [(b[0] - dx, b[1] - dy, b[2] - dx, b[3] - dy) for b in above]
            kept = runs.without_boxes(cut) if cut else runs
            total += inside if kept.area == runs.area else sum_over_runs(source, kept)
            parts.append(kept.shifted(dx, dy, *size))
        runs = Runs.union(parts, *size)
        return cls(prompt, prob, size, runs, total, regions_of_runs(runs), threshold, tuple(layers))

    def soft_at(self, size: tuple[int, int]) -> np.ndarray:
        """float32 [h, w] probabilities at size=(w, h): the whole pass's map stretched, each
        refined crop's map stretched into its box (finest last)."""
        out = stretch(self.source, size).copy() if self.refinements else stretch(self.source, size)
        sx, sy = size[0] / self.size[0], size[1] / self.size[1]
        for r in self.refinements:
            x0, y0 = round(r.box[0] * sx), round(r.box[1] * sy)
            x1, y1 = round(r.box[2] * sx), round(r.box[3] * sy)
            if x1 > x0 and y1 > y0:
                out[y0:y1, x0:x1] = stretch(r.prob, (x1 - x0, y1 - y0))
        return out

    @cached_property
    def soft(self) -> np.ndarray:
        """float32 [H, W] probabilities at the photo's size."""
        return self.soft_at(self.size)

    @cached_property
    def mask(self) -> np.ndarray:
        """bool [H, W]: soft > threshold."""
        return self.runs.to_mask()

    @cached_property
    def area(self) -> float:
        """Fraction of the image inside the mask."""
        w, h = self.size
        return self.runs.area / (w * h) if w * h else 0.0

    @cached_property
    def score(self) -> float:
        """Mean probability inside the mask (0 when the mask is empty): how sure the mask is."""
        n = self.runs.area
        return self.inside_sum / n if n else 0.0

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
    def mask_png(self) -> bytes:
        """Binary PNG at the photo's size: 1-bit, white inside the mask, black outside."""
        return encode_1bit(self.mask if "mask" in self.__dict__ else self.runs.to_mask())

    def overlay(self, image: Image.Image, max_side: int | None = None) -> Image.Image:
        """The photo with the soft map as a tint and the largest region's box outlined.

        Drawn at the given image's size (a preview from `see`, or a full decode),
        shrunk to max_side on the long side when given.
        """
        w, h = self.size
        ow, oh = image.size
        if max_side and max(ow, oh) > max_side:
            s = max_side / max(ow, oh)
            ow, oh = max(1, round(ow * s)), max(1, round(oh * s))
        base = (
            image if image.size == (ow, oh) else image.resize((ow, oh), Image.Resampling.BILINEAR)
        )
        # The tint is for the eye: the (merged) map at the overlay's size, as 8-bit alpha.
        alpha = Image.fromarray(
            (np.clip(self.soft_at((ow, oh)), 0, 1) * (OVERLAY_ALPHA * 255) + 0.5).astype(np.uint8)
        )
        out = Image.composite(Image.new("RGB", (ow, oh), OVERLAY_TINT), base.convert("RGB"), alpha)
        box = self.bbox_largest
        if box is not None:
            sx, sy = ow / w, oh / h
            x0, y0, x1, y1 = box
            line = max(2, round(max(ow, oh) / 250))
            ImageDraw.Draw(out).rectangle(
                (x0 * sx, y0 * sy, max(x0 * sx, x1 * sx - 1), max(y0 * sy, y1 * sy - 1)),
                outline=OVERLAY_TINT,
                width=line,
            )
        return out

    def overlay_jpeg(self, image: Image.Image, max_side: int | None = None) -> bytes:
        buf = io.BytesIO()
        self.overlay(image, max_side).save(buf, "JPEG", quality=OVERLAY_QUALITY, comment=MARK)
        return buf.getvalue()

    # Never through a link planted in the folder, never over a file wherein did not write.
    def save_mask(self, path: Path) -> Path:
        write_output(path, self.mask_png())
        return path

    def save_overlay(self, path: Path, image: Image.Image, max_side: int | None = None) -> Path:
        write_output(path, self.overlay_jpeg(image, max_side))
        return path


def measured_runs(prob: np.ndarray, size: tuple[int, int], threshold: float) -> tuple[Runs, float]:
    """The runs of a map's mask at size=(W, H) and the probability summed inside it."""
    prob = np.asarray(prob, dtype=np.float32)
    if enlarges(prob.shape, size):
        th = threshold_runs(prob, size, threshold)
        return th.runs, th.inside_sum
    # A side under 352: the map shrinks (antialiased), and is small anyway.
    soft = stretch(prob, size)
    mask = soft > threshold
    return Runs.of_mask(mask), float(soft[mask].sum(dtype=np.float64))


def mask_of(
    model,
    prompt: str,
    features: np.ndarray,
    size: tuple[int, int],
    cond: np.ndarray | None = None,
    image: Callable[[int], Image.Image] | None = None,
    hint: Sequence[float] | None = None,
    slice_if_empty: bool = False,
    crops: Callable[[Box, Callable[[], Any]], Any] | None = None,
) -> MaskResult:
    """The mask step every path shares: the decoder on an image's vision pass and the prompt's
    condition (`cond`, when the caller encoded it once for many images), measured at the
    photo's size.

    With `image` (draft size -> the image decoded at least twice that on its short side),
    the small regions are segmented again on crops and merged in (refine.py): `hint` (a
    hit's region) is the first crop; slice_if_empty slices a large photo the whole pass
    found nothing in; `crops` (box, compute -> features: `crop_passes`) keeps the crops'
    passes."""
    if cond is None:
        cond = model.encode_prompt(prompt)
    prob = model.decode(features, cond)
    if image is None:
        return MaskResult.from_probability(prompt, prob, size)
    refinements = Refiner(model, cond, size, image, crops).refine(prob, hint, slice_if_empty)
    return MaskResult.composed(prompt, prob, size, refinements)


def crop_passes(
    model, seen: Seen, store: VisionStore | None
) -> Callable[[Box, Callable[[], Any]], Any]:
    """A refinement's crop passes on the image `seen` is of, kept in the vision store next to
    its whole pass (keyed by its key and the box: a crop's pass depends on nothing else), so
    another prompt on it runs none again. Rounded as the store keeps them, stored or not."""

    def cached(box: Box, compute: Callable[[], Any]) -> Any:
        key = crop_key(seen.key, box) if store is not None and seen.key else None
        features = store.load(model, key) if store is not None and key else None
        if features is None:
            features = rounded(compute())
            if store is not None and key:
                store.save(model, key, features)
        return features

    return cached


def crop_key(key: str, box: Box) -> str:
    """The store's key of a crop's pass: a hash of the image's key and the box."""
    return content_key("\0".join(("crop", key, *map(str, box))).encode())


def image_loader(path: str | Path, time: float | None = None) -> Callable[[int], Image.Image]:
    """What a refinement decodes its crops from: the photo at a draft size (libjpeg's
    reduction), or the video's frame at `time` (full size)."""
    if time is not None:
        return lambda _draft: frame_image(path, time)
    return lambda draft: decode(photo_bytes(path), draft_size=draft)[0]


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


def open_for_mask(path: str | Path, full_size: bool = False) -> tuple[Image.Image, tuple[int, int]]:
    """Decode in viewing orientation; big JPEGs decode reduced (libjpeg scaling) to at least
    twice CLIPSeg's input on each side, which also covers a preview overlay."""
    return decode(photo_bytes(path), draft_size=None if full_size else CLIPSEG_IMAGE_SIZE)


def photo_bytes(path: str | Path) -> bytes:
    """A photo's bytes, read only when it is a regular file (a FIFO or a device swapped in
    is refused, never read); a DecodeError says why not."""
    try:
        return read_located(str(path))  # a file, or a member of a tar shard
    except OSError as exc:
        raise DecodeError(f"cannot read: {exc.strerror or exc}") from None


def preview_base(image: Image.Image, size: tuple[int, int]) -> Image.Image:
    """The decoded image at preview size: at most PREVIEW_MAX_SIDE on the long side and never
    larger than decoded; the photo's aspect ratio (size) within a pixel."""
    w, h = size
    s = min(1.0, PREVIEW_MAX_SIDE / max(w, h), image.width / w, image.height / h)
    pw, ph = max(1, round(w * s)), max(1, round(h * s))
    return image if image.size == (pw, ph) else image.resize((pw, ph), Image.Resampling.BILINEAR)


def seen_image(model, image: Image.Image, size: tuple[int, int], key: str = "") -> Seen:
    """One vision pass over a decoded image, kept with its preview. The features are
    rounded as the disk store keeps them, so a mask never depends on where its pass
    came from."""
    return Seen(preview_base(image, size), size, rounded(model.image_features(image)), key=key)


def seen_stored(
    model, image: Image.Image, size: tuple[int, int], data: bytes, store: VisionStore | None
) -> Seen:
    """The pass of the photo decoded from data: read from the store (keyed by data's hash),
    else run, and stored."""
    return seen_keyed(model, image, size, content_key(data), store)


def seen_keyed(
    model, image: Image.Image, size: tuple[int, int], key: str, store: VisionStore | None
) -> Seen:
    """The pass of a decoded image: read from the store under key, else run, and stored."""
    if store is None:
        return seen_image(model, image, size, key)
    features = store.load(model, key)
    if features is not None:
        return Seen(preview_base(image, size), size, features, from_store=True, key=key)
    seen = seen_image(model, image, size, key)
    store.save(model, key, seen.features)
    return seen


_CACHES: weakref.WeakKeyDictionary[Any, VisionCache] = weakref.WeakKeyDictionary()
_CACHES_LOCK = threading.Lock()


def vision_cache(model) -> VisionCache:
    """The process's cache of recent vision passes through this model."""
    with _CACHES_LOCK:
        cache = _CACHES.get(model)
        if cache is None:
            cache = _CACHES[model] = VisionCache(VISION_CACHE)
        return cache


def frame_image(path: str | Path, time: float) -> Image.Image:
    """The frame shown at `time` seconds of a timed file (a video: a player's, rotation
    applied), full size, loaded by the file's kind; a DecodeError says why not (a time
    outside the file names its range)."""
    from wherein.indexer.imaging import Locator
    from wherein.indexer.kinds.registry import kind_of, kind_of_bytes
    from wherein.indexer.video.frames import VideoError

    try:
        if tar_member(os.fspath(path)):  # an animation in a tar shard: read from its archive
            data = photo_bytes(path)
            return kind_of_bytes(data).image_at(io.BytesIO(data), Locator("frame", t=time))
        return kind_of(path).image_at(path, Locator("frame", t=time))
    except VideoError as exc:
        raise DecodeError(str(exc)) from None


def source_stem(path: str | Path, time: float | None = None) -> str:
    """What names a mask's files: a photo's stem, or a video's name and the moment
    (clip.mp4@12.50s), so that two moments of one video never share a file."""
    path = Path(path)
    return path.stem if time is None else f"{path.name}@{time:.2f}s"


def see(
    model,
    path: str | Path,
    store: VisionStore | None = None,
    time: float | None = None,
    content: str | None = None,
) -> Seen:
    """Decode and run the vision graph on a file (on its frame at `time` seconds for a
    video), or reuse the pass of an unchanged file (this process's, else the store's).

    A photo's pass is kept under its file identity in memory and its content hash on disk.
    A frame's is kept under (file identity, time) in memory, and on disk under (content,
    time) when the caller knows the video's SHA-256 (`content`: a hit's, from the catalog,
    while the file is as indexed), else (file identity, time): hashing a whole video for
    every mask would cost more than the pass it saves.
    """
    path = Path(path)
    try:
        st = stat_located(os.fspath(path))  # a tar member's: its archive's
    except OSError as exc:
        raise DecodeError(f"cannot read: {exc.strerror or exc}") from None
    key: tuple = (os.fspath(path), st.st_ino, st.st_size, st.st_mtime_ns)
    if time is not None:
        identity, key = key, (*key, frame_time_key(time))

        def frame() -> Seen:
            image = frame_image(path, time)
            stored = frame_store_key(time, content=content, identity=identity)
            return seen_keyed(model, image, image.size, stored, store)

        return vision_cache(model).get(key, frame)

    def compute() -> Seen:
        data = photo_bytes(path)
        image, size = decode(data, draft_size=CLIPSEG_IMAGE_SIZE)
        return seen_stored(model, image, size, data, store)

    return vision_cache(model).get(key, compute)


def frame_time_key(time: float) -> str:
    """A moment as the caches key it: to the millisecond (frames are further apart, and
    12.5 and 12.500000001 are one)."""
    return f"{float(time):.3f}"


def frame_store_key(time: float, content: str | None = None, identity: tuple | None = None) -> str:
    """The disk store's key of a frame: a hash of ("frame", the video's SHA-256, time) when its
    content is known (the web app keys a frame so too), else of ("frame", path, inode, size,
    mtime_ns, time)."""
    parts = ("frame", content) if content else ("frame", *(identity or ()))
    text = "\0".join(map(str, (*parts, frame_time_key(time))))
    return content_key(text.encode("utf-8", "surrogateescape"))


def indexed_content(hit: Any) -> str | None:
    """A hit's SHA-256 from the catalog while its file is as indexed (same size and mtime),
    else None."""
    sha, size, mtime_ns, path = (_hit_opt(hit, k) for k in ("sha256", "size", "mtime_ns", "path"))
    if not sha or size is None or mtime_ns is None or path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return sha if (st.st_size, st.st_mtime_ns) == (size, mtime_ns) else None


def hit_region(hit: Any) -> list[float] | None:
    """The box of a hit's best region ([x0, y0, x1, y1] in the photo's pixels, from an index
    with regions: the hit's `region`, else its matched item's `box`), None when the whole
    photo matched best or the hit has none (a timed kind's hit: its frames have no box)."""
    if media.timed(_hit_opt(hit, "kind")):
        return None
    region = _hit_opt(hit, "region")
    if region is None:
        region = _hit_opt(hit, "box")
    return None if region is None else list(region)


def hit_time(hit: Any) -> float | None:
    """The moment a hit's mask is of: the best frame of a hit of a timed kind (a video, an
    animation), None for any other (a photo)."""
    time = _hit_opt(hit, "time")
    return float(time) if time is not None and media.timed(_hit_opt(hit, "kind")) else None


def slug(text: str, limit: int = 40) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return s[:limit].rstrip("-") or "prompt"


def file_base(stem: str, prompt: str, rank: int | None = None) -> str:
    """[<rank>-]<stem>.<prompt-slug>: the name before .mask.png / .overlay.jpg.

    The prompt is in the name so that masks of several prompts share a folder;
    search hits lead with their rank, so the folder lists in result order.
    """
    return f"{rank}-{stem}.{slug(prompt)}" if rank is not None else f"{stem}.{slug(prompt)}"


def write_mask_files(
    res: MaskResult,
    seen: Seen,
    out_dir: Path,
    base: str,
    full_size_path: Path | None = None,
    time: float | None = None,
) -> dict[str, str]:
    """<base>.mask.png (photo size) and <base>.overlay.jpg (preview, or the photo's size when
    full_size_path names the file to decode at full size: its frame at `time` for a video)."""
    image = seen.image
    if full_size_path is not None and time is not None:
        image = frame_image(full_size_path, time)
    elif full_size_path is not None:
        image, _ = open_for_mask(full_size_path, full_size=True)
    mask = res.save_mask(out_dir / f"{base}.mask.png")
    overlay = res.save_overlay(out_dir / f"{base}.overlay.jpg", image)
    return {"mask": str(mask), "overlay": str(overlay)}


def mask_file(
    model,
    path: str | Path,
    prompts: Sequence[str],
    out_dir: Path | None = None,
    full_size_overlays: bool = False,
    store: VisionStore | None = None,
    time: float | None = None,
) -> list[tuple[MaskResult, dict[str, str]]]:
    """Masks of several prompts on one image, or a video's frame at `time` seconds (one
    vision pass); with out_dir, writes <stem>.<prompt>.mask.png / .overlay.jpg
    (<name>@<time>s.<prompt>... for a frame; a repeated prompt slug gets -2, -3, ...)."""
    path = Path(path)
    if out_dir is not None:
        make_folder(out_dir, "mask folder")  # before the work, not after it
    try:
        seen = see(model, path, store, time)
    except DecodeError as exc:
        raise WhereinError(f"{path}: {exc}") from None
    out: list[tuple[MaskResult, dict[str, str]]] = []
    used: set[str] = set()
    loader = image_loader(path, time)
    for prompt in prompts:
        res = mask_of(
            model,
            prompt,
            seen.features,
            seen.size,
            image=loader,
            slice_if_empty=time is None,
            crops=crop_passes(model, seen, store),
        )
        files: dict[str, str] = {}
        if out_dir is not None:
            stem = source_stem(path, time)
            name, i = file_base(stem, prompt), 2
            while name in used:
                name, i = f"{file_base(stem, prompt)}-{i}", i + 1
            used.add(name)
            full = path if full_size_overlays else None
            files = write_mask_files(res, seen, out_dir, name, full, time)
        out.append((res, files))
    return out


def _hit_get(hit: Any, name: str) -> Any:
    return hit[name] if isinstance(hit, dict) else getattr(hit, name)


def _hit_opt(hit: Any, name: str) -> Any:
    """A field a hit (a dataclass or a dict) may lack: None then."""
    return hit.get(name) if isinstance(hit, dict) else getattr(hit, name, None)


def with_fields(hit: Any, values: dict[str, Any]) -> Any:
    """A copy of hit (a dataclass or a dict) with values set.

    A dataclass gets its own fields replaced; values it has no field for go into
    its `extra` dict when it has one, else they are dropped with a warning.
    """
    if isinstance(hit, dict):
        return {**hit, **values}
    if dataclasses.is_dataclass(hit) and not isinstance(hit, type):
        names = {f.name for f in dataclasses.fields(hit)}
        changes = {k: v for k, v in values.items() if k in names}
        missing = {k: v for k, v in values.items() if k not in names}
        extra = getattr(hit, "extra", None)
        if missing and isinstance(extra, dict):
            changes["extra"] = {**extra, **missing}
        elif missing:
            warnings.warn(
                f"{type(hit).__name__} has no field(s) {', '.join(sorted(missing))}; "
                "those mask results are dropped",
                stacklevel=3,
            )
        return dataclasses.replace(hit, **changes)
    raise TypeError(f"hits must be dataclasses or dicts, got {type(hit).__name__}")


def hit_values(res: MaskResult) -> dict[str, Any]:
    """A mask's hit fields (HIT_MASK_FIELDS), before any file is written: area and score
    rounded as every output shows them, no paths yet."""
    return {
        "mask_path": None,
        "overlay_path": None,
        "bbox": res.bbox,
        "mask_area": round(res.area, 6),
        "mask_score": round(res.score, 6),
    }


def add_masks_to_hits(
    hits: list,
    prompt: str,
    out_dir: Path,
    models_root: Path,
    min_mask_area: float | None = None,
    model=None,
    on_error: Callable[[Any, str], None] | None = None,
    full_size_overlays: bool = False,
    store: VisionStore | None = None,
) -> list:
    """Mask `prompt` on each hit's image (a video hit's best frame, at its `time`); write
    <out_dir>/<rank>-<stem>.<prompt>.mask.png and .overlay.jpg (<rank>-<name>@<time>s.<prompt>
    for a frame).

    Returns new hits (same order, ranks unchanged) with mask_path, overlay_path,
    bbox = {"largest": box of the largest 4-connected region, "union": box of all
    regions} (None when the mask is empty), boxes [x0, y0, x1, y1] in original
    viewing-orientation pixels with x1/y1 exclusive, mask_area (fraction of the
    image) and mask_score (mean probability inside the mask). The mask PNG is at
    the photo's size; the overlay is a preview (long side <= PREVIEW_MAX_SIDE)
    unless full_size_overlays. With min_mask_area, hits whose mask covers less
    are dropped and get no files; a hit whose file cannot be decoded any more
    keeps None mask fields, says why in mask_skipped, and on_error(hit, why) is told in
    the hits' order (such a hit is dropped when min_mask_area is set). The
    prompt's cond is computed once and vision passes are reused across calls
    (`see`), and kept on disk in `store` when given; masks run in a long-lived thread pool (its threads keep their
    interpreters between searches), workers x interpreter threads ~ cores.
    """
    if not hits:
        return []
    out_dir = Path(out_dir)
    workers, threads = plan_parallelism(len(hits))
    if model is None:
        from wherein.indexer.models.modeldir import ModelDir
        from wherein.indexer.models.registry import load_segmenter

        model = load_segmenter(ModelDir(Path(models_root)), threads, cached=True)
    cond = model.encode_prompt(prompt)

    def one(hit: Any) -> dict[str, Any]:
        path = Path(_hit_get(hit, "path"))
        time = hit_time(hit)  # a video hit: its best frame
        content = indexed_content(hit) if time is not None else None
        try:
            return _mask_one(hit, path, time, content)
        except DecodeError as exc:  # the file, read again, is no longer an image we can read
            return {**dict.fromkeys(HIT_MASK_FIELDS), "mask_skipped": str(exc)}

    def _mask_one(hit: Any, path: Path, time: float | None, content: str | None) -> dict:
        seen = see(model, path, store, time, content)
        res = mask_of(
            model,
            prompt,
            seen.features,
            seen.size,
            cond,
            image_loader(path, time),  # the refinement's crops: read again, may fail too
            hit_region(hit),
            crops=crop_passes(model, seen, store),
        )
        values = hit_values(res)
        if min_mask_area is not None and values["mask_area"] < min_mask_area:
            return values  # dropped below: no files for it
        make_folder(out_dir, "mask folder")
        base = file_base(source_stem(path, time), prompt, _hit_get(hit, "rank"))
        full = path if full_size_overlays else None
        files = write_mask_files(res, seen, out_dir, base, full, time)
        return {**values, "mask_path": files["mask"], "overlay_path": files["overlay"]}

    if workers == 1:
        values = [one(h) for h in hits]
    else:
        # Every mask finished (or failed) before any error is raised: none is still being
        # written once the caller has the error.
        futures = [_pool(workers).submit(one, h) for h in hits]
        wait(futures)
        values = [f.result() for f in futures]
    out = []
    for hit, v in zip(hits, values, strict=True):
        if v.get("mask_skipped") and on_error is not None:
            on_error(hit, v["mask_skipped"])  # in rank order, whichever thread masked it
        if min_mask_area is not None and (v["mask_area"] is None or v["mask_area"] < min_mask_area):
            continue
        out.append(with_fields(hit, v))
    return out
