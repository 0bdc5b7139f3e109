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

from wherein.indexer.ingest.videos import FrameSettings, VideoJob, chunks
from wherein.indexer.kinds.registry import named
from wherein.indexer.models.modeldir import ModelDir
from wherein.indexer.models.registry import entry_for
from wherein.indexer.regions import Tiling
from wherein.indexer.scale import records
from wherein.indexer.scale.shards import BOX_FIELDS, PHOTO_FIELDS, VIDEO_FIELDS, uri_of_cell
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


# Every batch a decode task yields has these columns (Ray Data unifies the blocks' schemas).
_FILE = ("size", "mtime_ns", "sha256", "width", "height", "format", "error")
_ITEM = ("kind", "t", *VIDEO_FIELDS, *BOX_FIELDS, "regions")


def _empty() -> dict[str, list]:
    return {k: [] for k in ("id", "shard", "uri", "pixels", *_FILE, *PHOTO_FIELDS, *_ITEM)}


def _put(out: dict[str, list], src: dict, j: int, res, pixels, item: dict) -> None:
    """One output row: the plan row j of src, the file fields of res, and the item's."""
    for k in ("id", "shard", "uri"):
        out[k].append(src[k][j])
    out["pixels"].append(pixels)
    for k in _FILE:
        out[k].append(getattr(res, k))
    photo = res.photo.as_dict() if res.photo is not None else {}
    for k in PHOTO_FIELDS:
        out[k].append(photo.get(k))
    for k in _ITEM:
        out[k].append(item.get(k))


def _arrays(out: dict[str, list], spec: ImageInput) -> dict:
    size = spec.size
    pixels = np.zeros((len(out["id"]), 3, size, size), np.float32)
    for j, p in enumerate(out["pixels"]):
        if p is not None:
            pixels[j] = p
    ints = ("id", "shard", "size", "mtime_ns", "width", "height")
    arrays = {k: np.array(v, dtype=np.int64 if k in ints else object) for k, v in out.items()}
    arrays["pixels"] = pixels
    return arrays  # None (object) where a field is unknown


