"""What `wherein status` pays to count files per media kind (Catalog.kind_counts) on a
catalog of N files, against the counts it already made (files, items, frames).

    .venv/bin/python bench/bench_status_kinds.py --n 1000000 --videos 1000 --frames 30

Builds a current catalog (Catalog's own migrations) with N files: N - V photos of one item
each, and V videos (half of them animations) of F frame items each, with their videos rows;
no vectors (the counts never read them). Then times, best of --repeat, each count status
runs: count_images, count_items, video_counts (before: frames and videos), kind_counts (now:
the photos as the files less the timed ones) and kind_counts reading every file's kind (what
it falls back to where the registry has more than one untimed kind).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from wherein.indexer.store.catalog import Catalog


def build(db: Path, n: int, videos: int, frames: int) -> None:
    cat = Catalog(db)
    conn = cat._conn
    with cat.transaction():
        conn.executemany(
            "INSERT INTO images(id, path, size, mtime_ns, sha256, width, height, format, "
            "indexed_at, model_id, kind) VALUES (?, ?, 1, 1, ?, 1, 1, 'jpg', 'now', 'm', ?)",
            (
                (
                    i,
                    f"/photos/{i:09d}.jpg".encode(),
                    "0" * 64,
                    "photo" if i <= n - videos else ("video" if i % 2 else "animation"),
                )
                for i in range(1, n + 1)
            ),
        )
        conn.executemany(
            "INSERT INTO items(id, image_id, kind) VALUES (?, ?, 'image')",
            ((i, i) for i in range(1, n - videos + 1)),
        )
        next_id = n + 1
        for f in range(n - videos + 1, n + 1):
            conn.execute(
                "INSERT INTO videos(image_id, duration, fps, codec, rotation, frames, complete) "
                "VALUES (?, 10, 30, 'h264', 0, ?, 1)",
                (f, frames),
            )
            conn.executemany(
                "INSERT INTO items(id, image_id, kind, t) VALUES (?, ?, 'frame', ?)",
                ((next_id + k, f, float(k)) for k in range(frames)),
            )
            next_id += frames
    cat.close()


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--videos", type=int, default=1000)
    ap.add_argument("--frames", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "catalog.db"
        t0 = time.perf_counter()
        build(db, a.n, a.videos, a.frames)
        print(f"built {a.n} files in {time.perf_counter() - t0:.1f} s")
        cat = Catalog(db, readonly=True)
        for name, fn in (
            ("count_images", cat.count_images),
            ("count_items", cat.count_items),
            ("video_counts (before)", cat.video_counts),
            ("kind_counts (now)", lambda: cat.kind_counts("photo")),
            ("kind_counts by a scan", cat.kind_counts),
        ):
            print(f"{name:<24} {best(fn, a.repeat) * 1000:8.1f} ms")
        assert cat.kind_counts("photo") == cat.kind_counts(), "the two counts differ"
        print(cat.kind_counts("photo"))
        cat.close()


if __name__ == "__main__":
    main()
