"""CLIPSeg masks on Ray actors: one vision pass per image, the prompt's cond from the driver.

Each actor loads the image side of CLIPSeg once (vision and decoder graphs, no
text graph, no tokenizer: open_clip and torch stay out of the workers); the
driver computes the prompt's cond once and every actor gets it through the
object store. A task is one shard of the job: the actor decodes each image
(reduced, as `wherein mask` does), runs the vision graph and the decoder,
measures the mask (`MaskResult`) and encodes the image's export piece; the
driver writes the shard file as soon as a shard comes back (mask_shards), so a
killed run keeps every finished shard.

`import ray` happens only inside `run_on_ray`: nothing else here needs it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from wherein.indexer.imaging import DecodeError
from wherein.schemas.errors import WhereinError
from wherein.search.cache.vision_store import rounded
from wherein.search.export.labels import (
    Categories,
    Instance,
    LabelledImage,
    encode_piece,
    frame_jpeg,
)
from wherein.search.localize.mask_shards import Item, MaskJob, Outcome, WorkFolder
from wherein.search.localize.masking import (
    frame_image,
    hit_values,
    image_loader,
    mask_of,
    open_for_mask,
)

# Seconds per stage, summed over images: what a run's time went to (bench_ray_masks).
STAGES = ("decode", "vision", "decoder", "write")


def mask_item(
    model, cond: np.ndarray, prompt: str, item: Item, fmt: str, categories: Categories, spent
) -> Outcome:
    """One image (a video's frame at item.time): decode, vision pass, decoder with cond, mask
    measured, export piece encoded (with the frame as JPEG)."""
    t0 = time.perf_counter()
    try:
        if item.time is None:
            image, size = open_for_mask(item.path)
        else:  # a video's best frame, as `search --mask` segments it
            image = frame_image(item.path, item.time)
            size = image.size
    except DecodeError as exc:
        spent["decode"] += time.perf_counter() - t0
        return Outcome(item.id, None, None, str(exc))
    t1 = time.perf_counter()
    features = rounded(model.image_features(image))  # as every mask path rounds it
    t2 = time.perf_counter()
    # Small regions segmented again on crops (refine.py), as a local `--mask` does; a frame
    # is already decoded at full size.
    loader = image_loader(item.path) if item.time is None else (lambda _draft: image)
    # As a local one: the hit's region is the first crop, and the crops' passes are rounded
    # as masking.crop_passes rounds them (an actor keeps no store).
    res = mask_of(model, prompt, features, size, cond, loader, item.region, crops=_rounded_pass)
    values = hit_values(res)
    labelled = LabelledImage(
        item.id,
        item.path,
        size[0],
        size[1],
        [Instance(item.category, res.mask, values["mask_score"])],
        time=item.time,
        frame=None if item.time is None else frame_jpeg(image),
        name=item.name,
        region=item.region,
    )
    piece = encode_piece(labelled, fmt, categories)
    t3 = time.perf_counter()
    spent["decode"] += t1 - t0
    spent["vision"] += t2 - t1
    spent["decoder"] += t3 - t2
    return Outcome(item.id, values, piece)


def _rounded_pass(_box, compute):
    return rounded(compute())


class MaskActor:
    """The image side of CLIPSeg, loaded once per actor; a load error is reported per task
    (as a one-line error the driver raises), not as a dead actor's traceback."""

    def __init__(
        self,
        models_root: str,
        cond: np.ndarray,
        prompt: str,
        fmt: str,
        categories: list[str],
        threads: int = 1,
    ) -> None:
        from wherein.indexer.models.modeldir import ModelDir
        from wherein.indexer.models.registry import load_segmenter

        self.error: str | None = None
        self.model = None
        try:
            self.model = load_segmenter(ModelDir(Path(models_root)), threads, text=False)
        except WhereinError as exc:
            self.error = str(exc)
        self.cond = np.asarray(cond, dtype=np.float32)
        self.prompt = prompt
        self.fmt = fmt
        self.categories = Categories(categories)

    def run(self, shard: int, items: Sequence[Item]) -> tuple[int, list[Outcome], dict[str, float]]:
        if self.error is not None:
            raise WhereinError(self.error)
        spent = dict.fromkeys(STAGES, 0.0)
        outcomes = [
            mask_item(self.model, self.cond, self.prompt, it, self.fmt, self.categories, spent)
            for it in items
        ]
        return shard, outcomes, spent


def run_on_ray(
    job: MaskJob,
    work: WorkFolder,
    pending: Sequence[int],
    cond: np.ndarray,
    models_root: str | Path,
    address: str | None = None,
    actors: int | None = None,
    say: Callable[[str], object] | None = None,
    progress: Callable[[int], object] | None = None,
    on_shard: Callable[[int], object] | None = None,
) -> dict[str, float]:
    """Mask the pending shards on an actor pool; each shard is written when it comes back.

    actors: pool size [one per CPU of the cluster, at most one per pending shard].
    on_shard(i): called after shard i is on disk (a KeyboardInterrupt from it stops the run
    as Ctrl-C would). Returns the seconds spent per stage, summed over images.
    """
    from wherein.indexer.scale.ray_session import ray_session

    spent = dict.fromkeys(STAGES, 0.0)
    if not pending:
        return spent
    with ray_session(address, say) as ray:
        from ray.util import ActorPool

        cpus = ray.cluster_resources().get("CPU", 1.0)
        n = max(1, min(actors or int(cpus), len(pending)))
        remote = ray.remote(num_cpus=1)(MaskActor)
        cond_ref = ray.put(np.asarray(cond, dtype=np.float32))  # once: every actor reads it
        pool = ActorPool(
            [
                remote.remote(str(models_root), cond_ref, job.prompt, job.fmt, job.categories)
                for _ in range(n)
            ]
        )
        tasks = [(i, job.shard(i)) for i in pending]
        try:
            for shard, outcomes, took in pool.map_unordered(lambda a, t: a.run.remote(*t), tasks):
                t0 = time.perf_counter()
                work.write(shard, outcomes)
                for k, v in took.items():
                    spent[k] += v
                spent["write"] += time.perf_counter() - t0
                if progress:
                    progress(len(outcomes))
                if on_shard:
                    on_shard(shard)
        except ray.exceptions.RayError as exc:
            raise _one_line(exc) from None
    return spent


def _one_line(exc: Any) -> WhereinError:
    """A worker's failure as one line: its own message when it raised a wherein error."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, WhereinError):
        return WhereinError(str(cause.args[0]) if cause.args else str(cause))
    text = str(cause if cause is not None else exc).strip().splitlines()
    return WhereinError(f"a mask worker failed: {text[-1] if text else type(exc).__name__}")
