"""Scale-out figures: embed throughput (local engine vs Ray local mode) and a sharded index build.

    python bench/bench_scale.py --images 0 --vectors 1000000 --budget 2G >> bench/results/scale.md

Run by hand (minutes to hours), never in CI. Work files go under --tmp
(/tmp/wherein-bench-10m by default) and are deleted at the end.

1. Embed: N synthetic 256x192 JPEGs through the stand-in tower with both engines
   (identical shards); images/s and the Ray/local ratio (Ray's start-up included and
   excluded). --images 0 skips it.
2. Build: V synthetic clustered unit vectors, 768-d (bench/synth_vectors.py), fed to
   `build-index --max-memory BUDGET` run in a child process: either as parquet embed
   shards written first (--feed shards, 3 KB/vector of disk) or, by default, as shards
   that regenerate their rows on every read (--feed direct: the same EmbedSet interface,
   no disk; the generation time is inside the build's time). Measured in the child:
   wall time, peak heap (RssAnon, sampled) and VmHWM.
3. Search on the result: recall@10 against exact search (float32 brute force over the
   regenerated vectors, chunk by chunk) of the raw IVF top 10, of search/searcher.py's
   Searcher.search (4x over-fetch re-scored from vectors.f16), and of the same
   candidates re-scored with float32; warm latency of Searcher.search (median, p95);
   for the index's nprobe and a sweep around it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from synth_vectors import Synth  # noqa: E402


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


def write_vector_shards(out: Path, synth: Synth, model_id: str) -> None:
    """The synthetic vectors as embed shards + manifest, the way `wherein embed` writes them."""
    import pyarrow as pa

    from wherein.indexer.scale import shards as S

    plan = S.Plan(out, synth.chunk, synth.n, model_id, "bench", synth.dim, ["synthetic"])
    (out / S.SHARD_DIR).mkdir(parents=True, exist_ok=True)
    for i in range(plan.shards):
        parquet, errs, done = S.shard_paths(out, i)
        S.write_parquet_atomic(S.error_schema().empty_table(), errs)
        S.write_parquet_atomic(_shard_table(synth, i), parquet)
        done.write_text(json.dumps({"rows": plan.shard_count(i), "errors": 0}))
    S.write_manifest(plan)
    del pa


def _shard_table(synth: Synth, c: int, lo: int = 0, hi: int | None = None):
    import pyarrow as pa

    from wherein.indexer.scale import shards as S

    ids, v = synth.rows(c)
    ids, v = ids[lo:hi], v[lo:hi]
    k = len(ids)
    return pa.table(
        {
            "id": ids,
            "uri": [f"/synthetic/{j:09d}.jpg" for j in ids],
            "size": np.zeros(k, np.int64),
            "mtime_ns": np.zeros(k, np.int64),
            "sha256": [""] * k,
            "width": np.zeros(k, np.int32),
            "height": np.zeros(k, np.int32),
            "embedding": pa.FixedSizeListArray.from_arrays(pa.array(v.reshape(-1)), synth.dim),
        },
        schema=S.shard_schema(synth.dim),
    )


def synthetic_set(synth: Synth, model_id: str, root: Path):
    """An EmbedSet whose shards regenerate their rows on every read (nothing on disk): what
    build-index sees from `--feed direct`. Same batches, columns and ids as the shards
    write_vector_shards writes; only parquet decoding is skipped."""
    from wherein.indexer.scale.embed_set import READ_ROWS, EmbedSet, ShardRef

    class SynthShard(ShardRef):
        def batches(self, columns: list[str] | None = None):
            c = self.entry["shard"]
            k = self.entry["count"]
            t = _shard_table(synth, c)
            for lo in range(0, k, READ_ROWS):
                part = t.slice(lo, READ_ROWS)
                yield part.select(columns) if columns else part

        def errors(self) -> dict[str, list]:
            return {"id": [], "uri": [], "reason": [], "size": [], "mtime_ns": []}

    counts = [min(synth.chunk, synth.n - c * synth.chunk) for c in range(synth.chunks)]
    entries = [
        {"shard": c, "file": f"synthetic-{c:05d}", "count": k, "errors": 0, "errors_file": ""}
        for c, k in enumerate(counts)
    ]
    manifest = {
        "count": synth.n,
        "errors": 0,
        "items": synth.n,
        "shard_size": synth.chunk,
        "shards": entries,
    }
    refs = [SynthShard(root, e, 0, 0.0, 0) for e in entries]
    return EmbedSet([root], [manifest], refs, model_id, "bench", synth.dim, None, synth.n)


def exact_pass(synth: Synth, queries: np.ndarray, cands: np.ndarray):
    """One regeneration of every vector (float32): the exact top 10 by brute force, chunk by
    chunk, and the float32 scores of each query's candidates (for float32 re-scoring)."""
    nq = len(queries)
    best_s = np.full((nq, 10), -np.inf, np.float32)
    best_i = np.zeros((nq, 10), np.int64)
    cand_s = np.full(cands.shape, -np.inf, np.float32)
    for c in range(synth.chunks):
        ids, v = synth.rows(c)
        scores = queries @ v.T
        s = np.concatenate([best_s, scores], axis=1)
        i = np.concatenate([best_i, np.broadcast_to(ids, (nq, len(ids)))], axis=1)
        top = np.argpartition(-s, 10, axis=1)[:, :10]
        best_s, best_i = np.take_along_axis(s, top, 1), np.take_along_axis(i, top, 1)
        inside = (cands >= ids[0]) & (cands <= ids[-1])
        qi, ci = np.nonzero(inside)
        cand_s[qi, ci] = np.einsum("ij,ij->i", queries[qi], v[cands[qi, ci] - ids[0]])
    return best_i, cand_s


