"""`wherein build-index`: a normal wherein index directory from embed shards, in bounded memory.

- catalog.db: one images row per embedded item with rowid = the shard's id (so
  FAISS id = catalog id = shard id), its float32 vector in ``embeddings`` (the
  search path re-scores candidates against these: 3,072 B/vector plus ~150 B of
  row), failed items in ``skipped``; one transaction per shard.
- vectors.faiss + vectors.json via VectorIndex.save(), index chosen by
  vectors.choose_index(n, dim, budget). IVF is trained on a sample spread over
  the shards and filled shard by shard. When even the IVF codes exceed the
  budget, each block of shards fills its own copy of the trained index on disk
  and faiss.contrib.ondisk.merge_ondisk joins them into vectors.ivfdata, which
  FAISS memory-maps (kind "ivf-sq8-ondisk": a later catalog change rebuilds it
  in memory through the normal sync).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from wherein.indexer.normalize import unit_rows
from wherein.indexer.scale import shards as S
from wherein.indexer.scale.sources import TAR_SEP
from wherein.indexer.store.index_store import CATALOG_FILE, IndexStore
from wherein.indexer.store.vectors import IndexChoice, apply_search_params, choose_index, new_index
from wherein.schemas.errors import IndexError_

IVFDATA_FILE = "vectors.ivfdata"
ONDISK_KIND = "ivf-sq8-ondisk"
TRAIN_PER_LIST = 64  # what VectorIndex._rebuild samples; FAISS wants >= 39 per list
TRAIN_MIN_PER_LIST = 39
KMEANS_ITERATIONS = (
    10  # FAISS' default is 25; 10 loses nothing measurable on recall (bench_scale.py)
)


@dataclass
class BuildStats:
    index: str
    vectors: int = 0
    skipped: int = 0
    shards: int = 0
    kind: str = ""
    factory: str = ""
    nlist: int = 0
    nprobe: int = 0
    train_vectors: int = 0
    seconds: float = 0.0
    catalog_seconds: float = 0.0
    train_seconds: float = 0.0
    add_seconds: float = 0.0


def parse_bytes(text: str) -> int:
    """'4G', '512M', '1.5GB', '100000' -> bytes (binary units)."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    try:
        return int(float(t[:-1] if mult > 1 else t) * mult)
    except ValueError:
        raise ValueError(f"not a size: {text!r} (use e.g. 4G, 512M)") from None


def _read_shard(embed_dir: Path, entry: dict, columns: list[str] | None = None):
    import pyarrow.parquet as pq

    return pq.read_table(embed_dir / entry["file"], columns=columns)


READ_ROWS = 8192  # rows per parquet read: memory stays bounded whatever the shard size


