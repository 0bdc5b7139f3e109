"""The scale-out path: Ray Data (local mode) embedding into shards, resume, errors, sharded index build."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

pytestmark = pytest.mark.scale

N_IMAGES = 240


def _make_images(root: Path, n: int) -> None:
    """Tiny images of 4x4 colour blocks: 12 families (a base pattern with 2 blocks changed), so
    neighbours cluster the way near-duplicate photos do. Cheap to make."""
    rng = np.random.default_rng(7)
    bases = rng.integers(0, 256, (12, 4, 4, 3), dtype=np.uint8)
    for i in range(n):
        blocks = bases[i % 12].copy()
        for _ in range(2):
            blocks[rng.integers(4), rng.integers(4)] = rng.integers(0, 256, 3)
        img = Image.fromarray(blocks).resize((48, 40), Image.NEAREST)
        sub = root / ("a" if i % 3 else "b")
        sub.mkdir(parents=True, exist_ok=True)
        img.save(sub / f"img{i:04d}.{('png', 'jpg', 'webp')[i % 3]}")
    (root / "broken.jpg").write_bytes(b"this is not an image")
    (root / "empty.png").write_bytes(b"")
    Image.new("RGB", (64, 64), (200, 10, 10)).save(root / "whole.jpg", quality=90)
    data = (root / "whole.jpg").read_bytes()
    (root / "truncated.jpg").write_bytes(data[: len(data) // 2])


def _shard_vectors(out: Path) -> dict[str, np.ndarray]:
    import pyarrow.parquet as pq

    from wherein.indexer.scale.shards import embeddings

    got = {}
    for f in sorted((out / "shards").glob("shard-?????.parquet")):
        t = pq.read_table(f)
        for uri, v in zip(t.column("uri").to_pylist(), embeddings(t, 768), strict=True):
            got[uri] = v
    return got


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("collection")
    _make_images(root, N_IMAGES)
    return root


@pytest.fixture(scope="module")
def ray_out(images, standin_models, tmp_path_factory) -> Path:
    from wherein.indexer.scale.embed import embed

    out = tmp_path_factory.mktemp("ray") / "emb"
    stats = embed([str(images)], out, standin_models, engine="ray", shard_size=50)
    assert stats.complete and stats.written == stats.shards == 5
    assert stats.embedded == N_IMAGES + 1 and stats.failed == 3
    return out


def test_ray_vectors_match_wherein_index(images, ray_out, env):
    from wherein.indexer.store.index_store import IndexStore
    from wherein.search.cli import cli

    res = CliRunner().invoke(cli, ["index", str(images), "-q"])
    assert res.exit_code == 0, res.output
    with IndexStore.open(env["index"]) as store:
        cat = store.catalog
        ids, vecs = cat.vectors_for(cat.embedded_ids())
        rows = cat.rows_by_ids(ids)
        local = {rows[i]["path"]: v for i, v in zip(ids.tolist(), vecs, strict=True)}
    ray = _shard_vectors(ray_out)
    assert set(ray) == set(local) and len(ray) == N_IMAGES + 1
    diff = max(float(np.abs(ray[p] - local[p]).max()) for p in local)
    assert diff < 1e-6


def test_local_engine_writes_identical_shards(images, ray_out, standin_models, tmp_path):
    import pyarrow.parquet as pq

    from wherein.indexer.scale.embed import embed

    stats = embed([str(images)], tmp_path / "emb", standin_models, engine="local", shard_size=50)
    assert stats.complete
    for f in sorted((ray_out / "shards").glob("*.parquet")):
        assert pq.read_table(f).equals(pq.read_table(tmp_path / "emb" / "shards" / f.name)), f.name
    manifest = json.loads((ray_out / "manifest.json").read_text())
    assert manifest["dim"] == 768 and manifest["count"] == N_IMAGES + 1 and manifest["errors"] == 3
    assert sum(s["count"] for s in manifest["shards"]) == N_IMAGES + 1
    assert (
        str(pq.read_schema(ray_out / manifest["shards"][0]["file"]).field("embedding").type)
        == "fixed_size_list<element: float>[768]"
    )


def test_error_shard_lists_broken_files_with_reasons(images, ray_out):
    import pyarrow as pa
    import pyarrow.parquet as pq

    errors = pa.concat_tables(
        pq.read_table(f) for f in sorted((ray_out / "shards").glob("*.errors.parquet"))
    )
    reasons = {
        Path(u).name: r
        for u, r in zip(errors["uri"].to_pylist(), errors["reason"].to_pylist(), strict=True)
    }
    assert set(reasons) == {"broken.jpg", "empty.png", "truncated.jpg"}
    assert reasons["broken.jpg"].startswith("not an image")
    assert reasons["empty.png"] == "empty file"
    assert "truncated" in reasons["truncated.jpg"]
    assert "truncated.jpg" not in {Path(u).name for u in _shard_vectors(ray_out)}


@pytest.mark.parametrize(("budget", "kind"), [("100K", "ivf-sq8-ondisk"), ("500K", "ivf-sq8")])
def test_build_index_ivf_recall_and_lookup(
    ray_out, standin_models, tmp_path, monkeypatch, budget, kind
):
    from wherein.indexer.store.index_store import IndexStore
    from wherein.search.cli import cli

    monkeypatch.setenv("WHEREIN_MODELS", str(standin_models))
    index = tmp_path / "idx"
    res = CliRunner().invoke(
        cli, ["build-index", str(ray_out), "--index", str(index), "--max-memory", budget, "--json"]
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["kind"] == kind
    res = CliRunner().invoke(cli, ["status", "--check", "--index", str(index), "--json"])
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout)
    assert info["check"]["ok"] and info["images"] == N_IMAGES + 1 and info["skipped_count"] == 3
    assert info["vector_index"]["kind"] == kind

    vecs = _shard_vectors(ray_out)
    uris = sorted(vecs)
    data = np.stack([vecs[u] for u in uris])
    rng = np.random.default_rng(1)
    queries = data[rng.choice(len(data), 40, replace=False)] + rng.normal(
        0, 0.02, (40, 768)
    ).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    exact = np.argsort(-(queries @ data.T), axis=1)[:, :10]
    found = []
    with IndexStore.open(index) as store:
        assert store.ensure_vectors() == ""  # current as built: no rebuild on open
        # What `wherein search` does on an IVF index: over-fetch 4x, re-score with the catalog's vectors.
        _, cand = store.vectors.search(queries, 40)
        for q, row in zip(queries, cand, strict=True):
            ids, v = store.catalog.vectors_for(row[row >= 0])
            top = ids[np.argsort(-(v @ q))[:10]]
            rows = store.catalog.rows_by_ids(top)
            found.append({rows[int(i)]["path"] for i in top})
    recall = np.mean(
        [len(f & {uris[j] for j in ex}) / 10 for f, ex in zip(found, exact, strict=True)]
    )
    assert recall >= 0.95

    res = CliRunner().invoke(cli, ["search", "red", "--index", str(index), "-k", "3", "--json"])
    assert res.exit_code == 0, res.output
    assert "img" in res.output


def test_resume_after_killed_run(images, ray_out, standin_models, tmp_path):
    import pyarrow.parquet as pq

    from wherein.indexer.scale.embed import embed

    out = tmp_path / "emb"
    cmd = [
        sys.executable,
        "-m",
        "wherein.search.cli",
        "embed",
        str(images),
        "--out",
        str(out),
        "--engine",
        "ray",
        "--shard-size",
        "5",
        "--models",
        str(standin_models),
        "-q",
        "--json",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-c", "from wherein.search.cli import cli; cli()", *cmd[3:]],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 90
    try:
        while not list((out / "shards").glob("*.done")) if (out / "shards").is_dir() else True:
            assert proc.poll() is None, "embed ended before any shard was done"
            assert time.monotonic() < deadline
            time.sleep(0.005)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and the Ray processes it started
        proc.wait()
    done = sorted(p.name for p in (out / "shards").glob("*.done"))
    total = (N_IMAGES + 4 + 4) // 5
    assert 0 < len(done) < total
    before = {n: (out / "shards" / n).read_text() for n in done}

    stats = embed([str(images)], out, standin_models, engine="ray")
    assert stats.resumed and stats.complete
    assert stats.done_before == len(done) and stats.written == total - len(done)
    assert {n: (out / "shards" / n).read_text() for n in done} == before  # untouched
    assert stats.embedded + stats.failed == N_IMAGES + 4 - 5 * len(done)
    vecs, ref = _shard_vectors(out), _shard_vectors(ray_out)
    assert set(vecs) == set(ref) and all(np.array_equal(vecs[u], ref[u]) for u in ref)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] and manifest["count"] == N_IMAGES + 1
    assert (
        sum(pq.read_metadata(out / s["file"]).num_rows for s in manifest["shards"]) == N_IMAGES + 1
    )


def test_non_utf8_name_survives_embed_and_build_index(env, tmp_path):
    """A Latin-1 file name goes through the parquet shards and comes out as the same bytes."""
    from wherein.search.cli import cli

    from conftest import draw_shape

    root = tmp_path / "src"
    latin1 = os.fsdecode(os.fsencode(root) + b"/caf\xe9.png")
    draw_shape(Path(latin1), "red")
    draw_shape(root / "blue.png", "blue")
    out, index = tmp_path / "emb", tmp_path / "idx"
    runner = CliRunner()
    res = runner.invoke(cli, ["embed", str(root), "--out", str(out), "--engine", "local"])
    assert res.exit_code == 0, res.output
    again = runner.invoke(cli, ["embed", str(root), "--out", str(out), "--engine", "local"])
    assert again.exit_code == 0, again.output  # resume reads the plan back
    res = runner.invoke(cli, ["build-index", str(out), "--index", str(index)])
    assert res.exit_code == 0, res.output
    hits = runner.invoke(cli, ["search", "red", "--index", str(index), "--paths0", "-k", "2"])
    assert hits.exit_code == 0, hits.output
    assert hits.stdout_bytes.split(b"\0")[:2] == [
        os.fsencode(latin1),
        os.fsencode(root / "blue.png"),
    ]
