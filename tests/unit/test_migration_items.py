"""Indexes written before items (catalog schema 3, tests/fixtures/index_v3) open with today's code.

The items step gives every image row one item of kind 'image' with the image's id, and
keys the embeddings by item id: vectors, vectors.faiss and vectors.f16 stay as they are
(FAISS ids are item ids), nothing is re-embedded, search answers as schema 3 did, and
`status --check` passes. Both layouts: float32 blobs (`wherein index`) and float16 rows
in vectors.f16 (`embed` + `build-index`).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from wherein.indexer.store.catalog import Catalog

from old_indexes import FIXTURES, by_score, new_file, raw

FIXTURE = FIXTURES / "index_v3"
LAYOUTS = ["index", "built"]


@pytest.fixture(params=LAYOUTS)
def v3(request, tmp_path) -> Path:
    d = tmp_path / request.param
    shutil.copytree(FIXTURE / request.param, d)
    return d


def vector_files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.glob("vectors.*"))}


def test_fixture_is_what_schema_3_wrote(tmp_path):
    for layout in LAYOUTS:
        db = tmp_path / layout / "catalog.db"  # a copy: a WAL reader leaves -shm files behind
        shutil.copytree(FIXTURE / layout, db.parent)
        assert raw(db, "SELECT value FROM meta WHERE key = 'schema_version'") == [("3",)]
        tables = {r[0] for r in raw(db, "SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "items" not in tables and "photos" in tables
    assert (FIXTURE / "built" / "vectors.f16").is_file()


def test_open_gives_each_image_one_item_with_its_id_and_keeps_every_vector(v3):
    db = v3 / "catalog.db"
    images = raw(db, "SELECT id FROM images ORDER BY id")
    vectors = raw(db, "SELECT image_id, vector FROM embeddings ORDER BY image_id")
    seq = raw(db, "SELECT seq FROM sqlite_sequence WHERE name = 'images'")[0][0]
    files_before = vector_files(v3)
    cat = Catalog(db)
    assert cat.migrated == [
        "m004_file_identity",
        "m005_items",
        "m006_videos",
        "m007_file_kinds",
        "m008_tiled",
    ]
    assert cat.schema_version == 8
    assert cat.count_items() == cat.count_images() == len(images) == 8
    cat.close()
    assert raw(db, "SELECT id, image_id, kind FROM items ORDER BY id") == [
        (i, i, "image") for (i,) in images
    ]
    assert raw(db, "SELECT item_id, vector FROM embeddings ORDER BY item_id") == vectors
    assert vector_files(v3) == files_before
    assert raw(db, "PRAGMA foreign_key_check") == [] and raw(db, "PRAGMA integrity_check") == [
        ("ok",)
    ]
    # A file indexed after the step takes an id no file or item ever had, for both.
    cat = Catalog(db)
    with cat.transaction():
        new = cat.insert_image(
            new_file(),
            np.ones(int(cat.get_meta("dim")), np.float32),
        )
    assert new == seq + 1
    assert cat.hit_rows([new])[new]["item_id"] == new
    # Deleting a file deletes its items and their vectors.
    with cat.transaction():
        cat.delete_images([new])
    assert cat.count_items() == 8 and cat.vectors_for([new])[0].size == 0
    cat.close()


def test_status_check_passes_and_counts_files_and_items(v3):
    from wherein.search.cli import cli

    before = vector_files(v3)
    res = CliRunner().invoke(cli, ["status", "--check", "--json", "--index", str(v3)])
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout)
    assert info["check"] == {"ok": True, "problems": [], "repaired": [], "to_repair": []}
    # status reads only: the layout stays as it is (read through views), the next writer migrates
    assert info["schema_version"] == 3 and info["vectors_current"]
    assert info["files"] == info["items"] == info["images"] == 8 and info["pending"] == 0
    assert vector_files(v3) == before  # nothing re-embedded or rebuilt


def test_status_check_finds_a_file_without_items(v3):
    from wherein.search.cli import cli

    Catalog(v3 / "catalog.db").close()
    conn = sqlite3.connect(v3 / "catalog.db")
    with conn:  # foreign keys off: what a broken tool or a bad restore leaves behind
        conn.execute("DELETE FROM items WHERE id = (SELECT min(id) FROM items)")
    conn.close()
    res = CliRunner().invoke(cli, ["status", "--check", "--json", "--index", str(v3)])
    assert res.exit_code != 0
    problems = json.loads(res.stdout)["check"]["problems"]
    assert "1 files in the catalog yield no item" in problems


@pytest.mark.slow  # builds the stand-in models once per session
def test_search_answers_as_schema_3_did(v3, standin_models):
    from wherein.search.service.search import open_index

    expected = json.loads((FIXTURE / "expected.json").read_text())[v3.name]
    with open_index(v3, standin_models) as s:
        for query, want in expected.items():
            hits = s.search(query, k=20, check_exists=False)
            got = [(h.path, h.score) for h in hits]
            assert by_score(got) == by_score(want), query
            np.testing.assert_allclose([x for _, x in got], [x for _, x in want], atol=1e-6)
            assert all(h.kind == "photo" and h.time is None and h.region is None for h in hits)
            assert [h.item_id for h in hits] == [h.id for h in hits]
        if v3.name == "index":  # EXIF, read by `wherein index`, reaches hits through items
            camera = s.search("green", k=20, camera="Canon", check_exists=False)
            assert [(Path(h.path).name, h.camera) for h in camera] == [
                ("camera.jpg", "Canon EOS R5")
            ]


def test_read_only_open_reads_schema_3_without_migrating(v3):
    cat = Catalog(v3 / "catalog.db", readonly=True)
    assert cat.migrated == [] and cat.schema_version == 3 and not cat.has_items()
    ids = cat.embedded_ids()
    assert len(ids) == 8
    rows = cat.hit_rows(ids)
    assert all(rows[i]["item_id"] == rows[i]["id"] == i for i in ids.tolist())
    assert cat.vectors_for(ids)[0].tolist() == ids.tolist()
    cat.close()
    tables = {r[0] for r in raw(v3 / "catalog.db", "SELECT name FROM sqlite_master")}
    assert "items" not in tables