def _shard_batches(embed_dir: Path, entry: dict, columns: list[str] | None = None):
    """A shard as tables of READ_ROWS rows; the Arrow pool is released after each shard
    (Arrow keeps freed buffers otherwise, and a 1M build grew by GBs)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with pq.ParquetFile(embed_dir / entry["file"]) as f:
        for batch in f.iter_batches(batch_size=READ_ROWS, columns=columns):
            yield pa.Table.from_batches([batch])
    pa.default_memory_pool().release_unused()


def iter_shard_vectors(embed_dir: Path, manifest: dict) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    for entry in manifest["shards"]:
        if entry["count"]:
            for t in _shard_batches(embed_dir, entry, ["id", "embedding"]):
                yield t.column("id").to_numpy(), unit_rows(S.embeddings(t, manifest["dim"]))


def build_index(
    embed_dir: str | Path,
    index_dir: str | Path,
    memory_budget: int | None = None,
    progress: Callable[[str], object] | None = None,
) -> BuildStats:
    import faiss

    t0 = time.perf_counter()
    embed_dir, out = (
        Path(embed_dir).expanduser().absolute(),
        Path(index_dir).expanduser().absolute(),
    )
    manifest = S.read_manifest(embed_dir)
    if (out / CATALOG_FILE).exists():
        raise IndexError_(f"{out}: already holds an index; build into a new directory")
    n, dim = manifest["count"], manifest["dim"]
    choice = choose_index(n, dim, memory_budget)
    # In memory only while the codes take at most half the budget: FAISS' training and
    # add passes need the rest (measured: a 1M build peaked at 2.3 GB with 776 MB of codes).
    ondisk = (
        choice.kind != "flat" and memory_budget is not None and n * (dim + 16) > memory_budget // 2
    )
    if ondisk:
        choice = IndexChoice(ONDISK_KIND, choice.factory, choice.nlist, choice.nprobe)
    stats = BuildStats(str(out), n, manifest["errors"], len(manifest["shards"]), **choice.as_dict())
    say = progress or (lambda _m: None)

    with IndexStore.open(out, write=True, create=True) as store:
        t = time.perf_counter()
        _write_catalog(store, embed_dir, manifest, say)
        stats.catalog_seconds = time.perf_counter() - t
        index = new_index(choice, dim)
        if not index.is_trained:
            t = time.perf_counter()
            sample = _training_sample(embed_dir, manifest, choice.nlist, memory_budget)
            stats.train_vectors = len(sample)
            say(f"training {choice.factory} on {len(sample)} vectors")
            ivf = faiss.extract_index_ivf(index)
            ivf.cp.niter = KMEANS_ITERATIONS
            index.train(sample)
            del sample
            stats.train_seconds = time.perf_counter() - t
        t = time.perf_counter()
        if ondisk:
            index = _fill_ondisk(index, embed_dir, manifest, out, memory_budget, say)
        else:
            for i, (ids, vecs) in enumerate(iter_shard_vectors(embed_dir, manifest)):
                index.add_with_ids(vecs, ids)
                say(f"added shard {i + 1}/{len(manifest['shards'])}")
        stats.add_seconds = time.perf_counter() - t
        apply_search_params(index, choice)
        vi = store.vectors
        vi.index, vi.choice = index, choice
        vi.generation = store.catalog.generation
        vi.model_id, vi.dim = manifest["model_id"], dim
        vi.save()
    stats.seconds = time.perf_counter() - t0
    return stats


def _fmt(uri: str) -> str:
    name = uri.rsplit(TAR_SEP, 1)[-1]
    return os.path.splitext(name)[1].lower().lstrip(".")


def _write_catalog(store: IndexStore, embed_dir: Path, manifest: dict, say) -> None:
    cat = store.catalog
    now = datetime.now(UTC).isoformat(timespec="seconds")
    model_id = manifest["model_id"]
    with cat.transaction():
        cat.set_meta("model_id", model_id)
        cat.set_meta("space", manifest["space"])
        cat.set_meta("dim", manifest["dim"])
        cat.set_meta("model_file", manifest.get("model_file"))
        cat.set_meta("built_from", str(embed_dir))
    for k, entry in enumerate(manifest["shards"]):
        errors = _read_shard(embed_dir, {"file": entry["errors_file"]}).to_pydict()
        with cat.transaction():
            for t in _shard_batches(embed_dir, entry):
                vecs = S.embeddings(t, manifest["dim"])
                cols = t.drop(["embedding"]).to_pydict()
                records = [
                    {
                        "id": i,
                        "path": u,
                        "size": sz,
                        "mtime_ns": m,
                        "sha256": sh,
                        "width": w,
                        "height": h,
                        "format": _fmt(u),
                        "indexed_at": now,
                        "model_id": model_id,
                    }
                    for i, u, sz, m, sh, w, h in zip(
                        cols["id"],
                        cols["uri"],
                        cols["size"],
                        cols["mtime_ns"],
                        cols["sha256"],
                        cols["width"],
                        cols["height"],
                        strict=True,
                    )
                ]
                cat.insert_images(records, vecs)
            cat.record_skips(
                zip(
                    errors["uri"],
                    errors["reason"],
                    errors["size"],
                    errors["mtime_ns"],
                    [now] * len(errors["uri"]),
                    strict=True,
                ),
            )
        say(f"catalog: shard {k + 1}/{len(manifest['shards'])}")
    with cat.transaction():
        cat.bump_generation()


def _training_sample(embed_dir: Path, manifest: dict, nlist: int, budget: int | None) -> np.ndarray:
    """Rows spread evenly over all shards: nlist*64, held to an eighth of the budget (>= nlist*39):
    k-means and the residual pass hold several copies of the sample."""
    n, dim = manifest["count"], manifest["dim"]
    want = nlist * TRAIN_PER_LIST
    if budget is not None:
        want = min(want, max(nlist * TRAIN_MIN_PER_LIST, budget // 8 // (dim * 4)))
    want = min(want, n)
    rng = np.random.default_rng(0)
    parts, left = [], want
    entries = [e for e in manifest["shards"] if e["count"]]
    total = sum(e["count"] for e in entries)
    for k, entry in enumerate(entries):
        take = left if k == len(entries) - 1 else min(left, round(want * entry["count"] / total))
        if take <= 0:
            continue
        rows = np.sort(rng.choice(entry["count"], min(take, entry["count"]), replace=False))
        start = 0
        for t in _shard_batches(embed_dir, entry, ["embedding"]):  # never a whole shard in memory
            end = start + t.num_rows
            lo, hi = np.searchsorted(rows, [start, end])
            if hi > lo:
                parts.append(unit_rows(S.embeddings(t, dim)[rows[lo:hi] - start]))
            start = end
        left -= len(rows)
    return np.concatenate(parts) if parts else np.zeros((0, dim), np.float32)


def _fill_ondisk(trained, embed_dir: Path, manifest: dict, out: Path, budget: int, say):
    """Blocks of shards, each sized to a quarter of the budget, filled separately and merged on disk."""
    import faiss
    from faiss.contrib.ondisk import merge_ondisk

    dim = manifest["dim"]
    per_block = max(1, (budget // 4) // (dim + 16))
    work = out / ".build"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    empty = faiss.serialize_index(trained)
    blocks: list[str] = []
    block, held = faiss.deserialize_index(empty), 0

    def flush():
        nonlocal block, held
        if held:
            name = str(work / f"block-{len(blocks):05d}.index")
            faiss.write_index(block, name)
            blocks.append(name)
            say(f"wrote block {len(blocks)} ({held} vectors)")
        block, held = faiss.deserialize_index(empty), 0

    for ids, vecs in iter_shard_vectors(embed_dir, manifest):
        for s in range(0, len(ids), per_block):
            part_ids, part = ids[s : s + per_block], vecs[s : s + per_block]
            block.add_with_ids(part, part_ids)
            held += len(part_ids)
            if held >= per_block:
                flush()
    flush()
    index = faiss.deserialize_index(empty)
    ivfdata = out / IVFDATA_FILE
    if ivfdata.exists():
        ivfdata.unlink()
    merge_ondisk(index, blocks, str(ivfdata))
    shutil.rmtree(work, ignore_errors=True)
    return index
