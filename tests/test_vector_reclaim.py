"""Deleted photos give their disk space back in vectors.f16: an index built by build-index,
then `wherein index` over the folder after a run of photos was deleted."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

pytestmark = pytest.mark.scale

N = 80


def _photos(root: Path) -> None:
    rng = np.random.default_rng(3)
    root.mkdir(parents=True)
    for i in range(N):
        Image.fromarray(rng.integers(0, 256, (4, 4, 3), dtype=np.uint8)).resize(
            (32, 32), Image.NEAREST
        ).save(root / f"img{i:03d}.png")


def _invoke(*args: str):
    from wherein.search.cli import cli

    res = CliRunner().invoke(cli, list(args))
    assert res.exit_code == 0, res.output
    return res


def _file_state(index: Path) -> tuple[dict[int, str], dict[int, np.ndarray], dict]:
    """id -> path, id -> vector as search reads it, and status' vectors.f16 figures."""
    from wherein.indexer.store.index_store import IndexStore

    with IndexStore.open(index) as store:
        cat = store.catalog
        ids, vecs = cat.vectors_for(cat.embedded_ids())
        paths = {i: r["path"] for i, r in cat.rows_by_ids(ids).items()}
    status = json.loads(_invoke("status", "--index", str(index), "--json").stdout)
    return paths, dict(zip(ids.tolist(), vecs, strict=True)), status["vector_file"]


def test_deleted_photos_free_their_rows_and_the_rest_stay(env, tmp_path):
    root, emb, index = tmp_path / "photos", tmp_path / "emb", env["index"]
    _photos(root)
    _invoke("embed", str(root), "--out", str(emb), "--engine", "local")
    _invoke("build-index", str(emb), "--index", str(index))
    paths, vectors, before = _file_state(index)
    assert len(paths) == N and before["live_bytes"] == N * 768 * 2
    assert before["allocated_bytes"] >= before["apparent_bytes"]  # nothing sparse yet

    gone = sorted(paths)[20:60]  # 40 consecutive ids: 60 KiB of rows
    for i in gone:
        Path(paths[i]).unlink()
    _invoke("index", str(root), "-q", "--index", str(index))

    after_paths, after_vectors, after = _file_state(index)
    assert sorted(after_paths) == sorted(set(paths) - set(gone))
    # Still the file's rows (not re-embedded as float32), read back bit-identical.
    assert after["live_bytes"] == (N - 40) * 768 * 2
    assert all(np.array_equal(after_vectors[i], vectors[i]) for i in after_paths)
    # 40 rows of 1536 bytes cover at least 14 whole 4 KiB blocks; all of them are given back.
    assert after["allocated_bytes"] <= before["allocated_bytes"] - 14 * 4096
    assert after["apparent_bytes"] == before["apparent_bytes"]
    check = _invoke("status", "--check", "--index", str(index))
    assert "check      ok" in check.output and "vectors.f16" in check.output
