"""build-index from several embed directories, --append to an index built earlier, duplicate paths.

Embedding uses the local engine (no Ray): what is under test is the index build.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from conftest import draw_shape

pytestmark = pytest.mark.scale


def _blocks(root: Path, n: int, seed: int) -> None:
    """Images of 4x4 colour blocks in 12 families (neighbours cluster like near-duplicates)."""
    rng = np.random.default_rng(seed)
    bases = rng.integers(0, 256, (12, 4, 4, 3), dtype=np.uint8)
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        blocks = bases[i % 12].copy()
        blocks[rng.integers(4), rng.integers(4)] = rng.integers(0, 256, 3)
        Image.fromarray(blocks).resize((48, 40), Image.NEAREST).save(root / f"b{seed}_{i:03d}.png")


def _reds(root: Path, n: int) -> None:
    for i in range(n):
        draw_shape(root / f"red_{i:02d}.png", "red", size=(64 + i, 48), box=(0.1, 0.1, 0.9, 0.9))


def _embed(src: Path, out: Path, models: Path) -> Path:
    from wherein.indexer.scale.embed import embed

    stats = embed([str(src)], out, models, engine="local", shard_size=40)
    assert stats.complete
    return out


def _cli(*args: str) -> dict:
    from wherein.search.cli import cli

    res = CliRunner().invoke(cli, [*args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _check(index: Path) -> dict:
    info = _cli("status", "--check", "--index", str(index))
    assert info["check"]["ok"], info["check"]
    return info


def _centroids(index: Path) -> np.ndarray:
    import faiss

    from wherein.indexer.store.vectors import VectorIndex

    vi = VectorIndex(index)  # maps an on-disk index's .ivfdata from the index folder
    assert vi.load()
    whole = vi.index  # owns the quantizer: keep it alive
    ivf = faiss.extract_index_ivf(whole)
    return faiss.downcast_index(ivf.quantizer).reconstruct_n(0, ivf.nlist).copy()


def _paths(index: Path) -> dict[str, dict]:
    from wherein.indexer.store.index_store import IndexStore

    with IndexStore.open(index) as store:
        cat = store.catalog
        rows = cat.rows_by_ids(cat.embedded_ids())
    return {r["path"]: r for r in rows.values()}


@pytest.fixture(scope="module")
def two_dirs(tmp_path_factory, standin_models) -> tuple[Path, Path, Path, Path]:
    """(first embed dir, second embed dir, first images, second images): 120 blocks, then 30 reds."""
    root = tmp_path_factory.mktemp("grow")
    _blocks(root / "first", 120, seed=1)
    _reds(root / "second", 30)
    a = _embed(root / "first", root / "emb-a", standin_models)
    b = _embed(root / "second", root / "emb-b", standin_models)
    return a, b, root / "first", root / "second"


@pytest.mark.slow
def test_build_from_two_embed_dirs(two_dirs, standin_models, tmp_path, monkeypatch):
    monkeypatch.setenv("WHEREIN_MODELS", str(standin_models))
    a, b, first, second = two_dirs
    index = tmp_path / "idx"
    stats = _cli("build-index", str(a), str(b), "--index", str(index))
    assert stats["vectors"] == stats["added"] == 150 and stats["duplicates"] == 0
    assert _check(index)["images"] == 150
    paths = _paths(index)
    assert {Path(p).parent for p in paths} == {first, second}
    assert len({r["id"] for r in paths.values()}) == 150  # ids stay disjoint across dirs
    hits = _cli("search", "red", "--index", str(index), "-k", "5")
    assert all(Path(h["path"]).parent == second for h in _hits(hits))


def _hits(res) -> list[dict]:
    return res["hits"] if isinstance(res, dict) else res


@pytest.mark.slow
@pytest.mark.parametrize(("budget", "kind"), [("300K", "ivf-sq8"), ("60K", "ivf-sq8-ondisk")])
def test_append_reuses_quantizer_and_finds_new_images(
    two_dirs, standin_models, tmp_path, monkeypatch, budget, kind
):
    monkeypatch.setenv("WHEREIN_MODELS", str(standin_models))
    a, b, _first, second = two_dirs
    index = tmp_path / "idx"
    built = _cli("build-index", str(a), "--index", str(index), "--max-memory", budget)
    assert built["kind"] == kind and built["quantizer"] == "trained"
    before = _centroids(index)
    assert not any(
        "red" in Path(h["path"]).name
        for h in _hits(_cli("search", "red", "--index", str(index), "-k", "3"))
    )

    stats = _cli("build-index", str(b), "--index", str(index), "--append", "--max-memory", budget)
    assert stats["appended"] and stats["added"] == 30 and stats["vectors"] == 150
    assert stats["quantizer"] == "reused" and stats["kind"] == kind
    assert stats["recall"]["recall_at_10"] >= stats["recall"]["target"]
    assert np.array_equal(_centroids(index), before)
    info = _check(index)
    assert info["images"] == 150 and info["vector_index"]["kind"] == kind
    hits = _hits(_cli("search", "red", "--index", str(index), "-k", "3"))
    assert [Path(h["path"]).parent for h in hits] == [second] * 3
    assert len(list(index.glob("*.ivfdata"))) == (kind == "ivf-sq8-ondisk")


def _vector_dir(out: Path, vecs: np.ndarray, prefix: str) -> Path:
    """An embed directory holding these vectors, 50 per shard, written by `wherein embed`'s
    own shard writer (uris /synthetic/PREFIX/N.jpg, ids from 1)."""
    from wherein.indexer.scale import shards as S

    plan = S.Plan(out, 50, len(vecs), "standin:synthetic", "standin", vecs.shape[1], [prefix])
    S.write_vectors(plan, vecs, [f"/synthetic/{prefix}/{j}.jpg" for j in range(1, len(vecs) + 1)])
    return out


def test_append_retrains_when_recall_falls(tmp_path):
    """Vectors from a subspace the quantizer never saw land in lists by chance: recall drops, the
    check sees it, the quantizer is retrained, and recall is back above target."""
    from wherein.indexer.scale.build_index import build_index

    rng = np.random.default_rng(5)
    dim = 768
    centres = rng.normal(size=(40, dim // 2)).astype(np.float32)
    old = np.zeros((1200, dim), np.float32)
    old[:, : dim // 2] = centres[rng.integers(0, 40, 1200)] + 0.3 * rng.normal(
        size=(1200, dim // 2)
    )
    # A new domain: its own clusters, in the dimensions no old vector uses.
    new = np.zeros((600, dim), np.float32)
    far = rng.normal(size=(20, dim // 2)).astype(np.float32)
    new[:, dim // 2 :] = far[rng.integers(0, 20, 600)] + 0.3 * rng.normal(size=(600, dim // 2))
    a = _vector_dir(tmp_path / "a", old, "a")
    b = _vector_dir(tmp_path / "b", new, "b")
    index = tmp_path / "idx"
    built = build_index([a], index, memory_budget=2_000_000)
    assert built.kind == "ivf-sq8" and built.quantizer == "trained"
    before = _centroids(index)
    stats = build_index([b], index, memory_budget=2_000_000, append=True)
    assert stats.quantizer == "retrained"
    assert stats.recall["recall_at_10"] < stats.recall["target"]
    assert stats.recall_after_retrain["recall_at_10"] >= stats.recall["target"]
    assert not np.array_equal(_centroids(index), before)
    assert _check(index)["images"] == 1800


@pytest.mark.slow
def test_duplicate_paths_keep_the_newest_shard(standin_models, tmp_path, monkeypatch):
    """One folder embedded twice, with files changed and broken in between: the later embed wins,
    whatever the order the directories are given in, in a build and in an append."""
    monkeypatch.setenv("WHEREIN_MODELS", str(standin_models))
    photos = tmp_path / "photos"
    _blocks(photos, 40, seed=3)
    old = _embed(photos, tmp_path / "emb-old", standin_models)
    changed, broken = photos / "b3_005.png", photos / "b3_006.png"
    draw_shape(changed, "red", size=(48, 40))
    broken.write_bytes(b"not an image any more")
    draw_shape(photos / "b3_new.png", "blue", size=(48, 40))
    new = _embed(photos, tmp_path / "emb-new", standin_models)

    for order in ((old, new), (new, old)):
        index = tmp_path / f"idx-{order[0].name}"
        stats = _cli("build-index", *map(str, order), "--index", str(index))
        assert stats["duplicates"] == 40  # every path of the first embed is in the second
        ex = stats["duplicate_examples"][0]
        assert ex["kept"].startswith(str(new)) and ex["dropped"].startswith(str(old))
        _assert_newest(index, changed, broken, photos)

    index = tmp_path / "idx-append"
    _cli("build-index", str(old), "--index", str(index))
    stats = _cli("build-index", str(new), "--index", str(index), "--append")
    assert stats["duplicates"] == 40 and stats["replaced"] == 40
    assert stats["duplicate_examples"][0]["dropped"].startswith("the index")
    _assert_newest(index, changed, broken, photos)
    again = _cli("build-index", str(new), "--index", str(index), "--append")
    assert again["added"] == 0 and again["vectors"] == 40  # the same shards again: no change


def _assert_newest(index: Path, changed: Path, broken: Path, photos: Path) -> None:
    import hashlib

    info = _check(index)
    paths = _paths(index)
    assert info["images"] == 40 and len(paths) == 40  # 41 files, one broken now
    assert paths[str(changed)]["sha256"] == hashlib.sha256(changed.read_bytes()).hexdigest()
    assert str(broken) not in paths
    assert [s["path"] for s in info["skipped"]] == [str(broken)]
    assert str(photos / "b3_new.png") in paths


def test_interrupted_append_is_repaired_and_can_be_rerun(tmp_path, monkeypatch):
    """Ctrl-C after the first shard of an append: the index checks out (its vectors catch up with
    the rows already written), and running the same append again completes it."""
    from wherein.indexer.scale import catalog_fill
    from wherein.indexer.scale.build_index import build_index

    rng = np.random.default_rng(2)
    a = _vector_dir(tmp_path / "a", rng.normal(size=(60, 768)).astype(np.float32), "a")
    b = _vector_dir(tmp_path / "b", rng.normal(size=(120, 768)).astype(np.float32), "b")
    index = tmp_path / "idx"
    build_index([a], index)
    real = catalog_fill.shard_time
    calls = []

    def stop_at_second_shard(ref):
        calls.append(ref)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(ref)

    monkeypatch.setattr(catalog_fill, "shard_time", stop_at_second_shard)
    with pytest.raises(KeyboardInterrupt):
        build_index([b], index, append=True)
    monkeypatch.setattr(catalog_fill, "shard_time", real)
    assert _check(index)["images"] == 60 + 50  # the first shard of b is in, and in FAISS too
    stats = build_index([b], index, append=True)
    assert stats.added == 70 and stats.duplicates == 50
    assert _check(index)["images"] == 180
