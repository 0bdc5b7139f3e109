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
from wherein.indexer.ingest.videos import FrameChunk, FrameFeed, FrameSettings, VideoJob
from wherein.indexer.ingest.walk import WalkProblem
from wherein.indexer.kinds.registry import named
from wherein.indexer.models.modeldir import ModelDir
from wherein.indexer.models.registry import entry_for
from wherein.indexer.paths import make_folder
from wherein.indexer.regions import DEFAULT_TILING, TILINGS, Tiling
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
    embedded: int = 0  # items (a video counts once)
    frames: int = 0  # of which video frames: rows of their own in the shards
    regions: int = 0  # rows of photos' regions (embed --regions), beside their whole rows
    tiling: str | None = None  # the tiling photos are cut by (the plan's); None: no regions
    failed: int = 0
    seconds: float = 0.0
    resumed: bool = False
    interrupted: bool = False
    complete: bool = False
    problems: list[WalkProblem] = field(default_factory=list)

    @property
    def images_per_second(self) -> float:
        return (self.embedded + self.failed) / self.seconds if self.seconds else 0.0

    def to_dict(self) -> dict:
        """The run as `wherein embed --json` prints it (schemas/embed.schema.json)."""
        return {
            "out": self.out,
            "engine": self.engine,
            "items": self.items,
            "shards": self.shards,
            "shards_done_before": self.done_before,
            "shards_written": self.written,
            "embedded": self.embedded,
            "frames": self.frames,
            "regions": self.regions,
            "tiling": self.tiling,
            "failed": self.failed,
            "complete": self.complete,
            "seconds": round(self.seconds, 2),
            "images_per_second": round(self.images_per_second, 2),
            "interrupted": self.interrupted,
            "problems": [{"path": p.path, "reason": p.reason} for p in self.problems],
        }


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
    frames: FrameSettings = FrameSettings(),  # noqa: B008 - frozen, shared safely
    regions: bool = False,
    tiling: str | None = None,
) -> EmbedStats:
    """say: one-line notes for the user (which Ray cluster and token were used). frames: how
    videos are sampled (as `wherein index --frame-every/--max-frames`), fixed by the first run.
    regions: also cut large photos into regions (as `wherein index --regions`: region rows
    beside each photo's whole row), fixed by the first run too (a resume keeps the plan's).
    tiling: the tiling's name to cut by (an index's, from index_tiling); None: today's
    default. It implies regions."""
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
        {"frame_every": frames.every, "max_frames": frames.max_frames},
        entry_for(models).key,
        tiling or (DEFAULT_TILING.name if regions else None),
    )
    cut_by = plan_tiling(plan.tiling)
    stats.tiling = plan.tiling
    # A resumed run samples as the first one did (open_plan refuses other settings).
    frames = FrameSettings(plan.sampling["frame_every"], plan.sampling["max_frames"], frames.chunk)
    pending = plan.pending()
    stats.items, stats.shards = plan.count, plan.shards
    stats.done_before = plan.shards - len(pending)
    writer = shards.ShardWriter(plan, pending)
    if on_total:
        on_total(sum(plan.shard_count(i) for i in pending))
    try:
        if pending and engine == "local":
            _run_local(
                plan, pending, writer, models, workers, threads, draft, progress, frames, cut_by
            )
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
                frames,
                cut_by,
            )
    except KeyboardInterrupt:
        stats.interrupted = True
    finally:
        manifest = shards.write_manifest(plan)
        stats.written, stats.embedded, stats.frames, stats.failed = (
            len(writer.written),
            writer.embedded,
            writer.frames,
            writer.failed,
        )
        stats.regions = writer.regions
        stats.complete = manifest["complete"]
        stats.seconds = time.perf_counter() - t0
    return stats


def index_tiling(index_dir: str | Path) -> str | None:
    """The regions setting of an index (the name of the tiling its photos are cut by; None:
    it keeps no regions), so that shards for it are cut the same way (`embed --for-index`).

    Opened read-only: not a byte of the index is written, and a newer wherein's catalog is
    read as far as this setting. Its files and items are not checked for damage (a
    search's check): only one setting is read, and build-index checks what it writes
    into. IndexError_ where the folder holds no index or the index names a tiling this
    wherein does not know."""
    from wherein.indexer.regions import tiling_named
    from wherein.indexer.store.index_store import IndexStore

    with IndexStore.open(index_dir, read_only=True, load_vectors=False, check_rows=False) as s:
        name = s.catalog.get_meta("regions")
    if name is not None:
        tiling_named(name)  # a newer wherein's tiling: refused before anything is cut
    return name


def plan_tiling(name: str | None) -> Tiling | None:
    """The tiling a plan names (None: no regions): a resumed run cuts as its first did."""
    if name is None:
        return None
    if name not in TILINGS:
        raise shards.ShardError(
            f"the plan cuts photos into regions with tiling {name!r}, which this wherein does "
            f"not know (it knows {', '.join(TILINGS)}): it was made by a newer wherein"
        )
    return TILINGS[name]


