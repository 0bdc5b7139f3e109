"""Several embed directories read as one collection: shards oldest first, ids kept disjoint.

Each `wherein embed` run numbers its items 1..N; a build from several runs (or an
append to an index built earlier) shifts each run's ids past the ones before it, so
catalog id = FAISS id stays unique and is never one an index handed out before.
A video is one planned item (its number becomes its file's id) whose rows are its frames;
a photo cut into regions (`embed --regions`) is one planned item whose rows are its whole
view (its id is the file's) and its regions. The frame and region items are numbered
after the run's N items, shard by shard in shard order and in row order within a shard
(the manifest counts each shard's frames and regions), so every reader of the shards
gives an item the same id without any state of its own.
Shards are ordered by the time their ``.done`` marker was written (then by the order
the directories were given, then by shard number): writing them in that order lets
the newest shard of a path win simply by coming last.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from wherein.indexer.normalize import unit_rows
from wherein.indexer.scale import shards as S

READ_ROWS = 8192  # rows per parquet read: memory stays bounded whatever the shard size


@dataclass(frozen=True)
class ShardRef:
    embed_dir: Path
    entry: dict  # the manifest's entry: shard, file, count, errors_file, errors
    offset: int  # added to the shard's ids
    written_at: float  # when its .done marker was written (0 when the marker has no time)
    source: int  # position of its directory in the list given
    # added to a frame's or region's position among the shard's frames and regions (from 1)
    frame_offset: int = 0

    @property
    def name(self) -> str:
        return f"{self.embed_dir}/{self.entry['file']}"

    def batches(self, columns: list[str] | None = None):
        """The shard as pyarrow tables of READ_ROWS rows, ids shifted by the offset: ``id`` is
        the item's (FAISS) id, ``file_id`` its file's (a photo's whole view's are one; a
        frame's file is its video, a region's its photo, whose rows share the planned item's
        number). The Arrow pool is released
        after each shard (it keeps freed buffers, and a 1M build grew by GBs)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = self.embed_dir / self.entry["file"]
        frames_seen = 0
        try:
            with pq.ParquetFile(path) as f:
                has_kind = "kind" in f.schema_arrow.names
                want = columns
                if columns is not None and has_kind and "kind" not in columns:
                    want = [*columns, "kind"]
                for batch in f.iter_batches(batch_size=READ_ROWS, columns=want):
                    t = pa.Table.from_batches([batch])
                    if "id" not in t.column_names:
                        yield t
                        continue
                    file_ids = t.column("id").to_numpy() + self.offset
                    ids = file_ids.copy()
                    if has_kind:
                        kind = t.column("kind").to_numpy(zero_copy_only=False)
                        frame = (kind == "frame") | (kind == "region")
                        n = int(frame.sum())
                        ids[frame] = self.frame_offset + frames_seen + np.arange(1, n + 1)
                        frames_seen += n
                    t = t.set_column(t.column_names.index("id"), "id", pa.array(ids, pa.int64()))
                    yield t.append_column("file_id", pa.array(file_ids, pa.int64()))
        except (OSError, pa.ArrowException) as exc:  # pages damaged behind an intact footer
            raise S.ShardError(damaged_shard(path, exc)) from None
        pa.default_memory_pool().release_unused()

    def errors(self) -> dict[str, list]:
        """The failed items of this shard: uri, reason, size, mtime_ns (ids shifted)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = self.embed_dir / self.entry["errors_file"]
        try:
            cols = pq.read_table(path).to_pydict()
        except (OSError, pa.ArrowException) as exc:
            raise S.ShardError(damaged_shard(path, exc)) from None
        cols["id"] = [i + self.offset for i in cols["id"]]
        cols["uri"] = [S.uri_of_cell(u) for u in cols["uri"]]
        return cols


@dataclass
class EmbedSet:
    dirs: list[Path]
    manifests: list[dict]
    shards: list[ShardRef]  # oldest first
    model_id: str
    space: str
    dim: int
    model_file: str | None
    last_id: int  # the largest id any item of the set can have
    family: str | None = None  # the model family (registry key); None: shards of older runs
    # Each directory's tiling (`embed --regions`), in the order given; None: not cut
    tilings: list[str | None] = field(default_factory=list)

    @property
    def count(self) -> int:
        """Embedded vectors in all shards (a path in several directories counts each time)."""
        return sum(m["count"] for m in self.manifests)

    @property
    def errors(self) -> int:
        return sum(m["errors"] for m in self.manifests)

    def vectors(self, exclude: np.ndarray | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(ids, unit vectors) in shard order, batch by batch; ids in ``exclude`` left out."""
        for ref in self.shards:
            if not ref.entry["count"]:
                continue
            for t in ref.batches(["id", "embedding"]):
                ids, vecs = t.column("id").to_numpy(), unit_rows(S.embeddings(t, self.dim))
                if exclude is not None and len(exclude):
                    keep = ~np.isin(ids, exclude)
                    ids, vecs = ids[keep], vecs[keep]
                if len(ids):
                    yield ids, vecs

    def describe(self, item_id: int) -> str:
        """Which directory and shard an id of this set (a file's or a frame's) came from."""
        for ref in self.shards:
            lo = ref.offset + ref.entry["shard"] * self.manifests[ref.source]["shard_size"]
            if lo < item_id <= lo + self.manifests[ref.source]["shard_size"]:
                return ref.name
            if ref.frame_offset < item_id <= ref.frame_offset + _extra_rows(ref.entry):
                return ref.name
        return "the index"


