"""The Ray Data engine: decode in parallel tasks, embed in an actor pool, write shards in the driver.

Each actor loads the LiteRT tower once. Rows stream back to the driver, which
writes a shard as soon as all its rows are in (3 KB per vector: a driver writes
well over 100 MB/s of parquet, far above what a CPU cluster embeds), so a killed
run keeps every completed shard and the next run starts after them.

Pitfall (Ray #44687): an actor pool holding every CPU starves the decode tasks and
the run hangs; the pool is sized to leave at least one CPU to them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from wherein.indexer.models.modeldir import ModelDir
from wherein.indexer.models.registry import entry_for
from wherein.indexer.scale import records
from wherein.indexer.scale.shards import PHOTO_FIELDS, uri_of_cell
from wherein.schemas.models import ImageInput

DECODE_BATCH = 16
EMBED_BATCH = 32
DECODE_MEMORY = 256 << 20  # one decode batch: 16 x 600 KB of pixels plus the decoded images


def pool_size(total_cpus: float, actors: int | None, actor_cpus: float | None) -> tuple[int, float]:
    """(actors, CPUs per actor), leaving >= 1 CPU (or half of a 1-CPU box) to the decode tasks."""
    actor_cpus = actor_cpus or 1.0
    if actors is None:
        actors = max(1, int(total_cpus // (2 * actor_cpus)))
    spare = max(total_cpus - 1.0, total_cpus / 2)
    if actors * actor_cpus > spare:
        actor_cpus = spare / actors  # fractional CPUs: the pool can never take every CPU
    return actors, actor_cpus


def decode_batch(batch: dict, draft: bool, spec: ImageInput) -> dict:
    n = len(batch["id"])
    size = spec.size
    pixels = np.zeros((n, 3, size, size), np.float32)
    cols: dict[str, list[object]] = {
        k: [] for k in ("size", "mtime_ns", "sha256", "width", "height", "error")
    }
    photos: dict[str, list[object]] = {k: [] for k in PHOTO_FIELDS}
    for j in range(n):
        res = records.load(
            uri_of_cell(str(batch["uri"][j])),
            spec,
            int(batch["offset"][j]),
            int(batch["length"][j]),
            draft,
        )
        if res.pixels is not None:
            pixels[j] = res.pixels
        for k in cols:
            cols[k].append(getattr(res, k))
        photo = res.photo.as_dict() if res.photo is not None else {}
        for k in PHOTO_FIELDS:
            photos[k].append(photo.get(k))
    out = {"id": batch["id"], "shard": batch["shard"], "uri": batch["uri"], "pixels": pixels}
    out.update(
        {
            k: np.array(v, dtype=object if k in ("sha256", "error") else np.int64)
            for k, v in cols.items()
        }
    )
    out.update({k: np.array(v, dtype=object) for k, v in photos.items()})  # None where unknown
    return out


class Embedder:
    """One tower per actor, loaded once."""

    def __init__(self, models_root: str, threads: int) -> None:
        from pathlib import Path

        from wherein.indexer.models.modeldir import ModelDir
        from wherein.indexer.models.registry import load_image_embedder

        self.tower = load_image_embedder(ModelDir(Path(models_root)), threads)

    def __call__(self, batch: dict) -> dict:
        pixels = batch.pop("pixels")
        ok = np.array([not e for e in batch["error"]], dtype=bool)
        vecs = np.zeros((len(ok), self.tower.dim), np.float32)
        if ok.any():
            vecs[ok] = self.tower.embed(pixels[ok])
        batch["embedding"] = vecs
        return batch


def run_ray(
    plan,
    pending,
    writer,
    models_root,
    address,
    actors,
    actor_cpus,
    draft,
    progress,
    say=None,
    frames=None,
) -> None:
    from wherein.indexer.scale import ray_quiet
    from wherein.indexer.scale.ray_session import ray_session

    with ray_session(address, say) as ray:
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.print_on_execution_start = False
        table = plan.items(pending)
        # One input block per shard: decode tasks start on many shards at once.
        shard_col = table.column("shard").to_numpy()
        starts = np.flatnonzero(np.r_[True, shard_col[1:] != shard_col[:-1]])
        ends = np.r_[starts[1:], len(shard_col)]
        blocks = [table.slice(int(s), int(e - s)) for s, e in zip(starts, ends, strict=True)]
        n_actors, cpus = pool_size(ray.cluster_resources().get("CPU", 1.0), actors, actor_cpus)
        ds = ray.data.from_arrow(blocks)
        ds = ds.map_batches(
            decode_batch,
            batch_size=DECODE_BATCH,
            batch_format="numpy",
            fn_kwargs={"draft": draft, "spec": entry_for(ModelDir(Path(models_root))).spec.image},
            num_cpus=1,
            # A memory reservation of its own also keeps Ray from fusing the
            # decode tasks into the actors (decode must run in parallel tasks).
            memory=DECODE_MEMORY,
        )
        ds = ds.map_batches(
            Embedder,
            fn_constructor_kwargs={"models_root": str(models_root), "threads": max(1, round(cpus))},
            compute=ray.data.ActorPoolStrategy(size=n_actors),
            num_cpus=cpus,
            batch_size=EMBED_BATCH,
            batch_format="numpy",
        )
        with ray_quiet.stderr_without():
            _collect(ds, writer, progress)


def _collect(ds, writer, progress) -> None:
    """Rows as they come back from the actors, into the shard writer."""
    for batch in ds.iter_batches(batch_format="numpy", batch_size=None):
        for j in range(len(batch["id"])):
            err = str(batch["error"][j])
            writer.add(
                int(batch["shard"][j]),
                {
                    "id": int(batch["id"][j]),
                    "uri": str(batch["uri"][j]),
                    "size": int(batch["size"][j]),
                    "mtime_ns": int(batch["mtime_ns"][j]),
                    "sha256": str(batch["sha256"][j]),
                    "width": int(batch["width"][j]),
                    "height": int(batch["height"][j]),
                    "error": err,
                    "embedding": None if err else batch["embedding"][j],
                    "photo": {k: _plain(batch[k][j]) for k in PHOTO_FIELDS if k in batch},
                },
            )
        if progress:
            progress(len(batch["id"]))


def _plain(value: object) -> object:
    """A photo field from a Ray batch as the Python value the shard column takes: Arrow
    hands a null back as NaN in a numpy batch, and an int of a column with nulls as a float."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and value != value:
        return None
    return value