def row_of(item_id: int, uri: str, res: Prepared, vector: np.ndarray | None) -> dict:
    return {
        "id": item_id,
        "uri": uri,
        "size": res.size,
        "mtime_ns": res.mtime_ns,
        "sha256": res.sha256,
        "width": res.width,
        "height": res.height,
        "format": res.format,
        "error": res.error,
        "embedding": vector,
        "photo": res.photo.as_dict() if res.photo is not None else None,
        "regions": res.regions,
    }


def photo_rows(item_id: int, uri: str, res: Prepared, vectors: np.ndarray | None) -> list[dict]:
    """A photo's rows: its whole view's (vectors [d], or [n, d] with regions: the whole's
    first), then one per region (kind 'region', its box), each with the file's fields."""
    if vectors is None or vectors.ndim == 1:
        return [row_of(item_id, uri, res, vectors)]
    base = row_of(item_id, uri, res, None)
    return [
        {**base, "embedding": v}
        if loc.kind == "image"
        else {**base, "embedding": v, "kind": loc.kind, "box": loc.box}
        for (loc, _), v in zip(res.items, vectors, strict=True)
    ]


def frame_rows(
    item_id: int, uri: str, res: Prepared, times: list[float], vectors, damage: str | None
) -> list[dict]:
    """A video's rows: one per sampled frame (t seconds, its vector), each with the file's
    fields, taken/GPS as photo, and the videos row (frames: how many, damage: why the rest
    of the stream was skipped)."""
    assert res.video is not None
    v = res.video
    video = {"duration": v.duration, "fps": v.fps, "codec": v.codec, "rotation": v.rotation,
             "frames": len(times), "damage": damage, "media": res.kind}  # fmt: skip
    base = row_of(item_id, uri, res, None)
    return [
        {**base, "embedding": vec, "kind": "frame", "t": t, "video": video}
        for t, vec in zip(times, vectors, strict=True)
    ]


class _LocalRun:
    """The state of one local embed: a video's frames gather here until its last chunk."""

    def __init__(self, writer: shards.ShardWriter, feed: FrameFeed, progress) -> None:
        self.writer, self.feed, self.progress = writer, feed, progress
        # id(job) -> (plan row, probe, times, vectors): the frames of a video so far
        self.videos: dict[int, tuple[tuple, Prepared, list[float], list]] = {}

    def route(self, t: tuple, res: Prepared) -> Step:
        if res.video is not None and not res.error:
            job = VideoJob(t[2], res.size, res.mtime_ns, named(res.kind), data=res.data)
            res.data = None  # the job holds the bytes of a tar member's animation until sampled
            self.videos[id(job)] = (t, res, [], [])
            self.feed.start(job)
            return Step(None)  # nothing to write until its frames are in
        return Step((t, res), None if res.error else res.tower_pixels())

    def commit(self, steps: list[Step]) -> None:
        done = 0
        for s in steps:
            if isinstance(s.item, FrameChunk):
                done += self._frames(s.item, s.vector)
            elif s.item is not None:
                (item_id, shard, uri, _o, _l), res = s.item
                self.writer.add_item(shard, photo_rows(item_id, uri, res, s.vector))
                done += 1
        if self.progress and done:
            self.progress(done)

    def _frames(self, chunk: FrameChunk, vectors) -> int:
        t, res, times, vecs = self.videos[id(chunk.job)]
        chunk.job.embedded += len(chunk.times)  # a decoder failing later is damage, not a skip
        times.extend(chunk.times)
        vecs.extend(vectors if vectors is not None else [])
        if not chunk.last:
            return 0
        del self.videos[id(chunk.job)]
        item_id, shard, uri = t[:3]
        if chunk.error is not None:  # not one frame decoded: a failed item, as a broken photo
            res.error = chunk.error
            self.writer.add(shard, row_of(item_id, uri, res, None))
        else:
            self.writer.add_item(shard, frame_rows(item_id, uri, res, times, vecs, chunk.damage))
        return 1


def _run_local(
    plan, pending, writer, models, workers, threads, draft, progress, frames, tiling
) -> None:
    """The ingest pipeline `wherein index` runs, videos' frames included (its FrameFeed on
    the same decode pool); a commit hands finished items to the shard writer."""
    from concurrent.futures import ThreadPoolExecutor

    from wherein.indexer.models.registry import load_image_embedder

    tower = load_image_embedder(models, threads)
    table = plan.items(pending).to_pydict()
    uris = [shards.uri_of_cell(u) for u in table["uri"]]
    todo = zip(table["id"], table["shard"], uris, table["offset"], table["length"], strict=True)

    def load(t: tuple) -> Prepared:
        return records.load(t[2], tower.spec.image, t[3], t[4], draft, tiling)

    workers = workers or default_workers()
    pool = ThreadPoolExecutor(workers, thread_name_prefix="decode")
    run = _LocalRun(writer, FrameFeed(pool, tower.spec.image, frames), progress)
    policy = CommitPolicy(every=max(32, tower.batch_size))
    try:
        run_pipeline(
            todo, load, run.route, run.commit, tower, workers, policy, pool=pool, side=run.feed
        )
    finally:
        run.feed.close()
        pool.shutdown(wait=True, cancel_futures=True)
