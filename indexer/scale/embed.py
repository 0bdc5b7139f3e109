"""`wherein embed`: list sources, fix the shard plan, embed the pending shards, write the manifest.

Two engines write the identical shard format: "local" (the ingest pipeline
`wherein index` runs — ingest/pipeline.py: a bounded decode thread pool and one
tower in this process) and "ray" (ray_embed.py: decode tasks, an actor pool of
towers; local mode on a laptop, a cluster unchanged).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from wherein.indexer.imaging import JPEG_DRAFT, Prepared
from wherein.indexer.ingest.pipeline import CommitPolicy, Step, default_workers, run_pipeline
from wherein.indexer.ingest.walk import WalkProblem
from wherein.indexer.models.modeldir import ModelDir
from wherein.indexer.models.registry import entry_for
from wherein.indexer.paths import make_folder
from wherein.indexer.scale import records, shards
from wherein.indexer.scale.sources import list_items, local_path

ENGINES = ("local", "ray")


@dataclass
class EmbedStats:
    out: str
    engine: str
    items: int = 0
    shards: int = 0
    done_before: int = 0  # shards an earlier run completed (skipped now)
    written: int = 0
    embedded: int = 0
    failed: int = 0
    seconds: float = 0.0
    resumed: bool = False
    interrupted: bool = False
    complete: bool = False
    problems: list[WalkProblem] = field(default_factory=list)

    @property
    def images_per_second(self) -> float:
        return (self.embedded + self.failed) / self.seconds if self.seconds else 0.0


def model_identity(models: ModelDir) -> tuple[str, str, str]:
    """(model_id, space, file name) as the image side reports them, without loading it in the driver."""
    model_id, model_file = entry_for(models).identify(models)
    return model_id, models.space, model_file


def embed(
    sources: list[str],
    out: str | Path,
    models_root: str | Path,
    engine: str = "local",
    ray_address: str | None = None,
    shard_size: int | None = None,
    workers: int | None = None,
    actors: int | None = None,
    actor_cpus: float | None = None,
    threads: int | None = None,
    draft: bool = JPEG_DRAFT,
    progress: Callable[[int], object] | None = None,
    on_total: Callable[[int], None] | None = None,
    say: Callable[[str], object] | None = None,
) -> EmbedStats:
    """say: one-line notes for the user (which Ray cluster and token were used)."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}")
    t0 = time.perf_counter()
    out = Path(out).expanduser().absolute()
    make_folder(out, "embed directory")
    models = ModelDir(Path(models_root).expanduser().absolute())
    model_id, space, model_file = model_identity(models)
    stats = EmbedStats(str(out), engine)
    # Absolute local paths: a resumed run from another working directory finds the same plan.
    srcs: list[str] = []
    for s in map(str, sources):
        path = None if "://" in s and not s.startswith("file://") else local_path(s)
        srcs.append(s if path is None else path)
    plan, stats.resumed = shards.open_plan(
        out,
        srcs,
        shard_size,
        model_id,
        space,
        entry_for(models).spec.dim,
        lambda: list_items(srcs, stats.problems),
        model_file,
    )
    pending = plan.pending()
    stats.items, stats.shards = plan.count, plan.shards
    stats.done_before = plan.shards - len(pending)
    writer = shards.ShardWriter(plan, pending)
    if on_total:
        on_total(sum(plan.shard_count(i) for i in pending))
    try:
        if pending and engine == "local":
            _run_local(plan, pending, writer, models, workers, threads, draft, progress)
        elif pending:
            from wherein.indexer.scale.ray_embed import run_ray

            run_ray(
                plan,
                pending,
                writer,
                models.root,
                ray_address,
                actors,
                actor_cpus,
                draft,
                progress,
                say,
            )
    except KeyboardInterrupt:
        stats.interrupted = True
    finally:
        manifest = shards.write_manifest(plan)
        stats.written, stats.embedded, stats.failed = (
            len(writer.written),
            writer.embedded,
            writer.failed,
        )
        stats.complete = manifest["complete"]
        stats.seconds = time.perf_counter() - t0
    return stats


def row_of(item_id: int, uri: str, res: Prepared, vector: np.ndarray | None) -> dict:
    return {
        "id": item_id,
        "uri": uri,
        "size": res.size,
        "mtime_ns": res.mtime_ns,
        "sha256": res.sha256,
        "width": res.width,
        "height": res.height,
        "error": res.error,
        "embedding": vector,
        "photo": res.photo.as_dict() if res.photo is not None else None,
    }


def _run_local(plan, pending, writer, models, workers, threads, draft, progress) -> None:
    """The ingest pipeline `wherein index` runs; a commit hands finished rows to the shard writer."""
    from wherein.indexer.models.registry import load_image_embedder

    tower = load_image_embedder(models, threads)
    table = plan.items(pending).to_pydict()
    uris = [shards.uri_of_cell(u) for u in table["uri"]]
    todo = zip(table["id"], table["shard"], uris, table["offset"], table["length"], strict=True)

    def load(t: tuple) -> Prepared:
        return records.load(t[2], tower.spec.image, t[3], t[4], draft)

    def route(t: tuple, res: Prepared) -> Step[tuple]:
        return Step((t, res), None if res.error else res.pixels)

    def commit(steps: list[Step[tuple]]) -> None:
        for s in steps:
            (item_id, shard, uri, _o, _l), res = s.item
            writer.add(shard, row_of(item_id, uri, res, s.vector))
        if progress:
            progress(len(steps))

    policy = CommitPolicy(every=max(32, tower.batch_size))
    run_pipeline(todo, load, route, commit, tower, workers or default_workers(), policy)
