"""build-index keeps re-scoring vectors as float16 in vectors.f16: search ranks as with float32,
the file stays in step through --append, and status --check accepts it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_build_append import _check, _cli, _vector_dir

pytestmark = pytest.mark.scale

DIM = 768


def _clustered(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(30, DIM)).astype(np.float32)
    v = centres[rng.integers(0, 30, n)] + 0.5 * rng.normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _search(index: Path, queries: np.ndarray, tmp_path: Path) -> list[list[tuple[int, float]]]:
    from wherein.indexer.models.modeldir import ModelDir
    from wherein.indexer.store.index_store import IndexStore
    from wherein.search.searcher import QueryVectors, Searcher

    out = []
    with Searcher(IndexStore.open(index), ModelDir(tmp_path / "no-models")) as s:
        for q in queries:
            s.embed_query = lambda _q, q=q: QueryVectors(q, None)  # type: ignore[method-assign]
            hits = s.search("anything", k=10, check_exists=False)
            out.append([(h.id, h.score) for h in hits])
    return out


def test_float16_rescoring_ranks_as_float32(tmp_path):
    from wherein.indexer.scale.build_index import build_index

    vecs = _clustered(1500, seed=3)
    a = _vector_dir(tmp_path / "a", vecs, "a")
    f16, f32 = tmp_path / "f16", tmp_path / "f32"
    s16 = build_index([a], f16, memory_budget=2_000_000)
    s32 = build_index([a], f32, memory_budget=2_000_000, rescore="float32")
    assert s16.kind == s32.kind != "flat"  # approximate: search re-scores its candidates
    assert (f16 / "vectors.f16").stat().st_size == 1500 * DIM * 2
    assert not (f32 / "vectors.f16").exists()
    rng = np.random.default_rng(0)
    queries = vecs[rng.choice(1500, 12, replace=False)] + 0.02 * rng.normal(size=(12, DIM))
    queries = (queries / np.linalg.norm(queries, axis=1, keepdims=True)).astype(np.float32)
    same = 0
    for h16, h32 in zip(_search(f16, queries, tmp_path), _search(f32, queries, tmp_path)):
        # Rank by rank the same score within float16's error; ids may only swap in near-ties.
        assert np.allclose([s for _, s in h16], [s for _, s in h32], atol=2e-3)
        assert len({i for i, _ in h16} & {i for i, _ in h32}) >= 9
        same += [i for i, _ in h16] == [i for i, _ in h32]
    assert same >= 9
    assert _check(f16)["images"] == 1500


def test_append_writes_the_new_rows_and_search_finds_them(tmp_path):
    from wherein.indexer.scale.build_index import build_index
    from wherein.indexer.store.index_store import IndexStore

    old, new = _clustered(1200, seed=4), _clustered(300, seed=5)
    index = tmp_path / "idx"
    build_index([_vector_dir(tmp_path / "a", old, "a")], index, memory_budget=2_000_000)
    stats = build_index(
        [_vector_dir(tmp_path / "b", new, "b")], index, memory_budget=2_000_000, append=True
    )
    assert stats.added == 300 and stats.quantizer in ("reused", "retrained")
    assert (index / "vectors.f16").stat().st_size == 1500 * DIM * 2
    with IndexStore.open(index) as store:
        ids, got = store.catalog.vectors_for(range(1, 1501))
    assert list(ids) == list(range(1, 1501))
    assert np.allclose(got, np.concatenate([old, new]), atol=1e-3)
    hits = _search(index, new[[0, 150, 299]], tmp_path)
    assert [h[0][0] for h in hits] == [1201, 1351, 1500]  # each appended vector finds itself
    assert _check(index)["images"] == 1500


def test_float32_index_stays_float32_on_append(tmp_path, monkeypatch):
    index = tmp_path / "idx"
    a = _vector_dir(tmp_path / "a", _clustered(100, seed=6), "a")
    b = _vector_dir(tmp_path / "b", _clustered(50, seed=7), "b")
    _cli("build-index", str(a), "--index", str(index), "--rescore", "float32")
    _cli("build-index", str(b), "--index", str(index), "--append")
    assert not (index / "vectors.f16").exists()
    assert _check(index)["images"] == 150


def test_status_check_finds_a_short_or_holed_vector_file(tmp_path):
    """A vectors.f16 cut short (disk trouble, a bad copy) or with a hole reads as zero vectors;
    `status --check` says so instead of passing."""
    from click.testing import CliRunner

    from wherein.indexer.scale.build_index import build_index
    from wherein.search.cli import cli

    index = tmp_path / "idx"
    build_index([_vector_dir(tmp_path / "a", _clustered(1200, seed=6), "a")], index)
    _check(index)
    f16 = index / "vectors.f16"
    row = DIM * 2

    def check() -> tuple[int, str]:
        res = CliRunner().invoke(cli, ["status", "--check", "--index", str(index)])
        return res.exit_code, res.output

    with f16.open("r+b") as f:
        f.write(bytes(8 * row))  # ids 1-8: the check samples the first id and every few
    code, out = check()
    assert code == 1 and "sampled vectors are empty" in out, out
    with f16.open("r+b") as f:
        f.truncate(1000 * row)
    code, out = check()
    assert code == 1 and "1000 rows" in out and "up to id 1200" in out, out
