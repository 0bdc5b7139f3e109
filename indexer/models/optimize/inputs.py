"""What a candidate graph is verified on: the user's own indexed images, else known content.

A quantized graph's error depends on its inputs, so the figures that decide
whether it replaces the full-precision graph come from the user's photos: a
deterministic spread over the catalog (files gone since indexing are passed
over). An empty or missing index falls back to the bundled sample photos
(indexer/samples.py) plus generated shapes, enough for a top-10 comparison.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image

from wherein.indexer.imaging import DecodeError, decode, prepare
from wherein.indexer.models.optimize import probes
from wherein.schemas.models import CLIPSEG_IMAGE_SIZE, SIGLIP2

# Several prompts per image for the mask comparison. On the user's photos the
# content is unknown, so the prompts are common subjects: most masks are empty
# in both graphs, and a pooled IoU weighs the ones that are not by their area.
COMMON_PROMPTS = (
    "a person",
    "the sky",
    "a tree",
    "a building",
    "a car",
    "an animal",
    "food",
    "water",
    "text",
    "a face",
)
KEEP_SIDE = 1024  # decoded images are kept at most this large: both towers resize far below


@dataclass
class Sample:
    images: list[Image.Image]  # RGB, viewing orientation
    prompts: list[list[str]]  # per image, for CLIPSeg
    origin: str  # what the images are, for the report
    catalog_images: int = 0  # images in the index (for the re-embedding estimate)
    decode_ms: float = 0.0  # read + decode + preprocess for the image tower, one core, per image
    names: list[str] = field(default_factory=list)
    bundled: bool = False  # the bundled sample, not the user's photos: re-verify on theirs

    def __len__(self) -> int:
        return len(self.images)


def catalog_paths(index_dir: Path | None, want: int) -> tuple[list[str], int]:
    """Up to `want` x 3 indexed paths spread over the catalog (deterministic), and the catalog size."""
    from wherein.indexer.store.index_store import CATALOG_FILE, IndexStore

    if index_dir is None or not (Path(index_dir) / CATALOG_FILE).is_file():
        return [], 0
    from wherein.schemas.errors import WhereinError

    try:
        with IndexStore.open(index_dir, load_vectors=False) as store:
            total = store.catalog.count_embedded()
            paths = store.catalog.sample_paths(want * 3)
    except WhereinError:
        return [], 0
    return paths, int(total)


def _keep(img: Image.Image) -> Image.Image:
    if max(img.size) > KEEP_SIDE:
        img = img.copy()
        img.thumbnail((KEEP_SIDE, KEEP_SIDE), Image.Resampling.BILINEAR)
    return img


def _decode_paths(paths: list[str], count: int) -> tuple[list[Image.Image], list[str], float]:
    """Up to count decodable images of paths (unreadable ones passed over), their paths, and
    the image tower's read + decode + preprocess cost per image on one core (ms)."""
    images, names, decode_s, timed = [], [], 0.0, 0
    for p in paths:
        try:
            data = Path(p).read_bytes()
        except OSError:
            continue
        t = time.thread_time()
        prepared = prepare(data, SIGLIP2.image)
        if timed < 8:
            decode_s += time.thread_time() - t
            timed += 1
        if prepared.error:
            continue
        try:
            img, _ = decode(data, draft_size=CLIPSEG_IMAGE_SIZE)
        except DecodeError:
            continue
        images.append(_keep(img))
        names.append(p)
        if len(images) >= count:
            break
    return images, names, decode_s / max(timed, 1) * 1000


def _mask_prompts(n: int) -> list[list[str]]:
    return [[COMMON_PROMPTS[(i * 4 + j) % len(COMMON_PROMPTS)] for j in range(4)] for i in range(n)]


def load_sample(index_dir: Path | None, count: int = 32, clipseg_images: int = 6) -> Sample:
    """count images for the image tower (the first clipseg_images also carry mask prompts)."""
    paths, total = catalog_paths(index_dir, count)
    images, names, decode_ms = _decode_paths(paths, count)
    if len(images) >= 2:
        return Sample(
            images,
            _mask_prompts(min(clipseg_images, len(images))),
            f"{len(images)} of your {total:,} indexed images",
            total,
            decode_ms,
            names,
        )
    return bundled_sample(count, clipseg_images, total)


# Top-10 neighbour agreement needs more than 10 images.
MIN_PHOTOS = 11


def photos_sample(paths: list[str], count: int = 32) -> Sample | None:
    """The user's own photos about to be indexed (padded with the bundled sample when there
    are fewer than MIN_PHOTOS), or None when none of them decodes."""
    images, names, decode_ms = _decode_paths(_spread(paths, count), count)
    if not images:
        return None
    origin = f"{len(images)} of your photos"
    if len(images) < MIN_PHOTOS:
        pad = bundled_sample(MIN_PHOTOS - len(images))
        images, names = images + pad.images, names + pad.names
        origin += f" + {len(pad)} bundled sample images"
    return Sample(images, [], origin, 0, decode_ms, names)


def _spread(paths: list[str], count: int) -> list[str]:
    """count x 3 paths evenly spread over paths (spares for files that do not decode)."""
    want = count * 3
    if len(paths) <= want:
        return paths
    step = len(paths) / want
    return [paths[int(i * step)] for i in range(want)]


def bundled_sample(count: int = 32, clipseg_images: int = 6, catalog_images: int = 0) -> Sample:
    """The demo's sample photos plus generated shapes (known content, so prompts can name it)."""
    from wherein.indexer.samples import SHAPES, write_sample

    images, names, prompts = [], [], []
    with tempfile.TemporaryDirectory(prefix="wherein-sample-") as tmp:
        for path, (colour, shape, _, _) in zip(write_sample(Path(tmp)), SHAPES, strict=True):
            img, _ = decode(path)
            images.append(img)
            names.append(path.name)
            prompts.append([probes.caption(colour, shape), colour, "the background", "a dog"])
    for p in probes.variety(max(0, count - len(images)), seed=1):
        img, _ = decode(p.file_bytes())
        images.append(_keep(img))
        names.append(p.name)
        prompts.append([p.caption, p.colour, "the background", "a dog"])
    files = [p.file_bytes() for p in probes.SELF_TEST[:4]]
    t = time.thread_time()
    for data in files:
        prepare(data, SIGLIP2.image)
    decode_ms = (time.thread_time() - t) / len(files) * 1000
    images, names = images[:count], names[:count]
    return Sample(
        images,
        prompts[: min(clipseg_images, len(images))],
        f"{len(images)} bundled sample images (the index is empty)",
        catalog_images,
        decode_ms,
        names,
        bundled=True,
    )