# The build's own memory, from inside the child: VmHWM (peak resident set, including the
# file-backed pages of the memory-mapped .ivfdata and block files, which the kernel can drop)
# and the peak of RssAnon (the heap: what a memory budget is about), sampled every 20 ms.
# ru_maxrss is no good here: Linux carries it across exec, so the child would report this
# process's peak, which holds the generated vectors.
_CHILD = """import json, os, sys, threading, time
from pathlib import Path
def status(key):
    return int(next(l for l in open('/proc/self/status') if l.startswith(key)).split()[1]) * 1024
peak = [0]
def sample():
    while True:
        peak[0] = max(peak[0], status('RssAnon:'))
        time.sleep(0.02)
threading.Thread(target=sample, daemon=True).start()
feed = json.loads(os.environ['BENCH_SCALE_FEED'])
if feed:
    sys.path.insert(0, feed['bench'])
    from bench_scale import synthetic_set
    from synth_vectors import Synth
    from wherein.indexer.scale import build_index as B
    synth = Synth(feed['n'], chunk=feed['chunk'])
    B.open_set = lambda dirs, first_id=1: synthetic_set(synth, feed['model_id'], Path(dirs[0]))
from wherein.search.cli import cli
try:
    cli()
finally:
    print('peak_rss', status('VmHWM:'), max(peak[0], status('RssAnon:')), file=sys.stderr)
"""


