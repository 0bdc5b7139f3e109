"""An index written by the first release (tests/fixtures/index_v1) opens with today's code.

It is migrated in place on the first writable open: every row, id and vector
kept bit for bit, nothing re-embedded, the FAISS file still current, search
ranking unchanged; a second open does nothing. A read-only open migrates
nothing and still reads it.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from wherein.indexer.store import migrations
from wherein.indexer.store.catalog import SCHEMA_VERSION, Catalog

from old_indexes import FIXTURES, new_file, raw

FIXTURE = FIXTURES / "index_v1"
STEPS = [
    "m001_initial",
    "m002_paths_as_bytes",
    "m003_photos",
    "m004_file_identity",
    "m005_items",
    "m006_videos",
    "m007_file_kinds",
    "m008_tiled",
]


@pytest.fixture()
def v1(tmp_path) -> Path:
    d = tmp_path / "index"
    shutil.copytree(FIXTURE, d)
    return d


def v1_rows(db: Path) -> dict[int, dict]:
    cols = "id, path, size, mtime_ns, sha256, width, height, format, indexed_at, model_id"
    return {r[0]: dict(zip(cols.split(", "), r)) for r in raw(db, f"SELECT {cols} FROM images")}


def test_fixture_is_what_the_first_release_wrote():
    db = FIXTURE / "catalog.db"
    assert raw(db, "SELECT value FROM meta WHERE key = 'schema_version'") == [("1",)]
    tables = {r[0] for r in raw(db, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "_sqlite_migrations" not in tables and "labels" in tables
    assert raw(db, "SELECT typeof(path) FROM images GROUP BY 1") == [("text",)]


def test_first_open_migrates_in_place_keeping_every_row_and_vector(v1):
    db = v1 / "catalog.db"
    before_rows = v1_rows(db)
    before_vecs = dict(raw(db, "SELECT image_id, vector FROM embeddings"))
    before_skips = raw(db, "SELECT path, reason, size, mtime_ns, seen_at FROM skipped")
    before_meta = dict(raw(db, "SELECT key, value FROM meta"))
    before_labels = sorted(raw(db, "SELECT * FROM labels"))
    cat = Catalog(db)
    assert cat.migrated == STEPS and cat.schema_version == SCHEMA_VERSION == 8
    # Every row as it was, and each a photo (m007): the first release indexed photos only.
    assert cat.rows_by_ids(before_rows) == {
        i: {**row, "file_kind": "photo"} for i, row in before_rows.items()
    }
    ids, vecs = cat.vectors_for(before_vecs)
    assert len(ids) == len(before_vecs) == 9
    for i, v in zip(ids.tolist(), vecs, strict=True):
        assert v.astype("<f4").tobytes() == before_vecs[i]
    assert [tuple(s.values()) for s in cat.skipped()] == before_skips
    assert {k: cat.get_meta(k) for k in before_meta} == {
        k: json.loads(v) if k != "schema_version" else 8 for k, v in before_meta.items()
    }
    # m004: each row's ctime and inode unknown (trusted on size and mtime until read again)
    assert {k[:2] for k in cat.known_files().values()} == {
        (i, before_rows[i]["size"]) for i in before_rows
    }
    assert {v[5:] for v in cat.known_files().values()} == {(None, None)}
    cat.close()
    assert sorted(raw(db, "SELECT * FROM labels")) == before_labels
    assert raw(db, "SELECT name FROM _sqlite_migrations ORDER BY id") == [(s,) for s in STEPS]
    assert raw(db, "SELECT typeof(path) FROM images GROUP BY 1") == [("blob",)]
    assert raw(db, "PRAGMA integrity_check") == [("ok",)]
    assert raw(db, "PRAGMA foreign_key_check") == []


def test_second_open_is_a_no_op(v1):
    Catalog(v1 / "catalog.db").close()
    applied = raw(v1 / "catalog.db", "SELECT * FROM _sqlite_migrations")
    again = Catalog(v1 / "catalog.db")
    assert again.migrated == []
    again.close()
    assert raw(v1 / "catalog.db", "SELECT * FROM _sqlite_migrations") == applied


def test_ids_stay_unique_past_a_deleted_last_row(v1):
    db = v1 / "catalog.db"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA foreign_keys = ON")
    with conn:
        conn.execute("DELETE FROM images WHERE id = 9")  # the highest id handed out
    conn.close()
    cat = Catalog(db)
    with cat.transaction():
        new = cat.insert_image(
            new_file(),
            None,
        )
    assert new == 10
    cat.close()


def test_status_check_passes_without_touching_the_vectors(v1):
    from wherein.search.cli import cli

    faiss_before = (v1 / "vectors.faiss").read_bytes()
    catalog_before = (v1 / "catalog.db").read_bytes()
    res = CliRunner().invoke(cli, ["status", "--check", "--json", "--index", str(v1)])
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout)
    assert info["check"] == {"ok": True, "problems": [], "repaired": [], "to_repair": []}
    # status reads only: the first release's layout as it is (the next writer migrates it).
    assert info["schema_version"] == 1 and info["images"] == 9
    assert info["skipped_count"] == 1 and info["vectors_current"]
    assert (v1 / "vectors.faiss").read_bytes() == faiss_before  # nothing re-embedded or rebuilt
    assert (v1 / "catalog.db").read_bytes() == catalog_before


@pytest.mark.slow  # builds the stand-in models once per session
def test_search_ranks_as_the_first_release_did(v1, standin_models):
    from wherein.search.service.search import open_index

    expected = json.loads((v1 / "expected.json").read_text())
    with open_index(v1, standin_models) as s:
        for query, want in expected.items():
            hits = s.search(query, k=20, check_exists=False)
            assert sorted(h.path for h in hits) == sorted(p for p, _ in want), query
            score = {h.path: h.score for h in hits}
            np.testing.assert_allclose([score[p] for p, _ in want], [x for _, x in want], atol=1e-6)
            # The first release's order where its scores differ by more than float32 noise
            # (its near-0 scores, ~1e-8 apart, came out in its CPU's SIMD order) ...
            rank = {h.path: h.rank for h in hits}
            for (a, sa), (b, sb) in itertools.combinations(want, 2):
                if sa > sb + 1e-5:
                    assert rank[a] < rank[b], (query, a, b)
            # ... and hits whose scores agree that closely by id, on any CPU.
            for h, nxt in itertools.pairwise(hits):
                if abs(h.score - nxt.score) < 1e-7:
                    assert h.id < nxt.id, (query, h.path, nxt.path)
        # Filters read the migrated paths: --under is a folder prefix on the stored bytes.
        nested = s.search(
            "red", k=20, under="/tmp/wherein-index-v1/photos/nested", check_exists=False
        )
        assert [Path(h.path).name for h in nested][:1] == ["red_copy.png"]
        assert all("/nested/" in h.path for h in nested) and len(nested) == 4


_RANKS = """
import json, sys
from wherein.search.service.search import open_index
with open_index(sys.argv[1], sys.argv[2]) as s:
    print(json.dumps({q: [h.id for h in s.search(q, k=20, check_exists=False)] for q in sys.argv[3:]}))
