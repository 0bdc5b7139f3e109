"""Search latency (text encoding / ANN / catalog join) and the index choice's recall@10.

    python bench/bench_search.py                      # 10k and 1M, dim 768 (~10 min on 2 cores)
    python bench/bench_search.py --sizes 10000 --out /tmp/x.md

Vectors are synthetic and clustered (SigLIP embeddings are anisotropic, so
uniform random vectors would flatter nothing and mislead IVF): unit vectors
around --clusters random centres. For each size it builds the index that
``wherein.indexer.store.vectors.choose_index`` picks, measures recall@10 against
exact search for a sweep of nprobe, and times, per query: the ANN search
(k=10), the catalog join (exact re-scoring from the catalog's float32 vectors
plus the row fetch, on a real SQLite catalog of that size), and the full
``Searcher.search`` through the API. Text encoding is timed for the stand-in
tower and for the real SigLIP 2 B/16 text architecture (random weights: same
FLOPs; the real weights cannot be downloaded here).

    python bench/bench_search.py --cold --models DIR --index DIR [--runs 9]

times instead a cold ``wherein search`` (process start to printed hits) as a user
runs it: one first-use run (it writes the tokenizer index and the XNNPACK weight
cache beside the models if they are missing; --fresh deletes them first), then
--runs timed runs, each a new process. Wall time, the child's CPU time
(user+sys) and peak RSS per run; the load average says how busy the shared cores
were. Byte-code is compiled first, as a pip install does (this machine's
PYTHONDONTWRITEBYTECODE would otherwise recompile wherein on every start).
--before-rev REV also times the same command on the code of git revision REV (its
indexer/search/schemas put first on PYTHONPATH), run for run interleaved with the
current code, so both see the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import faiss
import numpy as np

from wherein.indexer.models.standins import build_standin_models
from wherein.indexer.store.catalog import Catalog
from wherein.indexer.store.index_store import CATALOG_FILE
from wherein.indexer.store.vectors import VectorIndex, apply_search_params, choose_index, new_index
from wherein.search.service.search import open_index


def clustered(n: int, dim: int, clusters: int, seed: int, spread: float = 0.9) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(0).standard_normal((clusters, dim), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    out = np.empty((n, dim), np.float32)
    for s in range(0, n, 65536):
        m = min(65536, n - s)
        x = centres[rng.integers(0, clusters, m)] + rng.standard_normal(
            (m, dim), dtype=np.float32
        ) * (spread / np.sqrt(dim))
        out[s : s + m] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def ms(f, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = f()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times), out


def write_catalog(directory: Path, data: np.ndarray, model_id: str, space: str) -> None:
    cat = Catalog(directory / CATALOG_FILE)
    now = datetime.now(UTC).isoformat()
    with cat.transaction():  # one transaction: one fsync
        for s in range(0, len(data), 10000):
            ids = range(s, min(s + 10000, len(data)))
            records = [
                {
                    "id": i + 1,
                    "path": f"/photos/{i // 1000:04d}/img_{i:07d}.jpg",
                    "size": 2_000_000 + i,
                    "mtime_ns": 1_700_000_000_000_000_000 + i,
                    "sha256": f"{i:064x}",
                    "width": 4032,
                    "height": 3024,
                    "format": "jpeg",
                    "indexed_at": now,
                    "model_id": model_id,
                }
                for i in ids
            ]
            cat.insert_images(records, data[s : s + len(ids)])
        for k, v in {
            "model_id": model_id,
            "space": space,
            "dim": data.shape[1],
            "generation": 1,
        }.items():
            cat.set_meta(k, v)
    cat.close()


def bench_size(n: int, dim: int, args, models: Path, work: Path) -> dict:
    faiss.omp_set_num_threads(2)  # build with every core
    print(f"[{n}] generating {n}x{dim} clustered vectors", file=sys.stderr)
    data = clustered(n, dim, args.clusters, seed=1)
    queries = clustered(args.queries, dim, args.clusters, seed=2)
    choice = choose_index(n, dim)
    t = time.perf_counter()
    index = new_index(choice, dim)
    if not index.is_trained:
        sample = data[np.random.default_rng(3).choice(n, min(n, choice.nlist * 64), replace=False)]
        index.train(sample)
    train_s = time.perf_counter() - t
    index.add_with_ids(data, np.arange(1, n + 1, dtype=np.int64))
    build_s = time.perf_counter() - t
    print(f"[{n}] built {choice.factory} in {build_s:.1f}s (train {train_s:.1f}s)", file=sys.stderr)
    exact = faiss.IndexFlatIP(dim)
    exact.add(data)
    _, truth = exact.search(queries, 10)
    truth += 1
    # One query at a time: OpenMP threads only contend (measured 2.2 ms at 1 thread vs
    # 25 ms at 2 on a busy 2-core machine for Flat 10k).
    faiss.omp_set_num_threads(args.search_threads)
    flat_ms, _ = ms(lambda: exact.search(queries[:1], 10), 5)

    def recall(nprobe: int) -> float:
        if nprobe:
            faiss.extract_index_ivf(index).nprobe = nprobe
        _, got = index.search(queries, 10)
        return float(np.mean([len(set(g) & set(t)) / 10 for g, t in zip(got, truth, strict=True)]))

    sweep = []
    if choice.nlist:
        for nprobe in sorted({max(1, choice.nlist // d) for d in (128, 64, 32, 16, 8)}):
            faiss.extract_index_ivf(index).nprobe = nprobe
            lat, _ = ms(lambda: index.search(queries[:1], 10), 9)
            sweep.append(
                {
                    "nprobe": nprobe,
                    "recall_at_10": round(recall(nprobe), 4),
                    "ann_ms": round(lat, 2),
                }
            )
    apply_search_params(index, choice)
    chosen_recall = recall(choice.nprobe)
    ann_ms, _ = ms(lambda: index.search(queries[:1], 10), 9)

    # A real index directory: catalog + the FAISS file, then the API end to end.
    d = work / f"index-{n}"
    d.mkdir()
    t = time.perf_counter()
    model_id = "bench:synthetic"
    space = json.loads((models / "STANDIN.json").read_text()).get("space", "standin")
    write_catalog(d, data, model_id, space)
    catalog_s = time.perf_counter() - t
    vi = VectorIndex(d)
    vi.index, vi.choice, vi.generation, vi.model_id, vi.dim = index, choice, 1, model_id, dim
    vi.save()
    exact = data = None  # free ~3 GB before the API run
    with open_index(d, models) as s:
        s.search("red", k=10)  # load the text tower, warm caches
        split = []
        for _ in range(args.repeat):
            s.search("red", k=10)
            split.append(dict(s.last_timings))
        med = {k: round(statistics.median(x[k] for x in split), 2) for k in split[0]}
        s.search("red", min_score=0.2)
        range_ms = round(s.last_timings["ann_ms"], 2)
        cat = s.store.catalog
        ids = [int(i) for i in truth[0][:10]]
        join_ms, _ = ms(lambda: (cat.vectors_for(ids * 4), cat.rows_by_ids(ids)), 9)
    return {
        "n": n,
        "dim": dim,
        "index": choice.as_dict(),
        "build_s": round(build_s, 1),
        "train_s": round(train_s, 1),
        "catalog_write_s": round(catalog_s, 1),
        "recall_at_10": round(chosen_recall, 4),
        "ann_ms": round(ann_ms, 2),
        "exact_flat_ms": round(flat_ms, 2),
        "nprobe_sweep": sweep,
        "catalog_join_ms": round(join_ms, 2),
        "api_search_ms": med,
        "range_search_all_lists_ms": range_ms,
    }


def bench_text(real: bool) -> dict:
    import torch

    out = {}
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        from wherein.indexer.models.text_tower import load_text_tower

        tower = load_text_tower(str(build_standin_models(Path(tmp) / "m")))
        out["standin_encode_ms"] = round(
            ms(lambda: tower.encode(["This is a photo of a red car."]), 9)[0], 2
        )
    if real:
        import open_clip

        t = time.perf_counter()
        model = open_clip.create_model("ViT-B-16-SigLIP2", pretrained=None, device="cpu")
        model.visual = None
        model.eval()
        out["siglip2_b16_text_load_s"] = round(time.perf_counter() - t, 1)
        tokens = torch.randint(2, 256000, (1, 64))
        with torch.inference_mode():
            model.encode_text(tokens, normalize=True)
            out["siglip2_b16_text_encode_ms"] = round(
                ms(lambda: model.encode_text(tokens, normalize=True), 5)[0], 1
            )
    return out


def _child_run(cmd: list[str], env: dict) -> dict:
    """Wall, CPU (user+sys) and peak RSS of one child process (wait4: its own rusage)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{stderr}")
    return {
        "wall_s": round(wall, 3),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
        "maxrss_mb": round(usage.ru_maxrss / 1024),
        "load_1m": round(os.getloadavg()[0], 2),
        "stderr": stderr,
    }


