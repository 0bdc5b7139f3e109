"""Scale-out figures: embed throughput (local engine vs Ray local mode) and a sharded index build.

    python bench/bench_scale.py --images 400 --vectors 1000000 --budget 1G > bench/results/scale.md

1. Embed: N synthetic 256x192 JPEGs through the stand-in tower with both engines
   (identical shards); images/s and the Ray/local ratio (Ray's start-up included and
   excluded).
2. Build: V synthetic clustered unit vectors (768-d) written as embed shards, then
   `build-index --max-memory BUDGET` in a child process: wall time, peak RSS
   (ru_maxrss of the child), index kind; recall@10 vs exact and query latency of
   the result through IndexStore/VectorIndex (search's over-fetch + re-score, and raw).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def make_images(root: Path, n: int) -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        img = Image.fromarray(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)).resize(
            (256, 192), Image.BILINEAR
        )
        img.save(root / f"img{i:05d}.jpg", quality=90)


def bench_embed(tmp: Path, n: int, models: Path) -> dict:
    from wherein.indexer.scale.embed import embed

    make_images(tmp / "imgs", n)
    out = {}
    for engine in ("local", "ray"):
        t = time.perf_counter()
        stats = embed(
            [str(tmp / "imgs")], tmp / f"emb-{engine}", models, engine=engine, shard_size=100
        )
        out[engine] = {
            "seconds": time.perf_counter() - t,
            "images_per_second": stats.images_per_second,
        }
    return out


def write_vector_shards(out: Path, n: int, dim: int, shard: int, model_id: str) -> np.ndarray:
    """Clustered unit vectors (1,000 clusters, noise 0.6x) as embed shards + manifest; returns 200 queries."""
    import pyarrow as pa

    from wherein.indexer.scale import shards as S

    rng = np.random.default_rng(0)
    centres = rng.normal(size=(1000, dim)).astype(np.float32)
    plan = S.Plan(out, shard, n, model_id, "bench", dim, ["synthetic"])
    (out / S.SHARD_DIR).mkdir(parents=True, exist_ok=True)
    queries = []
    for i in range(plan.shards):
        k = plan.shard_count(i)
        ids = np.arange(i * shard + 1, i * shard + k + 1, dtype=np.int64)
        v = centres[rng.integers(0, 1000, k)] + 0.6 * rng.normal(size=(k, dim)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        if len(queries) < 200:
            queries.extend(v[: -(-200 // plan.shards)])
        t = pa.table(
            {
                "id": ids,
                "uri": [f"/synthetic/{j}.jpg" for j in ids],
                "size": np.zeros(k, np.int64),
                "mtime_ns": np.zeros(k, np.int64),
                "sha256": [""] * k,
                "width": np.zeros(k, np.int32),
                "height": np.zeros(k, np.int32),
                "embedding": pa.FixedSizeListArray.from_arrays(pa.array(v.reshape(-1)), dim),
            },
            schema=S.shard_schema(dim),
        )
        parquet, errs, done = S.shard_paths(out, i)
        S.write_parquet_atomic(S.error_schema().empty_table(), errs)
        S.write_parquet_atomic(t, parquet)
        done.write_text(json.dumps({"rows": k, "errors": 0}))
    S.write_manifest(plan)
    q = np.stack(queries[:200])
    q += 0.1 * rng.normal(size=q.shape).astype(np.float32)
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def exact_top10(emb: Path, queries: np.ndarray) -> np.ndarray:
    from wherein.indexer.scale import shards as S
    from wherein.indexer.scale.build_index import iter_shard_vectors

    manifest = S.read_manifest(emb)
    best_s = np.full((len(queries), 10), -np.inf, np.float32)
    best_i = np.zeros((len(queries), 10), np.int64)
    for ids, v in iter_shard_vectors(emb, manifest):
        s = np.concatenate([best_s, queries @ v.T], axis=1)
        i = np.concatenate([best_i, np.broadcast_to(ids, (len(queries), len(ids)))], axis=1)
        top = np.argsort(-s, axis=1)[:, :10]
        best_s, best_i = np.take_along_axis(s, top, 1), np.take_along_axis(i, top, 1)
    return best_i


# The build's own memory, from inside the child: VmHWM (peak resident set, including the
# file-backed pages of the memory-mapped .ivfdata and block files, which the kernel can drop)
# and the peak of RssAnon (the heap: what a memory budget is about), sampled every 20 ms.
# ru_maxrss is no good here: Linux carries it across exec, so the child would report this
# process's peak, which holds the generated vectors.
_CHILD = """import sys, threading, time
from wherein.search.cli import cli
def status(key):
    return int(next(l for l in open('/proc/self/status') if l.startswith(key)).split()[1]) * 1024
peak = [0]
def sample():
    while True:
        peak[0] = max(peak[0], status('RssAnon:'))
        time.sleep(0.02)
threading.Thread(target=sample, daemon=True).start()
try:
    cli()
finally:
    print('peak_rss', status('VmHWM:'), max(peak[0], status('RssAnon:')), file=sys.stderr)
