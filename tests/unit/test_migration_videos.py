"""Indexes written before videos (catalog schema 5, tests/fixtures/index_v5) open with today's code.

The videos step only adds the (empty) videos table: every row, item and vector stays bit
for bit, vectors.faiss stays current, search answers as schema 5 did, `status --check`
passes.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from wherein.indexer.store.catalog import Catalog

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "index_v5"


@pytest.fixture()
def v5(tmp_path) -> Path:
    d = tmp_path / "index"
    shutil.copytree(FIXTURE, d)
    return d


def raw(db: Path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_fixture_is_what_schema_5_wrote(v5):
    db = v5 / "catalog.db"  # a copy: even a read-only open of a WAL database writes its -shm
    assert raw(db, "SELECT value FROM meta WHERE key = 'schema_version'") == [("5",)]
    tables = {r[0] for r in raw(db, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "items" in tables and "videos" not in tables


def test_open_adds_the_videos_table_and_keeps_every_row_item_and_vector(v5):
    db = v5 / "catalog.db"
    tables = ("images", "items", "embeddings", "photos", "skipped", "sqlite_sequence")
    before = {t: sorted(raw(db, f"SELECT * FROM {t}")) for t in tables}
    faiss = (v5 / "vectors.faiss").read_bytes()
    cat = Catalog(db)
    assert cat.migrated == ["m006_videos", "m007_file_kinds", "m008_tiled"]
    assert cat.schema_version == 8
    cat.close()
    after = {t: sorted(raw(db, f"SELECT * FROM {t}")) for t in tables}
    # images gains its files' kind (m007), every one a photo: schema 5 indexed no video.
    assert [r[-1] for r in after["images"]] == ["photo"] * len(before["images"])
    after["images"] = [r[:-1] for r in after["images"]]
    assert after == before
    assert raw(db, "SELECT count(*) FROM videos") == [(0,)]
    assert (v5 / "vectors.faiss").read_bytes() == faiss
    assert Catalog(db).migrated == []  # a second open does nothing


def test_migrated_index_checks_searches_and_reindexes_as_before(v5, standin_models, tmp_path):
    from wherein.search.cli import cli

    env = {"WHEREIN_MODELS": str(standin_models)}
    run = CliRunner().invoke
    res = run(cli, ["status", "--check", "--json", "--index", str(v5)], env=env)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["check"]["ok"]
    Catalog(v5 / "catalog.db").close()  # the writable open migrates
    res = run(cli, ["search", "red", "-k", "9", "--json", "--index", str(v5)], env=env)
    assert res.exit_code == 0, res.output
    hits = [[h["path"], h["score"]] for h in json.loads(res.stdout)]
    expected = json.loads((FIXTURE / "expected.json").read_text())["red"]
    # The top hit is clear of the rest; the others score about 0 (their order is a tie).
    assert hits[0] == pytest.approx(expected[0]) and len(hits) == len(expected)
    assert sorted(p for p, _ in hits) == sorted(p for p, _ in expected)
    status = json.loads(run(cli, ["status", "--json", "--index", str(v5)], env=env).stdout)
    assert status["schema_version"] == 8 and status["vectors_current"]