def bench_build(tmp: Path, n: int, budget: str, shard: int, feed: str, nq: int) -> dict:
    from wherein.indexer.models.modeldir import ModelDir
    from wherein.indexer.normalize import unit_rows
    from wherein.indexer.store.index_store import IndexStore
    from wherein.indexer.store.vectors import apply_search_params
    from wherein.search.searcher import QueryVectors, Searcher

    synth = Synth(n, chunk=shard)
    model_id = "bench:synthetic"
    emb, idx = tmp / "vec-emb", tmp / "vec-idx"
    emb.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    if feed == "shards":
        write_vector_shards(emb, synth, model_id)
    gen_s = time.perf_counter() - t
    env = dict(os.environ, BENCH_SCALE_FEED="null")
    if feed == "direct":
        spec = {"bench": str(Path(__file__).parent), "n": n, "chunk": shard, "model_id": model_id}
        env["BENCH_SCALE_FEED"] = json.dumps(spec)
    argv = ["build-index", str(emb), "--index", str(idx), "--max-memory", budget, "--json", "-q"]
    t = time.perf_counter()
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, *argv], capture_output=True, text=True, env=env
    )
    wall = time.perf_counter() - t
    if child.returncode:
        raise SystemExit(child.stderr)
    peak, peak_anon = (int(x) for x in child.stderr.strip().splitlines()[-1].split()[1:])
    stats = json.loads(child.stdout[child.stdout.index("{\n") :])
    sizes = {p.name: p.stat().st_size for p in idx.iterdir() if p.is_file()}
    if feed == "shards":
        shutil.rmtree(emb)  # the shards are not needed past the build: free the disk

    kind, queries = synth.queries(nq)
    store = IndexStore.open(idx)
    searcher = Searcher(store, ModelDir(tmp / "no-models"))
    current = [np.zeros(synth.dim, np.float32)]
    # The query's vector as the towers would give it: their cost is not timed here.
    searcher.embed_query = lambda _q: QueryVectors(current[0], None)  # type: ignore[method-assign]
    built = store.vectors.choice
    assert built is not None
    sweep = sorted({max(1, built.nprobe // 4), max(1, built.nprobe // 2), built.nprobe})
    sweep += [built.nprobe * 2] if built.nprobe * 2 <= built.nlist else []
    runs = []
    for nprobe in sweep if built.nprobe else [0]:
        choice = dataclasses.replace(built, nprobe=nprobe)
        store.vectors.choice = choice
        apply_search_params(store.vectors.index, choice)
        timings, api_ids = [], []
        for rnd in range(2):  # round 0 warms the caches (FAISS lists, vectors.f16 pages)
            api_ids = []
            for q in queries:
                current[0] = q
                t = time.perf_counter()
                hits = searcher.search("synthetic", k=10, check_exists=False)
                if rnd:
                    timings.append((time.perf_counter() - t) * 1e3)
                api_ids.append([h.id for h in hits])
        index = store.vectors.index
        raw_ms = []
        for q in queries[:100]:
            t = time.perf_counter()
            index.search(q[None], 40)
            raw_ms.append((time.perf_counter() - t) * 1e3)
        _, raw40 = index.search(queries, 40)  # the candidates search over-fetches (4 x k)
        f16_ids = []
        for q, c in zip(queries, raw40, strict=True):  # as Searcher._join: unit rows, ties by id
            ids, v = store.catalog.vectors_for(c[c >= 0])
            f16_ids.append(ids[np.lexsort((ids, -(unit_rows(v) @ q)))[:10]])
        same = np.mean([list(a) == list(b) for a, b in zip(api_ids, f16_ids, strict=True)])
        runs.append(
            {
                "nprobe": nprobe,
                "query_ms_api": timings,
                "query_ms_raw": raw_ms,
                "api_equals_f16_rescore": float(same),
                "raw40": raw40,
                "api_ids": api_ids,
            }
        )
    searcher.close()
    t = time.perf_counter()
    exact, cand_s = exact_pass(synth, queries, np.concatenate([r["raw40"] for r in runs], axis=1))
    exact_s = time.perf_counter() - t

    def recall(found, which=None):
        r = np.array([len(set(f) & set(e)) / 10 for f, e in zip(found, exact, strict=True)])
        return float(r.mean() if which is None else r[kind == which].mean())

    for k, r in enumerate(runs):
        raw40, scores = r.pop("raw40"), cand_s[:, k * 40 : (k + 1) * 40]
        f32_ids = [c[np.argsort(-s)[:10]] for c, s in zip(raw40, scores, strict=True)]
        for name, found in (("raw", raw40[:, :10]), ("f16", r.pop("api_ids")), ("f32", f32_ids)):
            r[f"recall_{name}"] = recall(found)
            r[f"recall_{name}_item"] = recall(found, 0)
            r[f"recall_{name}_concept"] = recall(found, 1)
    return {
        "vectors": n,
        "budget": budget,
        "feed": feed,
        "queries": nq,
        "generate_s": gen_s,
        "build_wall_s": wall,
        "peak_rss": peak,
        "peak_anon": peak_anon,
        "stats": stats,
        "exact_pass_s": exact_s,
        "files": sizes,
        "runs": runs,
    }


def _pct(xs: list[float], p: float) -> float:
    return float(np.percentile(np.array(xs), p))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=400)
    ap.add_argument("--vectors", type=int, default=1_000_000)
    ap.add_argument("--budget", default="1G")
    ap.add_argument("--shard", type=int, default=50_000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument(
        "--feed",
        choices=["direct", "shards"],
        default="direct",
        help="direct: build-index reads shards that regenerate their rows (no disk); "
        "shards: parquet embed shards written first (4 bytes x 768 per vector on disk)",
    )
    ap.add_argument("--tmp", default="/tmp/wherein-bench-10m", help="work dir (index, shards)")
    ap.add_argument("--json-out", default=None, help="also write the raw figures here")
    ap.add_argument("--models", default=None, help="models dir [stand-ins built in a temp dir]")
    args = ap.parse_args()
    Path(args.tmp).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-scale-", dir=args.tmp) as d:
        tmp = Path(d)
        e = None
        if args.images:
            models = Path(args.models) if args.models else None
            if models is None:
                from wherein.indexer.models.standins import build_standin_models

                models = build_standin_models(tmp / "models")
            e = bench_embed(tmp, args.images, models)
        b = None
        if args.vectors:
            b = bench_build(tmp, args.vectors, args.budget, args.shard, args.feed, args.queries)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"embed": e, "build": b}, indent=1))
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
        _print_build(b)


