"""The embed output directory: plan, parquet shards with done markers, manifest.

    OUT/
      plan.json, plan.parquet       the sorted item list and its shard assignment, how videos
                                    are sampled (frame_every, max_frames) and the tiling large
                                    photos are cut by (null: no regions): fixed at the first run
      shards/shard-00000.parquet    id, uri, size, mtime_ns, sha256, width, height, embedding,
                                    photo EXIF, kind, t, a video's metadata, a region's box,
                                    a photo's region count, its format by content (one
                                    row per item: a photo's whole view and each of its
                                    regions, each sampled frame of a video)
      shards/shard-00000.errors.parquet   id, uri, size, mtime_ns, reason (failed records)
      shards/shard-00000.done       written last: the shard is complete
      manifest.json                 model_id, space, dim, sampling, tiling, shards with counts
                                    (rows, frames: rows of video frames, regions: rows of
                                    photos' regions, errors)

A shard is complete when its parquet and its done marker exist; every file is
written to a temp name and renamed, so a killed run leaves no half shard behind
and a re-run embeds only the shards without a marker.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from wherein.indexer.scale.sources import Item
from wherein.indexer.store.atomic import atomic_path, write_atomic
from wherein.schemas.errors import WhereinError

PLAN_JSON = "plan.json"
PLAN_PARQUET = "plan.parquet"
MANIFEST = "manifest.json"
SHARD_DIR = "shards"
FORMAT_VERSION = 1


class ShardError(WhereinError):
    """The embed directory is inconsistent with what was asked."""


# No file name, tar member or URL holds NUL: a cell starting with it carries a name's bytes.
_BYTES_MARK = "\0"


def uri_cell(uri: str) -> str:
    """``uri`` as parquet text, losslessly. Parquet strings must be UTF-8; a name that is not
    (os.fsdecode gives it surrogate escapes) is stored as NUL + base64 of its exact bytes.
    Idempotent: a cell is valid UTF-8, so it passes through unchanged."""
    try:
        uri.encode("utf-8")
        return uri
    except UnicodeEncodeError:
        return _BYTES_MARK + base64.b64encode(os.fsencode(uri)).decode("ascii")


def uri_of_cell(cell: str) -> str:
    """The uri a parquet cell stores (inverse of uri_cell)."""
    if cell.startswith(_BYTES_MARK):
        return os.fsdecode(base64.b64decode(cell[1:]))
    return cell


def shard_name(i: int) -> str:
    return f"shard-{i:05d}"


def shard_paths(out: Path, i: int) -> tuple[Path, Path, Path]:
    base = out / SHARD_DIR / shard_name(i)
    return (
        base.with_suffix(".parquet"),
        base.with_suffix(".errors.parquet"),
        base.with_suffix(".done"),
    )


def is_done(out: Path, i: int) -> bool:
    parquet, _, done = shard_paths(out, i)
    return parquet.is_file() and done.is_file()


def embedding_type(dim: int):
    import pyarrow as pa

    return pa.list_(pa.float32(), dim)  # fixed_size_list: readable by any parquet reader


def shard_schema(dim: int):
    import pyarrow as pa

    return pa.schema(
        [
            ("id", pa.int64()),
            ("uri", pa.string()),
            ("size", pa.int64()),
            ("mtime_ns", pa.int64()),
            ("sha256", pa.string()),
            ("width", pa.int32()),
            ("height", pa.int32()),
            ("embedding", embedding_type(dim)),
            *[(name, kind()) for name, kind in _photo_types().items()],
            ("kind", pa.string()),
            ("t", pa.float64()),
            *[(name, kind()) for name, kind in _video_types().items()],
            *[(name, pa.float64()) for name in BOX_FIELDS],
            ("regions", pa.int32()),
            ("format", pa.string()),
        ]
    )


# A region row's box (x0, y0, x1, y1 in its photo's pixels as a viewer shows it; null on
# other rows), and on each row of a photo that was cut, how many regions it was cut into
# (0: small or flat; null: not cut). Shards written before regions were carried lack them.
# format: the file's format by its content (Prepared.format; null: not known, and shards
# written before it was carried lack it: the catalog then takes the name's extension).
BOX_FIELDS = ("x0", "y0", "x1", "y1")


# An item's kind and time, and its video's videos row (store/videos.py), repeated on each
# frame's row (parquet's dictionary encoding stores them once a page); null for a photo.
# Shards written before videos were carried lack these columns: every row is a photo. media:
# the file's kind (indexer/kinds; shards written before it was carried: a video).
VIDEO_FIELDS = ("duration", "fps", "codec", "rotation", "frames", "damage", "media")


def _video_types() -> dict:
    import pyarrow as pa

    kinds = {"codec": pa.string, "damage": pa.string, "media": pa.string, "rotation": pa.int32,
             "frames": pa.int32}  # fmt: skip
    return {name: kinds.get(name, pa.float64) for name in VIDEO_FIELDS}


# The photos table's EXIF fields (photometa.PhotoMeta), null where a photo has none; shards
# written before they were carried lack the columns.
PHOTO_FIELDS = ("taken", "taken_offset", "make", "model", "lens", "lat", "lon", "orientation")


def _photo_types() -> dict:
    import pyarrow as pa

    kinds = {"lat": pa.float64, "lon": pa.float64, "orientation": pa.int32}
    return {name: kinds.get(name, pa.string) for name in PHOTO_FIELDS}


def error_schema():
    import pyarrow as pa

    return pa.schema(
        [
            ("id", pa.int64()),
            ("uri", pa.string()),
            ("size", pa.int64()),
            ("mtime_ns", pa.int64()),
            ("reason", pa.string()),
        ]
    )


@dataclass
class Plan:
    out: Path
    shard_size: int
    count: int
    model_id: str
    space: str
    dim: int
    sources: list[str] = field(default_factory=list)
    model_file: str = ""
    sampling: dict = field(default_factory=dict)  # frame_every, max_frames (sampling of videos)
    family: str | None = None  # the model family (registry key); None in older plans
    tiling: str | None = None  # the name of the tiling large photos are cut by; None: not cut

    @property
    def shards(self) -> int:
        return (self.count + self.shard_size - 1) // self.shard_size

    def shard_count(self, i: int) -> int:
        return min(self.shard_size, self.count - i * self.shard_size)

    def pending(self) -> list[int]:
        return [i for i in range(self.shards) if not is_done(self.out, i)]

    def items(self, shards: list[int] | None = None):
        """The plan rows (id, shard, uri, offset, length) as a pyarrow table, optionally of some shards."""
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        table = pq.read_table(self.out / PLAN_PARQUET)
        if shards is not None:
            table = table.filter(pc.is_in(table["shard"], value_set=_int_array(shards)))
        return table


def _int_array(values):
    import pyarrow as pa

    return pa.array(values, pa.int64())


def open_plan(
    out: Path,
    sources: list[str],
    shard_size: int | None,
    model_id: str,
    space: str,
    dim: int,
    list_items,
    model_file: str = "",
    sampling: dict | None = None,
    family: str | None = None,
    tiling: str | None = None,
) -> tuple[Plan, bool]:
    """Load the plan of an earlier run (resume) or list the sources and fix a new one. (plan, resumed).
    sampling: how videos are sampled (frame_every, max_frames), fixed by the first run too.
    tiling: cut large photos into regions by the tiling of that name (`embed --regions`);
    a resumed run keeps the plan's tiling (even where today's default is another), and
    asking for regions a plan was made without is refused."""
    import pyarrow as pa

    side = out / PLAN_JSON
    if side.is_file():
        meta = json.loads(side.read_text())
        if sources and sorted(sources) != sorted(meta["sources"]):
            raise ShardError(
                f"{out}: holds shards of other sources ({', '.join(meta['sources'])}); use a new --out"
            )
        if shard_size and shard_size != meta["shard_size"]:
            raise ShardError(
                f"{out}: was planned with --shard-size {meta['shard_size']}; use it or a new --out"
            )
        if meta["model_id"] != model_id:
            raise ShardError(
                f"{out}: shards were embedded with model {meta['model_id']}, not {model_id}; use a new --out"
            )
        planned = meta.get("sampling") or sampling or {}  # a plan from before videos: as asked
        for key, value in (sampling or {}).items():
            if planned.get(key, value) != value:
                flag = "--" + key.replace("_", "-")
                raise ShardError(
                    f"{out}: was planned with {flag} {planned[key]:g}; use it or a new --out"
                )
        cut = meta.get("tiling")
        if tiling is not None and cut is None:
            raise ShardError(f"{out}: was planned without --regions; use a new --out for them")
        return Plan(
            out,
            meta["shard_size"],
            meta["count"],
            model_id,
            space,
            dim,
            meta["sources"],
            model_file,
            dict(planned),
            family,
            cut,
        ), True
    items: list[Item] = list_items()
    size = shard_size or 10_000
    ids = np.arange(
        1, len(items) + 1, dtype=np.int64
    )  # 1-based: becomes the catalog rowid and FAISS id
    table = pa.table(
        {
            "id": ids,
            "shard": (ids - 1) // size,
            "uri": [uri_cell(it.uri) for it in items],
            "offset": np.array([it.offset for it in items], dtype=np.int64),
            "length": np.array([it.length for it in items], dtype=np.int64),
        }
    )
    (out / SHARD_DIR).mkdir(parents=True, exist_ok=True)
    write_parquet_atomic(table, out / PLAN_PARQUET)
    digest = hashlib.sha256(os.fsencode("\n".join(it.uri for it in items))).hexdigest()
    meta = {
        "version": FORMAT_VERSION,
        "sources": sources,
        "shard_size": size,
        "count": len(items),
        "model_id": model_id,
        "model_file": model_file,
        "space": space,
        "family": family,
        "dim": dim,
        "items_sha256": digest,
        "sampling": dict(sampling or {}),
        "tiling": tiling,
    }
    write_atomic(side, json.dumps(meta, indent=2).encode())
    return Plan(
        out,
        size,
        len(items),
        model_id,
        space,
        dim,
        sources,
        model_file,
        dict(sampling or {}),
        family,
        tiling,
    ), False


def write_parquet_atomic(table, path: Path) -> None:
    import pyarrow.parquet as pq

    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


class ShardWriter:
    """Collects embedded items (in any order) and writes each shard once all its planned
    items are in: a photo or a failed item is one row, a video one row per sampled frame."""

    def __init__(self, plan: Plan, shards: list[int]) -> None:
        self.plan = plan
        self.expected = {i: plan.shard_count(i) for i in shards}
        self.rows: dict[int, list[dict]] = {i: [] for i in shards}
        self.items: dict[int, int] = {i: 0 for i in shards}  # planned items in, per shard
        self.run_id = uuid.uuid4().hex[:12]
        self.written: list[int] = []
        self.embedded = 0  # planned items embedded (a video counts once)
        self.frames = 0  # rows of video frames
        self.regions = 0  # rows of photos' regions
        self.failed = 0
        self.t0 = time.perf_counter()

    def add(self, shard: int, row: dict) -> None:
        """One planned item's one row: id, uri, size, mtime_ns, sha256, width, height, error,
        embedding (ndarray or None), and optionally photo (a dict of PHOTO_FIELDS)."""
        self.add_item(shard, [row])

    def add_item(self, shard: int, rows: list[dict]) -> None:
        """All rows of one planned item: a video's frames share its id and file fields, and
        add kind 'frame', t and video (a dict of VIDEO_FIELDS); a photo cut into regions is
        its whole view's row, then one per region with kind 'region' and its box; every
        row of a photo that was cut has regions (how many)."""
        self.rows[shard].extend(rows)
        self.items[shard] += 1
        if self.items[shard] == self.expected[shard]:
            del self.items[shard]
            self._write(shard, self.rows.pop(shard))

    def _write(self, i: int, rows: list[dict]) -> None:
        import pyarrow as pa

        dim = self.plan.dim
        # A photo's whole view, then its regions by box: the same order whichever engine
        # (and in whatever order its rows came back).
        rows.sort(key=lambda r: (r["id"], r.get("t") or 0.0, r.get("box") or ()))
        good = [r for r in rows if not r["error"]]
        bad = [r for r in rows if r["error"]]
        vecs = (
            np.stack([r["embedding"] for r in good]).astype(np.float32)
            if good
            else np.zeros((0, dim), np.float32)
        )
        cols = {
            k: [r[k] for r in good]
            for k in ("id", "uri", "size", "mtime_ns", "sha256", "width", "height")
        }
        cols["uri"] = [uri_cell(u) for u in cols["uri"]]
        cols["embedding"] = pa.FixedSizeListArray.from_arrays(
            pa.array(vecs.reshape(-1), pa.float32()), dim
        )
        for name in PHOTO_FIELDS:
            values = [(r.get("photo") or {}).get(name) for r in good]
            if name == "orientation":  # a Ray batch brings a column with nulls as floats
                values = [None if v is None else int(v) for v in values]
            cols[name] = values
        cols["kind"] = [r.get("kind", "image") for r in good]
        cols["t"] = [r.get("t") for r in good]
        for name in VIDEO_FIELDS:
            values = [(r.get("video") or {}).get(name) for r in good]
            if name in ("rotation", "frames"):
                values = [None if v is None else int(v) for v in values]
            cols[name] = values
        for k, name in enumerate(BOX_FIELDS):
            cols[name] = [None if r.get("box") is None else float(r["box"][k]) for r in good]
        cols["regions"] = [None if r.get("regions") is None else int(r["regions"]) for r in good]
        cols["format"] = [r.get("format") or None for r in good]
        table = pa.table(cols, schema=shard_schema(dim))
        errors = pa.table(
            {
                "id": [r["id"] for r in bad],
                "uri": [uri_cell(r["uri"]) for r in bad],
                "size": [r["size"] for r in bad],
                "mtime_ns": [r["mtime_ns"] for r in bad],
                "reason": [r["error"] for r in bad],
            },
            schema=error_schema(),
        )
        parquet, err_path, done = shard_paths(self.plan.out, i)
        write_parquet_atomic(errors, err_path)
        write_parquet_atomic(table, parquet)
        frames = sum(r.get("kind") == "frame" for r in good)
        regions = sum(r.get("kind") == "region" for r in good)
        marker = {
            "shard": i,
            "rows": len(good),
            "frames": frames,
            "regions": regions,
            "errors": len(bad),
            "model_id": self.plan.model_id,
            "run": self.run_id,
            "written_at": time.time(),
        }
        write_atomic(done, json.dumps(marker).encode())  # last: the shard counts as complete
        self.written.append(i)
        self.embedded += len({r["id"] for r in good})
        self.frames += frames
        self.regions += regions
        self.failed += len(bad)

    @property
    def unfinished(self) -> list[int]:
        return sorted(self.rows)


def write_vectors(plan: Plan, vectors: np.ndarray, uris: Sequence[str]) -> None:
    """A complete embed directory of vectors made elsewhere (ids 1..n, in plan's shards),
    written as `wherein embed` writes its own: for vectors with no file behind them to
    read, such as benchmarks' synthetic collections."""
    (plan.out / SHARD_DIR).mkdir(parents=True, exist_ok=True)
    writer = ShardWriter(plan, list(range(plan.shards)))
    for i, (uri, vector) in enumerate(zip(uris, vectors, strict=True)):
        row = {"id": i + 1, "uri": uri, "size": 0, "mtime_ns": 0, "sha256": "", "width": 0,
               "height": 0, "error": "", "embedding": vector}  # fmt: skip
        writer.add(i // plan.shard_size, row)
    write_manifest(plan)


def write_manifest(plan: Plan) -> dict:
    shards, complete = [], True
    for i in range(plan.shards):
        parquet, err_path, done = shard_paths(plan.out, i)
        if not is_done(plan.out, i):
            complete = False
            continue
        marker = json.loads(done.read_text())
        shards.append(
            {
                "shard": i,
                "file": f"{SHARD_DIR}/{parquet.name}",
                "count": marker["rows"],
                "frames": marker.get("frames", 0),
                "regions": marker.get("regions", 0),
                "errors_file": f"{SHARD_DIR}/{err_path.name}",
                "errors": marker["errors"],
            }
        )
    manifest = {
        "version": FORMAT_VERSION,
        "model_id": plan.model_id,
        "model_file": plan.model_file,
        "space": plan.space,
        "family": plan.family,
        "dim": plan.dim,
        "sources": plan.sources,
        "shard_size": plan.shard_size,
        "planned_shards": plan.shards,
        "items": plan.count,
        "sampling": plan.sampling,
        "tiling": plan.tiling,
        "complete": complete,
        "count": sum(s["count"] for s in shards),
        "frames": sum(s["frames"] for s in shards),
        "regions": sum(s["regions"] for s in shards),
        "errors": sum(s["errors"] for s in shards),
        "shards": shards,
    }
    write_atomic(plan.out / MANIFEST, json.dumps(manifest, indent=2).encode())
    return manifest


def read_manifest(out: Path) -> dict:
    try:
        manifest = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise ShardError(
            f"{out}: no embed manifest here (run `wherein embed SOURCE --out {out}` first)"
        ) from exc
    if not manifest["complete"]:
        done = len(manifest["shards"])
        raise ShardError(
            f"{out}: embedding incomplete ({done} of {manifest['planned_shards']} shards); "
            f"re-run `wherein embed` to finish it"
        )
    return manifest


def embeddings(table, dim: int) -> np.ndarray:
    """The embedding column as a [n, dim] float32 array (fixed_size_list or Ray's large_list)."""
    col = table.column("embedding").combine_chunks()
    if len(col) == 0:
        return np.zeros((0, dim), np.float32)
    return (
        col.flatten()
        .to_numpy(zero_copy_only=False)
        .astype(np.float32, copy=False)
        .reshape(len(col), dim)
    )
