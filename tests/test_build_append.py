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


def _build_cli(*args: str):
    from wherein.search.cli import cli

    return CliRunner().invoke(cli, ["build-index", *args, "--json"])


@pytest.mark.parametrize("where", ["footer", "pages"])
def test_damaged_shard_is_one_line_and_a_rerun_builds(tmp_path, where):
    """A shard overwritten with random bytes: one `Error:` line naming it, exit 1. Damage the
    footer check catches leaves no index at all; damage found while reading (pages behind an
    intact footer) leaves an unfinished build that the same command, re-run, starts over."""
    rng = np.random.default_rng(4)
    emb = _vector_dir(tmp_path / "emb", rng.normal(size=(120, 768)).astype(np.float32), "a")
    shard = emb / "shards" / "shard-00001.parquet"
    good = shard.read_bytes()
    bad = bytearray(good)
    if where == "footer":
        bad[:] = rng.bytes(len(good))
    else:  # the column chunks, not the header magic nor the footer
        bad[64 : len(good) // 2] = rng.bytes(len(good) // 2 - 64)
    shard.write_bytes(bytes(bad))
    index = tmp_path / "idx"
    res = _build_cli(str(emb), "--index", str(index))
    assert res.exit_code == 1, res.output
    line = res.stderr.strip()
    assert "\n" not in line and line.startswith(f"Error: {shard}: damaged shard"), line
    if where == "footer":
        assert not index.exists()  # nothing half-made
    shard.write_bytes(good)
    res = _build_cli(str(emb), "--index", str(index))
    assert res.exit_code == 0, res.output
    assert _check(index)["images"] == 120


def test_killed_fresh_build_reruns_as_it_was(tmp_path):
    """SIGKILL in the middle of a fresh build (after its first shard's rows): running the same
    command again builds the whole index, with no --append and nothing counted twice."""
    import subprocess

    from launch import python_argv

    rng = np.random.default_rng(5)
    emb = _vector_dir(tmp_path / "emb", rng.normal(size=(180, 768)).astype(np.float32), "k")
    index = tmp_path / "idx"
    script = (
        "import os, signal, sys\n"
        "from wherein.indexer.scale import catalog_fill\n"
        "from wherein.indexer.scale.build_index import build_index\n"
        "real, calls = catalog_fill.shard_time, []\n"
        "def kill_at_third(ref):\n"
        "    calls.append(ref)\n"
        "    if len(calls) == 3:\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return real(ref)\n"
        "catalog_fill.shard_time = kill_at_third\n"
        "build_index([sys.argv[1]], sys.argv[2])\n"
    )
    child = subprocess.run(
        python_argv("-c", script, str(emb), str(index)), capture_output=True, timeout=300
    )
    assert child.returncode == -9, child.stderr
    assert (index / "catalog.db").exists() and not (index / "vectors.faiss").exists()
    res = _build_cli(str(emb), "--index", str(index))
    assert res.exit_code == 0, res.output
    stats = json.loads(res.stdout)
    assert stats["vectors"] == stats["added"] == 180 and stats["duplicates"] == 0
    assert _check(index)["images"] == 180
    # Once finished, the index is the user's: the same command refuses to overwrite it.
    res = _build_cli(str(emb), "--index", str(index))
    assert res.exit_code == 1 and "already holds an index" in res.output


def test_embed_out_on_a_device_is_one_line(tmp_path, standin_models):
    """--out naming something that is not a folder (here a character device): one line, and the
    device is left as it was."""
    import os
    import stat

    from wherein.search.cli import cli

    _reds(tmp_path / "photos", 2)
    res = CliRunner().invoke(
        cli,
        ["embed", str(tmp_path / "photos"), "--out", os.devnull, "--models", str(standin_models)],
    )
    assert res.exit_code == 1, res.output
    assert (
        res.stderr.strip().splitlines()[-1]
        == f"Error: {os.devnull}: exists and is not a folder; choose another embed directory"
    )
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


@pytest.mark.parametrize("budget", ["-1G", "0", "1", "inf"])
def test_max_memory_out_of_bounds_is_a_usage_error(tmp_path, budget):
    rng = np.random.default_rng(6)
    emb = _vector_dir(tmp_path / "emb", rng.normal(size=(60, 768)).astype(np.float32), "m")
    index = tmp_path / "idx"
    res = _build_cli(str(emb), "--index", str(index), f"--max-memory={budget}")
    assert res.exit_code == 2, res.output
    assert "--max-memory" in res.stderr and "wrote block" not in res.stderr
    assert not index.exists()


def test_resumed_append_summarises_the_rows_it_meets_again(tmp_path, monkeypatch):
    """An append stopped after its first shard, run again: the shard it wrote before is one
    line (how many paths, which source kept, which dropped), not one line per path."""
    from wherein.indexer.scale import catalog_fill
    from wherein.indexer.scale.build_index import build_index
    from wherein.search.cli import cli

    rng = np.random.default_rng(7)
    a = _vector_dir(tmp_path / "a", rng.normal(size=(60, 768)).astype(np.float32), "a")
    b = _vector_dir(tmp_path / "b", rng.normal(size=(120, 768)).astype(np.float32), "b")
    index = tmp_path / "idx"
    build_index([a], index)
    real = catalog_fill.shard_time

    def stop_at_second_shard(ref, calls=[]):  # noqa: B006 - counts calls across this test
        calls.append(ref)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(ref)

    monkeypatch.setattr(catalog_fill, "shard_time", stop_at_second_shard)
    with pytest.raises(KeyboardInterrupt):
        build_index([b], index, append=True)
    monkeypatch.setattr(catalog_fill, "shard_time", real)
    res = CliRunner().invoke(cli, ["build-index", str(b), "--index", str(index), "--append"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    (head,) = [n for n, line in enumerate(lines) if "in more than one place" in line]
    assert lines[head].startswith("50 path(s)")
    assert lines[head + 1].startswith("  50: kept the index") and "shard-00000" in lines[head + 1]
    assert not any("/synthetic/" in line for line in lines)  # no per-path examples


def test_fewer_vectors_than_ivf_lists_build_exact_under_any_budget(tmp_path):
    """60 vectors under a 32K budget: too big for the budget as Flat, too few to train 64 IVF
    lists (FAISS raised); the index is exact."""
    rng = np.random.default_rng(8)
    emb = _vector_dir(tmp_path / "emb", rng.normal(size=(60, 768)).astype(np.float32), "f")
    index = tmp_path / "idx"
    res = _build_cli(str(emb), "--index", str(index), "--max-memory=32K")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["kind"] == "flat"
    assert _check(index)["images"] == 60


def test_embed_and_build_index_carry_the_photo_metadata(env, tmp_path):
    """EXIF read by `wherein embed` reaches the catalog through the shards: hits from an index
    built by embed + build-index carry the same taken / camera / gps as `wherein index`
    gives them, and --camera / --near filter on them."""
    from test_photos import exif

    photos = tmp_path / "photos"
    specs = {
        "paris.jpg": exif(
            "Canon", "Canon EOS R5", "2024:06:15 14:03:22", "+02:00", 48.8584, 2.2945
        ),
        "nyc.jpg": exif("Apple", "iPhone 15", "2023:12:24 18:00:00", "-05:00", 40.7128, -74.006),
        "lens.jpg": exif("SONY", "ILCE-7M3", "2024:08:31 23:59:59", lens="FE 35mm", orientation=1),
    }
    for name, data in specs.items():
        draw_shape(photos / name, "red", exif=data, quality=95)
    draw_shape(photos / "scan.png", "red")  # no EXIF at all

    def hits(index: Path, *args: str) -> dict[str, dict]:
        found = _cli("search", "red", "-k", "10", "--index", str(index), *args)
        fields = ("taken", "taken_source", "camera", "gps", "lens")
        listed = found["hits"] if isinstance(found, dict) else found
        return {Path(h["path"]).name: {k: h.get(k) for k in fields} for h in listed}

    _cli("index", str(photos), "--index", str(tmp_path / "direct"))
    emb = _embed(photos, tmp_path / "emb", env["models"])
    built = tmp_path / "built"
    _cli("build-index", str(emb), "--index", str(built))
    want = hits(tmp_path / "direct")
    assert want["paris.jpg"]["camera"] == "Canon EOS R5"  # the reference has them
    assert hits(built) == want
    assert list(hits(built, "--camera", "iphone")) == ["nyc.jpg"]
    assert list(hits(built, "--near", "48.8584,2.2945,2")) == ["paris.jpg"]


@pytest.mark.slow
def test_index_into_a_built_index_keeps_it_sound(standin_models, tmp_path, monkeypatch):
    """`index` adds rows to an index build-index made (their vectors stay in the catalog, past
    the end of vectors.f16): `status --check` passes, the new photo is found, and a later
    `build-index --append` still checks out."""
    monkeypatch.setenv("WHEREIN_MODELS", str(standin_models))
    _blocks(tmp_path / "a", 6, seed=4)
    draw_shape(tmp_path / "b" / "blue.png", "blue", size=(48, 40))
    _reds(tmp_path / "c", 3)
    index = tmp_path / "idx"
    _cli(
        "build-index",
        str(_embed(tmp_path / "a", tmp_path / "emb-a", standin_models)),
        "--index",
        str(index),
    )
    assert _cli("index", str(tmp_path / "b"), "--index", str(index))["embedded"] == 1
    assert _check(index)["images"] == 7
    hits = _hits(_cli("search", "blue", "--index", str(index), "-k", "1"))
    assert hits[0]["path"] == str(tmp_path / "b" / "blue.png")
    emb_c = _embed(tmp_path / "c", tmp_path / "emb-c", standin_models)
    assert _cli("build-index", str(emb_c), "--index", str(index), "--append")["added"] == 3
    assert _check(index)["images"] == 10
    hits = _hits(_cli("search", "red", "--index", str(index), "-k", "3"))
    assert {Path(h["path"]).parent for h in hits} == {tmp_path / "c"}