def open_set(dirs: list[str | Path], first_id: int = 1) -> EmbedSet:
    """Read the manifests (each complete), check they share one model, and lay out the ids."""
    paths = [Path(d).expanduser().absolute() for d in dirs]
    if len(set(paths)) != len(paths):
        raise S.ShardError("the same embed directory is given twice")
    manifests = [S.read_manifest(p) for p in paths]
    first = manifests[0]
    for p, m in zip(paths[1:], manifests[1:], strict=True):
        if (m["model_id"], m["dim"]) != (first["model_id"], first["dim"]):
            raise S.ShardError(
                f"{p}: embedded with model {m['model_id']} ({m['dim']}-d), but {paths[0]} with "
                f"{first['model_id']} ({first['dim']}-d); one index holds one model's vectors"
            )
    refs, offset = [], first_id - 1
    for k, (p, m) in enumerate(zip(paths, manifests, strict=True)):
        frame_offset = offset + m["items"]  # the run's frames follow its planned items
        for entry in sorted(m["shards"], key=lambda e: e["shard"]):
            when = _written_at(p, entry["shard"])
            refs.append(ShardRef(p, entry, offset, when, k, frame_offset))
            frame_offset += _extra_rows(entry)
        offset = frame_offset
    refs.sort(key=lambda r: (r.written_at, r.source, r.entry["shard"]))
    return EmbedSet(
        paths,
        manifests,
        refs,
        first["model_id"],
        first["space"],
        first["dim"],
        first.get("model_file"),
        offset,
        first.get("family"),
        [m.get("tiling") for m in manifests],
    )


def _extra_rows(entry: dict) -> int:
    """A shard's rows that are items beside their file's first: frames and regions."""
    return int(entry.get("frames", 0)) + int(entry.get("regions", 0))


def check_shards(es: EmbedSet) -> None:
    """Every shard file opens and holds the rows its manifest entry counts: a damaged one is
    named before anything is written (reading only the footers)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for ref in es.shards:
        for key, count in (("file", "count"), ("errors_file", "errors")):
            if not ref.entry.get(key):
                continue
            path = ref.embed_dir / ref.entry[key]
            try:
                with pq.ParquetFile(path) as f:
                    rows = f.metadata.num_rows
            except (OSError, pa.ArrowException) as exc:
                raise S.ShardError(damaged_shard(path, exc)) from None
            want = ref.entry.get(count)
            if want is not None and rows != want:
                raise S.ShardError(
                    damaged_shard(path, f"{rows} rows where its manifest counts {want}")
                )


def damaged_shard(path: Path, why: object) -> str:
    reason = str(why).strip().splitlines()[0] if str(why).strip() else type(why).__name__
    return (
        f"{path}: damaged shard ({reason}); delete it and its .done marker, then run "
        f"`wherein embed` with --out {path.parent.parent} again to rewrite it"
    )


def _written_at(embed_dir: Path, shard: int) -> float:
    try:
        marker = json.loads(S.shard_paths(embed_dir, shard)[2].read_text())
    except (OSError, ValueError):
        return 0.0
    return float(marker.get("written_at", 0.0))
