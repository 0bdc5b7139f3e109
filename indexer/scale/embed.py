"""`wherein embed`: list sources, fix the shard plan, embed the pending shards, write the manifest.

Two engines write the identical shard format: "local" (a decode thread pool and
one tower in this process) and "ray" (ray_embed.py: decode tasks, an actor pool
of towers; local mode on a laptop, a cluster unchanged).
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from wherein.indexer.ingest.run import JPEG_DRAFT
from wherein.indexer.ingest.walk import WalkProblem
from wherein.indexer.models.image_tower import file_digest
from wherein.indexer.models.modeldir import ModelDir
from wherein.indexer.scale import records, shards
from wherein.indexer.scale.sources import list_items, local_path
from wherein.schemas.models import SIGLIP_EMBED_DIM, SIGLIP_IMAGE

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
    """(model_id, space, file name) as ImageTower computes them, without loading the graph in the driver."""
    models.require(SIGLIP_IMAGE)
    path = models.image_tower_file()
    return f"{models.space}:{file_digest(path)[:16]}", models.space, path.name


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
    out.mkdir(parents=True, exist_ok=True)
    models = ModelDir(Path(models_root).expanduser().absolute())
    model_id, space, model_file = model_identity(models)
    stats = EmbedStats(str(out), engine)
    # Absolute local paths: a resumed run from another working directory finds the same plan.
    srcs = [
        s if "://" in s and not s.startswith("file://") else local_path(s)
        for s in map(str, sources)
    ]
    plan, stats.resumed = shards.open_plan(
        out,
        srcs,
        shard_size,
        model_id,
        space,
        SIGLIP_EMBED_DIM,
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


def row_of(item_id: int, uri: str, res: records.Loaded, vector: np.ndarray | None) -> dict:
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
    }


def _run_local(plan, pending, writer, models, workers, threads, draft, progress) -> None:
    from wherein.indexer.models.image_tower import ImageTower

    tower = ImageTower.from_models(models, threads)
    workers = workers or max(2, min(8, os.cpu_count() or 2))
    batch = max(32, tower.batch_size)
    table = plan.items(pending).to_pydict()
    todo = list(
        zip(
            table["id"], table["shard"], table["uri"], table["offset"], table["length"], strict=True
        )
    )
    ready: list[tuple[int, int, str, records.Loaded]] = []

    def flush() -> None:
        good = [r for r in ready if not r[3].error]
        vecs = tower.embed(np.stack([r[3].pixels for r in good])) if good else None
        k = 0
        for item_id, shard, uri, res in ready:
            vec = None
            if not res.error:
                vec, k = vecs[k], k + 1
            writer.add(shard, row_of(item_id, uri, res, vec))
        if progress:
            progress(len(ready))
        ready.clear()

    with ThreadPoolExecutor(workers, thread_name_prefix="decode") as pool:
        window: deque[tuple[tuple, Future]] = deque()
        it = iter(todo)
        while True:
            while len(window) < workers * 4 + batch:
                t = next(it, None)
                if t is None:
                    break
                window.append((t, pool.submit(records.load, t[2], t[3], t[4], draft)))
            if not window:
                break
            (item_id, shard, uri, _o, _l), fut = window.popleft()
            ready.append((item_id, shard, uri, fut.result()))
            if len(ready) >= batch:
                flush()
        flush()
