"""Indexing speed: JPEG draft decoding vs full decoding, and end-to-end images/s.

    python bench/bench_index.py [--photos 48] [--tower PATH.tflite] [--out bench/results/index.md]

Synthetic camera-size photos (4032x3024 JPEG: gradients, shapes, sensor-like noise)
are written to a temporary folder. Reported:
  1. decode + preprocess ms/image, full decode vs Image.draft, and how far the
     model input moves (max / mean abs difference of the [3,224,224] tensor,
     whose range is [-1, 1]);
  2. end-to-end `Indexer` images/s with the stand-in tower (pipeline overhead:
     walk, hash, decode, SQLite, FAISS) and, with --tower, a full-size tower.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter


def make_photos(root: Path, n: int) -> list[Path]:
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    w, h = 4032, 3024
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    for i in range(n):
        base = np.stack(
            [
                (xx / w) * 255 * rng.random(),
                (yy / h) * 255 * rng.random(),
                np.full_like(xx, 255 * rng.random()),
            ],
            axis=-1,
        )
        img = Image.fromarray(base.astype(np.uint8))
        d = ImageDraw.Draw(img)
        for _ in range(6):
            x0, y0 = rng.integers(0, w - 800), rng.integers(0, h - 800)
            d.ellipse(
                [x0, y0, x0 + rng.integers(200, 800), y0 + rng.integers(200, 800)],
                fill=tuple(int(c) for c in rng.integers(0, 256, 3)),
            )
        img = img.filter(ImageFilter.GaussianBlur(2))
        arr = np.asarray(img).astype(np.int16) + rng.normal(0, 6, (h, w, 3)).astype(np.int16)
        p = root / f"photo_{i:03d}.jpg"
        Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).save(p, quality=90)
        paths.append(p)
    return paths


def decode_bench(paths: list[Path]) -> dict:
    from wherein.indexer.imaging import decode, siglip_input

    full_ms, draft_ms, max_diff, mean_diff = [], [], [], []
    for p in paths:
        data = p.read_bytes()
        t = time.perf_counter()
        a = siglip_input(decode(data)[0])
        full_ms.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        b = siglip_input(decode(data, draft_size=224)[0])
        draft_ms.append((time.perf_counter() - t) * 1000)
        max_diff.append(float(np.abs(a - b).max()))
        mean_diff.append(float(np.abs(a - b).mean()))
    return {
        "full_ms": statistics.median(full_ms),
        "draft_ms": statistics.median(draft_ms),
        "max_abs_diff": max(max_diff),
        "mean_abs_diff": statistics.mean(mean_diff),
    }


def index_bench(
    paths_root: Path, models: Path, tower_path: Path | None, workers: int | None
) -> dict:
    from wherein.indexer.ingest.run import Indexer
    from wherein.indexer.models.image_tower import ImageTower
    from wherein.indexer.models.modeldir import ModelDir
    from wherein.indexer.store.index_store import IndexStore

    md = ModelDir(models)
    tower = ImageTower(tower_path, "bench") if tower_path else ImageTower.from_models(md)
    with (
        tempfile.TemporaryDirectory() as idx,
        IndexStore.open(idx, write=True, create=True) as store,
    ):
        t = time.perf_counter()
        stats = Indexer(store, tower, workers=workers).run([paths_root])
        secs = time.perf_counter() - t
    return {
        "images": stats.embedded,
        "seconds": secs,
        "images_per_s": stats.embedded / secs,
        "batch": tower.batch_size,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--photos", type=int, default=48)
    ap.add_argument("--tower", type=Path, default=None, help="a full-size image tower .tflite")
    ap.add_argument("--out", type=Path, default=Path("bench/results/index.md"))
    args = ap.parse_args()
    from wherein.indexer.models.standins import build_standin_models

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t = time.perf_counter()
        photos = make_photos(tmp / "photos", args.photos)
        print(f"made {len(photos)} photos in {time.perf_counter() - t:.1f}s", file=sys.stderr)
        models = build_standin_models(tmp / "models")
        dec = decode_bench(photos)
        runs = {w: index_bench(tmp / "photos", models, None, w) for w in (1, 2, 4)}
        full = index_bench(tmp / "photos", models, args.tower, 4) if args.tower else None

    lines = [
        "# Indexing benchmark",
        "",
        f"Command: `python bench/bench_index.py --photos {args.photos}"
        + (f" --tower {args.tower}" if args.tower else "")
        + "`",
        f"Machine: {platform.machine()}, {__import__('os').cpu_count()} cores, Python {platform.python_version()}",
        "",
        f"## Decode + preprocess, {args.photos} synthetic 4032x3024 JPEGs (median ms/image)",
        "",
        "| path | ms/image |",
        "|---|---|",
        f"| full decode + bicubic squash to 224 | {dec['full_ms']:.1f} |",
        f"| `Image.draft` (libjpeg DCT scaling) + squash | {dec['draft_ms']:.1f} |",
        f"| speed-up | {dec['full_ms'] / dec['draft_ms']:.1f}x |",
        "",
        f"Model input difference draft vs full (tensor range [-1, 1]): max {dec['max_abs_diff']:.4f}, "
        f"mean {dec['mean_abs_diff']:.5f}.",
        "",
        "## End to end (`Indexer.run`, stand-in tower: measures the pipeline, not the model)",
        "",
        "| decode workers | images/s |",
        "|---|---|",
    ]
    lines += [f"| {w} | {r['images_per_s']:.1f} |" for w, r in runs.items()]
    if full:
        lines += [
            "",
            f"Full-size tower {args.tower} (batch {full['batch']}): {full['images_per_s']:.2f} images/s",
        ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
