"""`wherein select --mask --engine ray`: every selected image's mask into one label export.

The selection is cut into shards of SHARD_IMAGES images in selection order (a
`MaskJob`); the shards are masked on Ray (search/localize/ray_masks.py) and kept
in a work folder beside the export (search/localize/mask_shards.py), then merged
through the same LabelWriter the local engine uses, in selection order: the
export is the local engine's, annotation for annotation and pixel for pixel.
Interrupted (Ctrl-C, a kill, a lost cluster), the finished shards stay; the same
command again masks only the missing ones. The work folder goes once the export
is in place.

Categories are fixed before any mask is made (workers encode with them): the
prompt, or with stored labels each image's best label, and the prompt for the
images without one (`categories_for`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wherein.indexer.models.modeldir import ModelDir
from wherein.schemas.errors import ModelError
from wherein.schemas.models import CLIPSEG
from wherein.schemas.records import HIT_MASK_FIELDS
from wherein.search.export.destination import Keep
from wherein.search.export.labels import FrameNames, LabelWriter, StoredLabels, categories_for
from wherein.search.localize.mask_shards import Item, MaskJob, WorkFolder, work_path
from wherein.search.localize.masking import hit_region, hit_time, with_fields

SHARD_IMAGES = 100  # a shard file of COCO pieces is ~100-300 KB; resuming loses < one per actor


@dataclass
class RayMaskStats:
    export: str
    work: str
    images: int = 0
    shards: int = 0
    done_before: int = 0  # shards an earlier run finished (not masked again)
    written: int = 0  # shards masked by this run
    masked: int = 0  # images in the export
    failed: int = 0  # images that could not be decoded (no mask, as with --engine local)
    restarted: bool = False  # the work folder held another job; its shards were dropped
    interrupted: bool = False
    seconds: float = 0.0
    spent: dict[str, float] = field(default_factory=dict)  # seconds per stage, summed

    masked_now: int = 0  # images in the shards this run wrote

    @property
    def images_per_second(self) -> float:
        return self.masked_now / self.seconds if self.seconds else 0.0


def model_identity(models: ModelDir) -> str:
    """The CLIPSeg graphs a job runs on, by name, size and mtime: other graphs, another job."""
    d = models.require(CLIPSEG)
    _, text, decoder = (g.filename for g in CLIPSEG.graphs)
    parts = []
    for path in (models.clipseg_vision_file(), d / text, d / decoder):
        try:
            st = path.stat()
        except OSError:
            raise ModelError(f"{path}: model file not found (run `wherein models pull`)") from None
        parts.append(f"{path.name}:{st.st_size}:{st.st_mtime_ns}")
    return ";".join(parts)


def export_masks(
    hits: Sequence[Any],
    prompt: str,
    dest: str | Path,
    fmt: str,
    models_root: str | Path,
    labels: StoredLabels | None = None,
    address: str | None = None,
    actors: int | None = None,
    shard_size: int | None = None,
    say: Callable[[str], object] | None = None,
    progress: Callable[[int], object] | None = None,
    on_total: Callable[[int], object] | None = None,
    on_shard: Callable[[int], object] | None = None,
    keep: Sequence[Keep] = (),
) -> tuple[list[Any], RayMaskStats]:
    """Mask every hit on Ray and write the label export at dest; (hits with mask fields, stats).

    The hits come back in order with bbox, mask_area and mask_score (mask_path and
    overlay_path stay None: the masks are in the export); a hit whose image cannot be
    decoded keeps None mask fields and is not in the export. When interrupted
    (stats.interrupted), nothing is exported and the hits come back unchanged.
    """
    from wherein.indexer.models.registry import load_segmenter
    from wherein.search.localize.ray_masks import run_on_ray

    t0 = time.perf_counter()
    models = ModelDir(Path(models_root).expanduser().absolute())
    cats, category = categories_for(hits, prompt, labels)
    names = FrameNames()
    items = [_item(h, category(h), names) for h in hits]
    size = shard_size or SHARD_IMAGES
    job = MaskJob(prompt, fmt, list(cats.names), items, size, model_identity(models))
    work = WorkFolder.open(work_path(dest), job)
    pending = work.pending()
    stats = RayMaskStats(str(dest), str(work.path), len(items), job.shards)
    stats.done_before, stats.restarted = job.shards - len(pending), work.restarted
    if on_total:
        on_total(sum(len(job.shard(i)) for i in pending))
    if pending:
        # The prompt's cond, once, here: the workers never load the text graph.
        cond = load_segmenter(models, 1, image=False).encode_prompt(prompt)
        try:
            stats.spent = run_on_ray(
                job, work, pending, cond, models.root, address, actors, say, progress, on_shard
            )
        except KeyboardInterrupt:
            stats.interrupted = True
        finally:
            stats.written = len(work.written)
            stats.masked_now = sum(len(job.shard(i)) for i in work.written)
            stats.seconds = time.perf_counter() - t0
        if stats.interrupted:
            return list(hits), stats
    values = {o.id: o.values for o in work.outcomes(keep_pieces=False)}
    t1 = time.perf_counter()
    with LabelWriter(dest, fmt, cats, keep, reads=[h.path for h in hits]) as writer:
        stats.masked = work.merge(writer.add)
    stats.spent["merge"] = time.perf_counter() - t1
    work.remove()
    stats.failed = sum(1 for v in values.values() if v is None)
    stats.seconds = time.perf_counter() - t0
    out = [
        with_fields(h, values[it.id] or dict.fromkeys(HIT_MASK_FIELDS))
        for h, it in zip(hits, items, strict=True)
    ]
    return out, stats


def _item(hit: Any, category: str, names: FrameNames) -> Item:
    """A photo by its file id; a video hit's best frame by its item id (ids of files and
    items share one counter, so the export never sees one twice), its time and the name
    the local engine would give it."""
    at = hit_time(hit)
    if at is None:
        return Item(int(hit.id), hit.path, category, region=hit_region(hit))
    item_id = getattr(hit, "item_id", None)
    frame_id = int(item_id) if item_id is not None else int(hit.id)
    return Item(frame_id, hit.path, category, at, names(hit.path, at, frame_id))
