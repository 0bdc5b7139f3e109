"""Time the mask label writers (COCO, YOLO, PNG masks) and the EXIF metadata pass.

    .venv/bin/python bench/bench_labels_exif.py --images 40 --megapixels 12 --photos 2000

Labels: smooth blob masks at the given size (the shape a bilinear-upsampled CLIPSeg mask
has), written through encode_piece + LabelWriter per format; reports ms per image for the
encode step (what a shard worker does) and the whole export. EXIF: JPEGs with camera, date
and GPS written by Pillow, read back with read_photo_meta (headers only), one thread and
the thread pool fill_photos uses.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from wherein.indexer.photometa import read_photo_meta
from wherein.search.export.labels import (
    Instance,
    LabelledImage,
    LabelWriter,
    encode_piece,
)


def blob_mask(w: int, h: int, seed: int) -> np.ndarray:
    """A few overlapping ellipses, blurred and thresholded: curved, staircase-free outlines."""
    rng = np.random.default_rng(seed)
    small = Image.new("L", (w // 8, h // 8), 0)
    d = ImageDraw.Draw(small)
    for _ in range(3):
        cx, cy = rng.uniform(0.2, 0.8) * small.width, rng.uniform(0.2, 0.8) * small.height
        rx, ry = rng.uniform(0.05, 0.25) * small.width, rng.uniform(0.05, 0.25) * small.height
        d.ellipse((cx - rx, cy - ry, cx + rx, cy + ry), fill=255)
    big = small.filter(ImageFilter.GaussianBlur(3)).resize((w, h), Image.BILINEAR)
    return np.asarray(big) > 127


def bench_labels(n: int, megapixels: float, out: Path) -> None:
    w = int((megapixels * 1e6 * 4 / 3) ** 0.5)
    h = int(w * 3 / 4)
    src = out / "photo.jpg"
    Image.new("RGB", (64, 48)).save(src)
    t = time.perf_counter()
    items = [
        LabelledImage(i + 1, str(src), w, h, [Instance("dog", blob_mask(w, h, i), 0.8)])
        for i in range(n)
    ]
    print(f"{n} masks of {w}x{h} made in {time.perf_counter() - t:.1f} s")
    print("| format | encode per image (shard worker) | whole export per image | size |")
    print("|---|---|---|---|")
    for fmt, name in (("coco", "x.coco.json"), ("yolo", "x.yolo"), ("masks", "x.masks")):
        t0 = time.perf_counter()
        pieces = [encode_piece(it, fmt, ["dog"]) for it in items]
        t1 = time.perf_counter()
        with LabelWriter(out / name, fmt, ["dog"]) as writer:
            for p in pieces:
                writer.add(p)
        t2 = time.perf_counter()
        size = (
            sum(f.stat().st_size for f in (out / name).rglob("*") if f.is_file())
            if (out / name).is_dir()
            else (out / name).stat().st_size
        )
        print(
            f"| {fmt} | {(t1 - t0) / n * 1e3:.1f} ms | {(t2 - t0) / n * 1e3:.1f} ms "
            f"| {size / n / 1024:.1f} KiB/image |"
        )


def bench_exif(n: int, out: Path) -> None:
    folder = out / "exif"
    folder.mkdir()
    exif = Image.Exif()
    exif[0x010F], exif[0x0110] = "Canon", "Canon EOS R5"
    exif.get_ifd(0x8769)[0x9003] = "2024:06:15 14:03:22"
    gps = exif.get_ifd(0x8825)
    gps[1], gps[2], gps[3], gps[4] = "N", (48.0, 51.0, 30.0), "E", (2.0, 17.0, 40.0)
    img = Image.new("RGB", (4000, 3000), (120, 130, 140))
    paths = []
    for i in range(n):
        p = folder / f"{i:05d}.jpg"
        if i == 0:
            img.save(p, quality=85, exif=exif.tobytes())
        else:  # same bytes: the cost of the read does not depend on the pixels
            p.write_bytes(paths[0].read_bytes())
        paths.append(p)
    size = paths[0].stat().st_size
    t0 = time.perf_counter()
    metas = [read_photo_meta(p) for p in paths]
    t1 = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(read_photo_meta, paths))
    t2 = time.perf_counter()
    assert all(m is not None and m.model == "Canon EOS R5" for m in metas)
    print(
        f"EXIF of {n} JPEGs (4000x3000, {size / 1e6:.1f} MB each, page cache warm): "
        f"{n / (t1 - t0):.0f} files/s on one thread ({(t1 - t0) / n * 1e3:.2f} ms each), "
        f"{n / (t2 - t1):.0f} files/s with 4 threads"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=40)
    ap.add_argument("--megapixels", type=float, default=12.0)
    ap.add_argument("--photos", type=int, default=2000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        bench_labels(args.images, args.megapixels, Path(d))
        bench_exif(args.photos, Path(d))


if __name__ == "__main__":
    main()
