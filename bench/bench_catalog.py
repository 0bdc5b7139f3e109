"""Time the catalog's migration and its path handling on a first-release catalog of N rows;
with --checks, what the damage checks cost instead.

    .venv/bin/python bench/bench_catalog.py --n 100000
    .venv/bin/python bench/bench_catalog.py --checks --n 1000000

--checks builds a current catalog of N photos (rows, items, photos) whose vectors are
either in vectors.f16 (build-index's layout) or float32 blobs in the catalog (index's;
--blobs), then times a reader's open with and without the check of the tables of files
and items (Catalog(verify_rows=True): PRAGMA quick_check of images, items, photos, videos),
the next reader's open of the unchanged catalog (the passed check remembered:
indexer/store/checked.py) and one after a writer's commit, the whole file's PRAGMA quick_check (what a writer runs before its first write), a table
count, and the CRC-32 of an IVF-SQ8 vectors.faiss of N 768-d vectors (checked on every
open of the FAISS file).

Builds a catalog in the first release's layout (schema 1: paths as UTF-8 text,
768-d float32 vectors) with plain sqlite3, as that release wrote it, then times:
- the first writable open (m001 + m002: images and skipped rebuilt with BLOB
  paths; embeddings untouched) and a second open (nothing pending);
- known_files() (the indexer's start-up read) before (text, raw query) and after
  (bytes decoded with os.fsdecode);
- an --under filter: the old LIKE scan on text vs embedded_paths' range on bytes;
- bulk insert_images (build-index's path) into a fresh catalog, against the raw
  executemany of tuples that build-index ran before.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

import numpy as np

from wherein.indexer.store import checked, migrations
from wherein.indexer.store.catalog import Catalog, vector_to_blob


def record(i: int) -> dict:
    return {
        "id": i + 1,
        "path": f"/photos/{i // 1000:04d}/img_{i:07d}.jpg",
        "size": 2_000_000 + i,
        "mtime_ns": 1_700_000_000_000_000_000 + i,
        "sha256": f"{i:064x}",
        "width": 4032,
        "height": 3024,
        "format": "jpg",
        "indexed_at": "2026-01-01T00:00:00+00:00",
        "model_id": "bench",
    }


def build_v1(db: Path, n: int, dim: int) -> None:
    rng = np.random.default_rng(0)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.executescript(migrations.SCHEMA_V1)
    with conn:
        conn.execute("INSERT INTO meta VALUES ('schema_version', '1')")
        for s in range(0, n, 10000):
            recs = [record(i) for i in range(s, min(s + 10000, n))]
            conn.executemany(
                "INSERT INTO images(id, path, size, mtime_ns, sha256, width, height, format, "
                "indexed_at, model_id) VALUES (:id, :path, :size, :mtime_ns, :sha256, :width, "
                ":height, :format, :indexed_at, :model_id)",
                recs,
            )
            vecs = rng.standard_normal((len(recs), dim)).astype(np.float32)
            conn.executemany(
                "INSERT INTO embeddings VALUES (?, ?)",
                ((r["id"], vector_to_blob(v)) for r, v in zip(recs, vecs, strict=True)),
            )
    conn.close()


def timed(f):
    t = time.perf_counter()
    out = f()
    return time.perf_counter() - t, out


def checks(n: int, dim: int, blobs: bool) -> None:
    """The damage checks' cost on a current catalog of n photos."""
    import os

    from wherein.indexer.store.vectors import file_crc32

    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        db = Path(tmp) / "catalog.db"
        cat = Catalog(db)
        rng = np.random.default_rng(2)
        t_fill = time.perf_counter()
        with cat.transaction():
            cat.set_meta("dim", dim)
            if not blobs:
                cat.use_vector_file(dim)
        for s in range(0, n, 20000):
            recs = [record(i) for i in range(s, min(s + 20000, n))]
            vecs = rng.standard_normal((len(recs), dim)).astype(np.float32)
            with cat.transaction():
                cat.insert_images(recs, vecs)
            cat.store_photos(
                {
                    "image_id": r["id"],
                    "size": r["size"],
                    "mtime_ns": r["mtime_ns"],
                    "taken": "2024-01-01 12:00:00",
                    "make": "Phone",
                    "model": "X",
                }
                for r in recs
            )
        cat.close()
        t_fill = time.perf_counter() - t_fill
        size = db.stat().st_size

        def open_close(**kw) -> None:
            Catalog(db, **kw).close()

        open_close()  # the page cache warm, as for every open after the first
        t_open, _ = timed(open_close)
        t_rows, _ = timed(lambda: open_close(verify_rows=True))  # checks, remembers it
        t_rows2, _ = timed(lambda: open_close(verify_rows=True))  # unchanged: trusted
        with contextlib.closing(Catalog(db)) as writer, writer.transaction():
            writer.set_meta("bench", time.time())  # a writer's commit: the record is stale
        t_rows3, _ = timed(lambda: open_close(verify_rows=True))
        t_stamp, _ = timed(lambda: checked.still_checked(db, checked.stamp(db)))
        cat = Catalog(db)
        t_count, count = timed(
            lambda: cat._conn.execute("SELECT count(*) FROM images NOT INDEXED").fetchone()[0]
        )
        assert count == n
        t_quick, problem = timed(cat.soundness_problem)
        assert problem is None
        per_table = {
            table: timed(lambda t=table: cat._conn.execute(f"PRAGMA quick_check({t})").fetchone())[
                0
            ]
            for table in ("images", "items", "photos", "videos")
        }
        cat.close()

        faiss_bytes = n * (dim + 8)  # IVF-SQ8: a byte a dimension and an id, per vector
        ff = Path(tmp) / "vectors.faiss"
        with open(ff, "wb") as f:
            for s in range(0, faiss_bytes, 1 << 26):
                f.write(rng.bytes(min(1 << 26, faiss_bytes - s)))
        file_crc32(ff)  # warm, as the file is for a search right after a save
        t_crc, _ = timed(lambda: file_crc32(ff))

    where = "float32 blobs in the catalog (index)" if blobs else "vectors.f16 (build-index)"
    print(
        f"catalog: {n:,} photos, {dim}-d vectors in {where}; catalog.db {size / 1e6:.0f} MB; "
        f"built in {t_fill:.0f} s"
    )
    print("| step | wall time |")
    print("|---|---|")
    print(f"| reader's open, no check | {t_open * 1e3:.1f} ms |")
    print(f"| reader's open with the check of files and items (verify_rows) | {t_rows:.2f} s |")
    print(
        f"| the next reader's open, catalog unchanged (check remembered) | {t_rows2 * 1e3:.1f} ms |"
    )
    print(f"| of it: the catalog's stamp and the record compared | {t_stamp * 1e3:.2f} ms |")
    print(f"| a reader's open after a writer's commit (checked again) | {t_rows3:.2f} s |")
    print(f"| count(*) of the images table (a row-count check) | {t_count:.2f} s |")
    print(f"| PRAGMA quick_check of the whole file (a writer's check) | {t_quick:.2f} s |")
    for table, t in per_table.items():
        print(f"| PRAGMA quick_check({table}) | {t:.2f} s |")
    print(f"| CRC-32 of a {faiss_bytes / 1e6:.0f} MB vectors.faiss | {t_crc:.2f} s |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--checks", action="store_true", help="time the damage checks instead")
    ap.add_argument("--blobs", action="store_true", help="--checks: vectors as catalog blobs")
    args = ap.parse_args()
    if args.checks:
        checks(args.n, args.dim, args.blobs)
        return
    with tempfile.TemporaryDirectory() as tmp:
        v1 = Path(tmp) / "v1.db"
        build_v1(v1, args.n, args.dim)
        size = v1.stat().st_size
        work = Path(tmp) / "catalog.db"
        shutil.copyfile(v1, work)

        old = sqlite3.connect(v1)
        t_known_old, known_old = timed(
            lambda: {
                r[0]: r[1:]
                for r in old.execute(
                    "SELECT i.path, i.id, i.size, i.mtime_ns, i.sha256, e.image_id IS NOT NULL "
                    "FROM images i LEFT JOIN embeddings e ON e.image_id = i.id"
                )
            }
        )
        t_under_old, under_old = timed(
            lambda: old.execute(
                "SELECT i.id, i.path FROM images i JOIN embeddings e ON e.image_id = i.id "
                "WHERE i.path = ? OR i.path LIKE ? ESCAPE '\\'",
                ("/photos/0042", "/photos/0042/%"),
            ).fetchall()
        )
        old.close()

        t_migrate, cat = timed(lambda: Catalog(work))
        assert cat.migrated == ["m001_initial", "m002_paths_as_bytes", "m003_photos"]
        cat.close()
        t_reopen, cat = timed(lambda: Catalog(work))
        assert cat.migrated == []
        t_known_new, known_new = timed(cat.known_files)
        assert len(known_new) == len(known_old) == args.n
        t_under_new, under_new = timed(lambda: cat.embedded_paths(["/photos/0042"]))
        assert sorted(under_new) == sorted(under_old)
        t_known_folder, known_folder = timed(lambda: cat.known_files(["/photos/0042"]))
        assert len(known_folder) == len(under_new)
        cat.close()

        fresh = Catalog(Path(tmp) / "fresh.db")
        vecs = np.random.default_rng(1).standard_normal((args.n, args.dim)).astype(np.float32)

        def bulk():
            with fresh.transaction():
                for s in range(0, args.n, 10000):
                    recs = [record(i) for i in range(s, min(s + 10000, args.n))]
                    fresh.insert_images(recs, vecs[s : s + len(recs)])

        t_bulk, _ = timed(bulk)
        fresh.close()

        raw = sqlite3.connect(
            Path(tmp) / "raw.db"
        )  # what build-index did before: tuples, text paths
        raw.execute("PRAGMA journal_mode = WAL")
        raw.execute("PRAGMA synchronous = FULL")
        raw.executescript(migrations.SCHEMA_V1)

        def bulk_raw():
            with raw:
                for s in range(0, args.n, 10000):
                    recs = [record(i) for i in range(s, min(s + 10000, args.n))]
                    raw.executemany(
                        "INSERT INTO images(id, path, size, mtime_ns, sha256, width, height, "
                        "format, indexed_at, model_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [tuple(r.values()) for r in recs],
                    )
                    raw.executemany(
                        "INSERT INTO embeddings(image_id, vector) VALUES (?, ?)",
                        (
                            (r["id"], vector_to_blob(v))
                            for r, v in zip(recs, vecs[s:], strict=False)
                        ),
                    )

        t_bulk_raw, _ = timed(bulk_raw)
        raw.close()

    print(f"catalog: {args.n:,} rows, {args.dim}-d vectors, {size / 1e6:.0f} MB (first layout)")
    print("| step | wall time |")
    print("|---|---|")
    print(f"| first open: migrate m001 + m002 + m003 in place | {t_migrate:.2f} s |")
    print(f"| second open: nothing pending | {t_reopen * 1e3:.1f} ms |")
    print(f"| known_files, first layout (text, raw query) | {t_known_old:.2f} s |")
    print(f"| known_files, bytes decoded as os.fsdecode does | {t_known_new:.2f} s |")
    print(
        f"| --under one folder ({len(under_old)} rows): old LIKE scan | {t_under_old * 1e3:.1f} ms |"
    )
    print(f"| --under one folder: embedded_paths range | {t_under_new * 1e3:.1f} ms |")
    print(
        f"| known_files of one folder (a run over it, a watch batch) | {t_known_folder * 1e3:.1f} ms |"
    )
    print(
        f"| bulk rows + vectors, one transaction: raw executemany (before) | {t_bulk_raw:.2f} s |"
    )
    print(f"| bulk rows + vectors, one transaction: insert_images | {t_bulk:.2f} s |")


if __name__ == "__main__":
    main()