def _print_build(b: dict) -> None:
    s = b["stats"]
    feed = (
        "rows regenerated on each read, nothing on disk"
        if b["feed"] == "direct"
        else f"parquet embed shards written first in {b['generate_s']:.1f} s"
    )
    print(f"## build-index: {b['vectors']:,} synthetic 768-d vectors, --max-memory {b['budget']}\n")
    print(f"- input: `--feed {b['feed']}` ({feed}); vectors from bench/synth_vectors.py")
    print(
        f"- index: {s['kind']} `{s['factory']}`, nprobe {s['nprobe']}, trained on {s['train_vectors']:,}"
    )
    print(
        f"- build wall time {b['build_wall_s']:.1f} s (catalog + vectors.f16 {s['catalog_seconds']:.1f} s, "
        f"train {s['train_seconds']:.1f} s, add {s['add_seconds']:.1f} s)"
    )
    print(
        f"- peak memory of the build process: heap (RssAnon) {b['peak_anon'] / 2**20:.0f} MiB; "
        f"resident incl. memory-mapped files (VmHWM) {b['peak_rss'] / 2**20:.0f} MiB"
    )
    built = next((r for r in b["runs"] if r["nprobe"] == s["nprobe"]), b["runs"][-1])
    api = built["query_ms_api"]
    print(
        f"- recall@10 vs exact float32 brute force ({b['queries']} queries: half near an item, "
        f"half near a concept centre), at the index's nprobe {built['nprobe']}:\n"
    )
    print("| ranking | all | near item | near concept |\n|---|---|---|---|")
    for key, label in (
        ("raw", "raw IVF-SQ8 top 10"),
        ("f16", "search API: 4x over-fetch, re-scored from vectors.f16"),
        ("f32", "same candidates re-scored with float32"),
    ):
        print(
            f"| {label} | {built[f'recall_{key}']:.4f} | {built[f'recall_{key}_item']:.4f} | "
            f"{built[f'recall_{key}_concept']:.4f} |"
        )
    print(
        f"\n- warm query latency through search/searcher.py Searcher.search (k=10, query vector given, "
        f"{len(api)} queries): median {_pct(api, 50):.1f} ms, p95 {_pct(api, 95):.1f} ms"
    )
    print(
        "- queries whose API hits equal a float16 re-score of the same 40 raw candidates: "
        f"{built['api_equals_f16_rescore']:.0%}"
    )
    print("\nnprobe sweep (same index, search-time setting):\n")
    print(
        "| nprobe | recall raw | recall f16 re-score | recall f32 re-score | "
        "API median ms | API p95 ms | raw search(40) median ms |\n|---|---|---|---|---|---|---|"
    )
    for r in b["runs"]:
        print(
            f"| {r['nprobe']} | {r['recall_raw']:.4f} | {r['recall_f16']:.4f} | "
            f"{r['recall_f32']:.4f} | {_pct(r['query_ms_api'], 50):.1f} | "
            f"{_pct(r['query_ms_api'], 95):.1f} | {_pct(r['query_ms_raw'], 50):.1f} |"
        )
    print(f"- exact ground truth pass (regenerate + brute force): {b['exact_pass_s']:.0f} s")
    print(
        "- files: " + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in sorted(b["files"].items()))
    )


if __name__ == "__main__":
    main()
