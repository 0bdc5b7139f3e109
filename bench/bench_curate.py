"""Time `dupes` and `unique` on a synthetic index (random unit vectors + planted near-copies).

    /work/venv/bin/python bench/bench_curate.py --n 20000

Writes catalog rows and vectors directly (no images, no models), so it measures
only the curation code: FAISS range search / k-NN over the index, union-find,
catalog joins. Planted copies are v + noise at cosine ~0.98: all must be found.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from wherein.indexer.store.index_store import IndexStore
from wherein.search.curate.dupes import find_duplicates
from wherein.search.curate.unique import uniqueness


def build(d: Path, n: int, copies: int, dim: int = 768) -> None:
    rng = np.random.default_rng(0)
    base = rng.standard_normal((n - copies, dim)).astype(np.float32)
    src = rng.choice(n - copies, copies, replace=False)
    noisy = base[src] / np.linalg.norm(base[src], axis=1, keepdims=True)
    noisy = noisy + rng.standard_normal(noisy.shape).astype(np.float32) * (0.2 / np.sqrt(dim))
    vecs = np.concatenate([base, noisy])
    with IndexStore.open(d, write=True, create=True) as store:
        cat = store.catalog
        with cat.transaction():
            for key, value in (
                ("model_id", "bench"),
                ("space", "siglip2-vit-b16-webli"),
                ("dim", dim),
            ):
                cat.set_meta(key, value)
            for i, v in enumerate(vecs):
                cat.insert_image(
                    {
                        "path": f"/bench/{i}.jpg",
                        "size": 1000 + i,
                        "mtime_ns": i,
                        "sha256": f"{i:064x}",
                        "width": 100,
                        "height": 100,
                        "format": "jpg",
                        "indexed_at": "2026-01-01",
                        "model_id": "bench",
                    },
                    v,
                )
            cat.bump_generation()
        store.ensure_vectors()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--copies", type=int, default=200)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        build(d, args.n, args.copies)
        with IndexStore.open(d) as store:
            store.ensure_vectors(persist=False)
            t = time.perf_counter()
            rep = find_duplicates(store)
            t_dupes = time.perf_counter() - t
            t = time.perf_counter()
            ids, u, k = uniqueness(store, 10)
            t_unique = time.perf_counter() - t
        print(f"n={args.n} index={store.vectors.choice.kind} planted={args.copies}")
        print(
            f"dupes: {rep.groups} groups, {rep.redundant} redundant, {t_dupes:.2f} s "
            f"({args.n / t_dupes:.0f} vectors/s)"
        )
        print(f"unique k={k}: {t_unique:.2f} s ({args.n / t_unique:.0f} vectors/s)")


if __name__ == "__main__":
    main()