"""


def test_search_order_does_not_depend_on_the_blas_kernel(v1, standin_models):
    """Near-equal scores (~1e-8 apart) rank alike whichever SIMD kernel computes them: the
    CPU's own (AVX-512 on CI) and OpenBLAS's SSE3 and AVX ones (OPENBLAS_CORETYPE)."""
    queries = list(json.loads((v1 / "expected.json").read_text()))
    orders = []
    for kernel in ("", "Prescott", "Sandybridge"):
        child = subprocess.run(
            [sys.executable, "-c", _RANKS, str(v1), str(standin_models), *queries],
            env={**os.environ, "OPENBLAS_CORETYPE": kernel},
            capture_output=True,
            text=True,
            check=True,
        )
        orders.append(json.loads(child.stdout))
    assert orders[1] == orders[0] and orders[2] == orders[0]


def test_read_only_open_reads_the_old_layout_without_migrating(v1):
    # What a read-only medium gets: no migration, the first release's text paths.
    cat = Catalog(v1 / "catalog.db", readonly=True)
    assert cat.migrated == [] and cat.schema_version == 1
    path = "/tmp/wherein-index-v1/photos/red_square.png"
    assert cat.row_by_path(path)["id"] == 5 and cat.row_by_path(path + "x") is None
    assert cat.rows_by_ids([5])[5]["path"] == path and path in cat.known_files()
    under = cat.embedded_paths(["/tmp/wherein-index-v1/photos/nested"])
    assert sorted(i for i, _ in under) == [6, 7, 8, 9]
    assert len(cat.read_labels()) == 36 and cat.skipped()[0]["path"].endswith("broken.jpg")
    cat.close()
    assert raw(v1 / "catalog.db", "SELECT typeof(path) FROM images GROUP BY 1") == [("text",)]


def test_a_failing_step_leaves_the_old_catalog_as_it_was(v1, monkeypatch):
    def m999_boom(db):
        db.execute("DELETE FROM embeddings")
        raise RuntimeError("boom")

    steps = [*migrations.MIGRATIONS._migrations]
    monkeypatch.setattr(
        migrations.MIGRATIONS,
        "_migrations",
        [*steps, migrations.Migrations._Migration("m999_boom", m999_boom)],
    )
    db = v1 / "catalog.db"
    with pytest.raises(RuntimeError, match="boom"):
        Catalog(db)
    tables = {r[0] for r in raw(db, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "_sqlite_migrations" not in tables
    assert raw(db, "SELECT count(*) FROM embeddings") == [(9,)]
    assert raw(db, "SELECT typeof(path) FROM images GROUP BY 1") == [("text",)]


def test_concurrent_first_opens_migrate_once(v1):
    import threading

    barrier = threading.Barrier(4)
    results: list = []

    def open_it():
        barrier.wait()
        try:
            cat = Catalog(v1 / "catalog.db")
            results.append((cat.migrated, cat.count_images()))
            cat.close()
        except Exception as exc:  # noqa: BLE001 - the test reports it below
            results.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results, key=str) == sorted([(STEPS, 9)] + [([], 9)] * 3, key=str)