"""


def bench_build(tmp: Path, n: int, budget: str, shard: int) -> dict:
    from wherein.indexer.store.index_store import IndexStore

    emb, idx = tmp / "vec-emb", tmp / "vec-idx"
    t = time.perf_counter()
    queries = write_vector_shards(emb, n, 768, shard, "bench:synthetic")
    gen_s = time.perf_counter() - t
    t = time.perf_counter()
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            _CHILD,
            "build-index",
            str(emb),
            "--index",
            str(idx),
            "--max-memory",
            budget,
            "--json",
            "-q",
        ],
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t
    if child.returncode:
        raise SystemExit(child.stderr)
    peak, peak_anon = (int(x) for x in child.stderr.strip().splitlines()[-1].split()[1:])
    stats = json.loads(
        child.stdout[child.stdout.index("{\n") :]
    )  # merge_ondisk prints to stdout first
    exact = exact_top10(emb, queries)
    with IndexStore.open(idx) as store:
        store.vectors.search(queries[:5], 10)  # warm the mmap
        t = time.perf_counter()
        raw = [store.vectors.search(q[None], 10)[1][0] for q in queries]
        raw_ms = (time.perf_counter() - t) / len(queries) * 1e3
        t = time.perf_counter()
        rescored = []
        for q in queries:  # wherein search: over-fetch 4x, exact re-score from the catalog
            cand = store.vectors.search(q[None], 40)[1][0]
            ids, v = store.catalog.vectors_for(cand[cand >= 0])
            rescored.append(ids[np.argsort(-(v @ q))[:10]])
        rescored_ms = (time.perf_counter() - t) / len(queries) * 1e3
        sizes = {p.name: p.stat().st_size for p in idx.iterdir() if p.is_file()}

    def recall(found):
        return float(
            np.mean([len(set(f) & set(e)) / 10 for f, e in zip(found, exact, strict=True)])
        )

    return {
        "vectors": n,
        "budget": budget,
        "generate_s": gen_s,
        "build_wall_s": wall,
        "peak_rss": peak,
        "peak_anon": peak_anon,
        "stats": stats,
        "recall_raw": recall(raw),
        "recall_rescored": recall(rescored),
        "query_ms_raw": raw_ms,
        "query_ms_rescored": rescored_ms,
        "files": sizes,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=400)
    ap.add_argument("--vectors", type=int, default=1_000_000)
    ap.add_argument("--budget", default="1G")
    ap.add_argument("--shard", type=int, default=50_000)
    ap.add_argument("--models", default=None, help="models dir [stand-ins built in a temp dir]")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as d:
        tmp = Path(d)
        models = Path(args.models) if args.models else None
        if models is None:
            from wherein.indexer.models.standins import build_standin_models

            models = build_standin_models(tmp / "models")
        e = bench_embed(tmp, args.images, models) if args.images else None
        b = bench_build(tmp, args.vectors, args.budget, args.shard) if args.vectors else None
    print("# Scale-out benchmark\n")
    print(
        f"Command: `python bench/bench_scale.py {' '.join(sys.argv[1:])}` (2-core VM, stand-in models)\n"
    )
    if e:
        lo, ra = e["local"], e["ray"]
        print(f"## Embed {args.images} JPEGs (256x192), shard size 100\n")
        print("| engine | wall s | images/s |\n|---|---|---|")
        print(f"| local | {lo['seconds']:.1f} | {lo['images_per_second']:.1f} |")
        print(
            f"| ray (local mode, incl. start/stop) | {ra['seconds']:.1f} | {ra['images_per_second']:.1f} |"
        )
        print(
            f"\nRay/local throughput ratio: {ra['images_per_second'] / lo['images_per_second']:.2f}\n"
        )
    if b:
        s = b["stats"]
        print(
            f"## build-index: {b['vectors']:,} synthetic 768-d vectors, --max-memory {b['budget']}\n"
        )
        print(
            f"- index: {s['kind']} `{s['factory']}`, nprobe {s['nprobe']}, trained on {s['train_vectors']:,}"
        )
        print(
            f"- build wall time {b['build_wall_s']:.1f} s (catalog {s['catalog_seconds']:.1f} s, "
            f"train {s['train_seconds']:.1f} s, add {s['add_seconds']:.1f} s); shards generated in {b['generate_s']:.1f} s"
        )
        print(
            f"- peak memory of the build process: heap (RssAnon) {b['peak_anon'] / 2**20:.0f} MiB; "
            f"resident incl. memory-mapped index files (VmHWM) {b['peak_rss'] / 2**20:.0f} MiB"
        )
        print(
            f"- recall@10 vs exact (200 queries): raw ANN {b['recall_raw']:.3f}; "
            f"as `wherein search` (4x over-fetch, exact re-score) {b['recall_rescored']:.3f}"
        )
        print(
            f"- query latency (1 query, k=10): raw {b['query_ms_raw']:.2f} ms; with re-score {b['query_ms_rescored']:.2f} ms"
        )
        print(
            "- files: "
            + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in sorted(b["files"].items()))
        )


if __name__ == "__main__":
    main()