def _checkout(rev: str, into: Path) -> Path:
    """A folder whose wherein/ package is revision rev's (for PYTHONPATH)."""
    root = Path(__file__).resolve().parents[1]
    src = into / "src"
    src.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(root), "archive", rev, "indexer", "search", "schemas"],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    (into / "wherein").mkdir()
    for package in ("indexer", "search", "schemas"):
        (into / "wherein" / package).symlink_to(src / package)
    return into


def _summary(runs: list[dict]) -> dict:
    walls = [r["wall_s"] for r in runs]
    cpus = [r["cpu_s"] for r in runs]
    return {
        "wall_s": {"median": statistics.median(walls), "min": min(walls), "max": max(walls)},
        "cpu_s": {"median": statistics.median(cpus), "min": min(cpus), "max": max(cpus)},
    }


def bench_cold(args) -> dict:
    """A cold `wherein search` per run; see the module docstring."""
    import compileall

    root = Path(__file__).resolve().parents[1]
    for package in ("indexer", "search", "schemas"):
        compileall.compile_dir(root / package, quiet=1)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    wherein = Path(sys.executable).with_name("wherein")
    cmd = [str(wherein), "search", args.query, "--models", str(args.models)]
    cmd += ["--index", str(args.index), "-k", "10"]
    text_dir = args.models / "siglip2-text"
    if args.fresh:
        for p in [*text_dir.glob("*.bpe-index"), *text_dir.glob("*.xnnpack-cache")]:
            p.unlink()
    floor = [_child_run([sys.executable, "-c", "pass"], env) for _ in range(3)]
    first = _child_run(cmd, env)
    with tempfile.TemporaryDirectory() as tmp:
        before_env = None
        if args.before_rev:
            before_env = dict(env, PYTHONPATH=str(_checkout(args.before_rev, Path(tmp))))
            _child_run(cmd, before_env)  # writes its byte-code
        runs, before = [], []
        for _ in range(args.runs):
            runs.append(_child_run(cmd, env))
            if before_env:
                before.append(_child_run(cmd, before_env))
    if any(r["stderr"].strip() for r in runs):
        print(
            "stderr of a run:\n" + next(r["stderr"] for r in runs if r["stderr"]), file=sys.stderr
        )
    for r in [first, *runs, *before, *floor]:
        r.pop("stderr")
    out = {
        "command": "python " + " ".join(sys.argv),
        "search": " ".join(cmd),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores shared with other jobs",
        "caches_beside_models": sorted(
            p.name for p in text_dir.iterdir() if p.suffix in (".bpe-index", ".xnnpack-cache")
        ),
        "python_startup_wall_s": statistics.median(r["wall_s"] for r in floor),
        "first_use": first,
        **_summary(runs),
        "runs": runs,
    }
    if before:
        out["before"] = {"rev": args.before_rev, **_summary(before), "runs": before}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cold", action="store_true", help="Time cold `wherein search` processes.")
    ap.add_argument("--models", type=Path, help="--cold: the models folder.")
    ap.add_argument("--index", type=Path, help="--cold: an index built with those models.")
    ap.add_argument("--query", default="a red car", help="--cold: the query.")
    ap.add_argument("--runs", type=int, default=9, help="--cold: timed runs.")
    ap.add_argument(
        "--fresh", action="store_true", help="--cold: delete the caches first (time first use)."
    )
    ap.add_argument("--before-rev", help="--cold: also time git revision REV, interleaved.")
    ap.add_argument("--sizes", default="10000,1000000")
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--clusters", type=int, default=2000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument(
        "--search-threads", type=int, default=1, help="FAISS OpenMP threads while timing queries."
    )
    ap.add_argument(
        "--no-real-text", action="store_true", help="Skip the SigLIP 2 text architecture timing."
    )
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "search.json")
    args = ap.parse_args()
    if args.cold:
        if not (args.models and args.index):
            ap.error("--cold needs --models and --index")
        cold = bench_cold(args)
        print(json.dumps(cold, indent=2))
        out = args.out
        if out == ap.get_default("out"):  # keep the ANN run's figures
            out = out.with_name("search_cold.json")
        out.write_text(json.dumps(cold, indent=2) + "\n")
        print(out, file=sys.stderr)
        return
    results = {
        "command": "python " + " ".join(sys.argv),
        "machine": f"{platform.machine()}, 2 shared cores, faiss {faiss.__version__}, "
        f"{args.search_threads} FAISS thread(s) while timing queries",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "text": bench_text(not args.no_real_text),
        "sizes": [],
    }
    print(json.dumps(results["text"]), file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        models = build_standin_models(Path(tmp) / "models")
        for n in (int(s) for s in args.sizes.split(",")):
            r = bench_size(n, args.dim, args, models, Path(tmp))
            print(json.dumps(r), file=sys.stderr)
            results["sizes"].append(r)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(args.out)


if __name__ == "__main__":
    main()