def decode_batch(
    batch: dict,
    draft: bool,
    spec: ImageInput,
    frames: FrameSettings | None = None,
    tiling: Tiling | None = None,
):
    """Decode one batch of plan rows (a task). A photo is one row, or with tiling, its whole
    view's row and one per region, each saying how many regions it has (so the driver knows
    when all its rows are in); a video is decoded whole in
    this task, its sampled frames yielded chunk by chunk as rows of their own (a generator:
    at most one chunk of a video's pixels is held); the rows of its last chunk carry the
    video's frame count and damage, so the driver knows when all its rows are in."""
    frames = frames or FrameSettings()
    out = _empty()
    for j in range(len(batch["id"])):
        uri = uri_of_cell(str(batch["uri"][j]))
        offset, length = int(batch["offset"][j]), int(batch["length"][j])
        res = records.load(uri, spec, offset, length, draft, tiling)
        if res.video is None or res.error:
            if res.error or not res.items:  # failed: one row, its error
                _put(out, batch, j, res, None, {"kind": "image"})
                continue
            for loc, px in res.items:
                box = dict(zip(BOX_FIELDS, loc.box or (), strict=False))
                _put(out, batch, j, res, px, {"kind": loc.kind, "regions": res.regions, **box})
            continue
        job = VideoJob(uri, res.size, res.mtime_ns, named(res.kind), data=res.data)
        res.data = None  # the job holds the bytes of a tar member's animation until sampled
        v = res.video
        item = {"kind": "frame", "duration": v.duration, "fps": v.fps, "codec": v.codec,
                "rotation": v.rotation, "frames": -1, "media": res.kind}  # fmt: skip
        held: tuple[list[float], list] = ([], [])  # the latest frames, out once more follow
        for chunk, pixels in chunks(job, spec, frames):
            if chunk.error is not None:  # not one frame: the item fails, as a broken photo
                res.error = chunk.error
                _put(out, batch, j, res, None, {"kind": "image"})
                break
            if chunk.times:
                for t, px in zip(*held, strict=True):
                    _put(out, batch, j, res, px, {**item, "t": t})
                held = (chunk.times, pixels)
            if chunk.last:  # the last rows say how many there are (a last chunk can be empty)
                last = {**item, "frames": job.embedded, "damage": chunk.damage}
                for t, px in zip(*held, strict=True):
                    _put(out, batch, j, res, px, {**last, "t": t})
            if len(out["id"]) >= DECODE_BATCH:
                yield _arrays(out, spec)
                out = _empty()
    if out["id"]:
        yield _arrays(out, spec)


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
    tiling=None,
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
            fn_kwargs={
                "draft": draft,
                "spec": entry_for(ModelDir(Path(models_root))).spec.image,
                "frames": frames,
                "tiling": tiling,
            },
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
    """Rows as they come back from the actors, into the shard writer; a video's frame rows
    (in any order) wait until as many are in as its last chunk counted, a photo's until its
    whole view and all its regions are (the writer puts them in order)."""
    videos: dict[int, list[dict]] = {}  # plan id -> its frame rows so far
    expected: dict[int, int] = {}  # plan id -> its frame count, once its last chunk is in
    photos: dict[int, list[dict]] = {}  # plan id -> the rows so far of a photo with regions
    for batch in ds.iter_batches(batch_format="numpy", batch_size=None):
        done = 0
        for j in range(len(batch["id"])):
            row, shard = _row(batch, j), int(batch["shard"][j])
            if row.get("kind") != "frame" and not row.get("regions"):
                writer.add(shard, row)
                done += 1
                continue
            if row.get("kind") != "frame":
                rows = photos.setdefault(row["id"], [])
                rows.append(row)
                if len(rows) == 1 + row["regions"]:
                    writer.add_item(shard, rows)
                    del photos[row["id"]]
                    done += 1
                continue
            rows = videos.setdefault(row["id"], [])
            rows.append(row)
            if row["video"]["frames"] >= 0:
                expected[row["id"]] = row["video"]["frames"]
            if len(rows) == expected.get(row["id"]):
                last = next(r["video"] for r in rows if r["video"]["frames"] >= 0)
                for r in rows:
                    r["video"] = last
                writer.add_item(shard, rows)
                del videos[row["id"]], expected[row["id"]]
                done += 1
        if progress and done:
            progress(done)


def _row(batch: dict, j: int) -> dict:
    err = str(batch["error"][j])
    row = {
        "id": int(batch["id"][j]),
        "uri": str(batch["uri"][j]),
        "size": int(batch["size"][j]),
        "mtime_ns": int(batch["mtime_ns"][j]),
        "sha256": str(batch["sha256"][j]),
        "width": int(batch["width"][j]),
        "height": int(batch["height"][j]),
        "format": str(_plain(batch["format"][j]) or "") if "format" in batch else "",
        "error": err,
        "embedding": None if err else batch["embedding"][j],
        "photo": {k: _plain(batch[k][j]) for k in PHOTO_FIELDS if k in batch},
    }
    regions = _plain(batch["regions"][j]) if "regions" in batch else None
    row["regions"] = None if regions is None else int(regions)  # type: ignore[call-overload]
    if "kind" in batch and _plain(batch["kind"][j]) == "region":
        row["kind"] = "region"
        row["box"] = tuple(float(batch[k][j]) for k in BOX_FIELDS)
    if "kind" in batch and _plain(batch["kind"][j]) == "frame":
        row["kind"], row["t"] = "frame", float(batch["t"][j])
        row["video"] = {k: _plain(batch[k][j]) for k in VIDEO_FIELDS}
    return row


def _plain(value: object) -> object:
    """A photo field from a Ray batch as the Python value the shard column takes: Arrow
    hands a null back as NaN in a numpy batch, and an int of a column with nulls as a float."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and value != value:
        return None
    return value
