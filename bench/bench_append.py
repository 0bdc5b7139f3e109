"""build-index --append: time against a full rebuild, and the recall check against true recall.

    python bench/bench_append.py --base 200000 --append 50000 > bench/results/append.md

Synthetic clustered unit vectors (768-d, 1,000 clusters) written as embed shards:
1. build the base index from BASE vectors;
2. append APPEND more vectors of the same distribution (the quantizer should be kept),
   and, for comparison, build base + appended into a new index from scratch;
3. append APPEND vectors clustered around new centres orthogonal to the old ones (a new
   domain: the quantizer should be retrained).
After each append: the recall check's figure (recall_check.py: 200 appended vectors as
queries, the index at its nprobe against the same index probing every list) and the
true raw recall@10 of the IVF index for 200 appended vectors against exact float search
over every vector.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DIM = 768
SHARD = 25_000


def write_dir(out: Path, vecs: np.ndarray, prefix: str) -> None:
    """An embed directory holding ``vecs`` (uris /synthetic/PREFIX/N.jpg)."""
    from wherein.indexer.scale import shards as S

    plan = S.Plan(out, SHARD, len(vecs), "bench:synthetic", "bench", DIM, [prefix])
    S.write_vectors(plan, vecs, [f"/synthetic/{prefix}/{j}.jpg" for j in range(1, len(vecs) + 1)])


def clustered(rng, centres: np.ndarray, n: int) -> np.ndarray:
    v = centres[rng.integers(0, len(centres), n)] + 0.6 * rng.normal(size=(n, DIM))
    v = v.astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def true_recall(index_dir: Path, all_vecs: np.ndarray, queries: np.ndarray) -> float:
    """Raw IVF recall@10 against exact search over every vector (ids = row + 1)."""
    from wherein.indexer.store.index_store import IndexStore

    exact = np.argsort(-(queries @ all_vecs.T), axis=1)[:, :10] + 1
    with IndexStore.open(index_dir) as store:
        _, got = store.vectors.search(queries, 10)
    return float(np.mean([len(set(g) & set(e)) / 10 for g, e in zip(got, exact, strict=True)]))


def run(base: int, append: int) -> dict:
    from wherein.indexer.scale.build_index import build_index

    rng = np.random.default_rng(0)
    centres = rng.normal(size=(1000, DIM)).astype(np.float32)
    centres[:, DIM // 2 :] = 0  # the base lives in the first half of the dimensions
    a_vecs = clustered(rng, centres, base)
    b_vecs = clustered(rng, centres, append)
    # A new domain: clusters of their own, in the dimensions the base centres leave empty.
    new_centres = rng.normal(size=(1000, DIM)).astype(np.float32)
    new_centres[:, : DIM // 2] = 0
    far = clustered(rng, new_centres, append)
    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-append-") as d:
        tmp = Path(d)
        write_dir(tmp / "a", a_vecs, "a")
        write_dir(tmp / "b", b_vecs, "b")
        write_dir(tmp / "c", far, "c")
        idx = tmp / "idx"
        t = time.perf_counter()
        out["base"] = vars(build_index([tmp / "a"], idx))
        out["base"]["wall"] = time.perf_counter() - t

        t = time.perf_counter()
        out["same"] = vars(build_index([tmp / "b"], idx, append=True))
        out["same"]["wall"] = time.perf_counter() - t
        both = np.concatenate([a_vecs, b_vecs])  # ids: a 1..base, b base+1..
        q = b_vecs[rng.choice(append, 200, replace=False)]
        out["same"]["true_recall"] = true_recall(idx, both, q)

        t = time.perf_counter()
        out["rebuild"] = vars(build_index([tmp / "a", tmp / "b"], tmp / "idx-full"))
        out["rebuild"]["wall"] = time.perf_counter() - t
        out["rebuild"]["true_recall"] = true_recall(tmp / "idx-full", both, q)
        shutil.rmtree(tmp / "idx-full")

        q = far[rng.choice(append, 200, replace=False)]
        everything = np.concatenate([both, far])
        shutil.copytree(idx, tmp / "idx-kept")  # the same append, the quantizer never retrained
        t = time.perf_counter()
        kept = build_index([tmp / "c"], tmp / "idx-kept", append=True, recall_target=0)
        out["far_kept"] = {**vars(kept), "wall": time.perf_counter() - t}
        out["far_kept"]["true_recall"] = true_recall(tmp / "idx-kept", everything, q)
        shutil.rmtree(tmp / "idx-kept")
        t = time.perf_counter()
        out["far"] = vars(build_index([tmp / "c"], idx, append=True))
        out["far"]["wall"] = time.perf_counter() - t
        out["far"]["true_recall"] = true_recall(idx, everything, q)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", type=int, default=200_000)
    ap.add_argument("--append", type=int, default=50_000)
    args = ap.parse_args()
    r = run(args.base, args.append)
    print("# build-index --append\n")
    print(f"Command: `python bench/bench_append.py {' '.join(sys.argv[1:])}` (2-core VM, shared)\n")
    b = r["base"]
    print(
        f"Base: {args.base:,} clustered synthetic 768-d vectors -> {b['kind']} `{b['factory']}`, "
        f"nprobe {b['nprobe']}, built in {b['wall']:.1f} s (catalog {b['catalog_seconds']:.1f} s, "
        f"train {b['train_seconds']:.1f} s, add {b['add_seconds']:.1f} s).\n"
    )
    print(
        "| step | vectors after | wall s | catalog s | train s | add s | quantizer | "
        "recall check (est.) | true raw recall@10 |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    rows = [
        (f"append {args.append:,}, same distribution", r["same"]),
        (f"full rebuild of base + those {args.append:,}", r["rebuild"]),
        (f"append {args.append:,} of a new domain, quantizer kept (target 0)", r["far_kept"]),
        (f"append {args.append:,} of a new domain (centres orthogonal to the old)", r["far"]),
    ]
    for name, s in rows:
        est = s.get("recall")
        est_txt = f"{est['recall_at_10']:.3f}" if est else "-"
        after = s.get("recall_after_retrain")
        if after:
            est_txt += f" -> {after['recall_at_10']:.3f} after retrain"
        print(
            f"| {name} | {s['vectors']:,} | {s['wall']:.1f} | {s['catalog_seconds']:.1f} | "
            f"{s['train_seconds']:.1f} | {s['add_seconds']:.1f} | {s['quantizer'] or '-'} | "
            f"{est_txt} | {s['true_recall']:.3f} |"
        )
    print(
        "\nNotes: the recall check compares, for 200 appended vectors, the index at its nprobe "
        "with the same index probing every list (recall_check.py); the true figure is raw IVF "
        "recall@10 for 200 appended vectors against exact float search over every vector. "
        "`wherein search` re-scores a 4x over-fetch on top of the raw figure. The target is 0.90."
    )


if __name__ == "__main__":
    main()
