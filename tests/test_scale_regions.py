"""Regions on the scale path: `wherein embed --regions` writes each large photo's regions into
the shards, `build-index` keeps them and the setting, and the index then searches exactly as
one made by `wherein index --regions` of the same photos. An index with regions takes only
shards embedded with them."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from cli_run import run
from PIL import Image
from test_regions import SPECK, draw_photos

from wherein.indexer.store.index_store import IndexStore
from wherein.schemas.records import BUILD_INDEX_SCHEMA_PATH, EMBED_RUN_SCHEMA_PATH

pytestmark = pytest.mark.scale

QUERIES = ("red", "yellow", "blue", "green")
F16 = 1e-3  # build-index re-scores with float16 vectors (vectors.f16) by default


def found(index: Path, query: str, *more: str) -> dict[str, dict]:
    out = json.loads(run("search", query, "-k", "40", "--index", index, *more, "--json").stdout)
    return {f"{Path(h['path']).name}|{h['region']}": h for h in out}


def same_search(a: Path, b: Path, tol: float = 1e-5) -> None:
    """The same hits, regions and probabilities (within tol), hit by hit and item by item."""
    for query in QUERIES:
        for more in ((), ("--frames",)):
            ha, hb = found(a, query, *more), found(b, query, *more)
            assert ha.keys() == hb.keys(), (query, more)
            for key, h in ha.items():
                assert abs(h["probability"] - hb[key]["probability"]) < tol, (query, more, key)


def tiled(index: Path) -> tuple[str | None, tuple[int, int], int]:
    """(meta regions, (photos cut, region items), FAISS vectors - embedded rows)."""
    with IndexStore.open(index) as store:
        cat = store.catalog
        gap = store.vectors.index.ntotal - cat.count_embedded()
        return cat.get_meta("regions"), cat.count_tiled(), gap


@pytest.fixture()
def photos(tmp_path) -> Path:
    draw_photos(tmp_path / "photos")
    return tmp_path / "photos"


def test_build_index_of_region_shards_searches_as_index_regions(env, photos, tmp_path):
    run("index", photos, "-q", "--regions", "--index", tmp_path / "local")
    out = json.loads(run("embed", photos, "--out", tmp_path / "emb", "--regions", "--json").stdout)
    assert out["tiling"] is not None and out["regions"] == tiled(tmp_path / "local")[1][1] > 0
    # Re-scored with float32 vectors, as `wherein index` keeps them: the same figures.
    built = json.loads(run("build-index", tmp_path / "emb", "--index", tmp_path / "built",
                           "--rescore", "float32", "--json").stdout)  # fmt: skip
    assert built["regions"] == out["tiling"] and built["region_items"] == out["regions"]
    for doc, schema in ((out, EMBED_RUN_SCHEMA_PATH), (built, BUILD_INDEX_SCHEMA_PATH)):
        jsonschema.Draft202012Validator(json.loads(schema.read_text())).validate(doc)
    assert tiled(tmp_path / "built") == tiled(tmp_path / "local")
    same_search(tmp_path / "local", tmp_path / "built")
    (speck,) = [h for h in found(tmp_path / "built", "red").values() if "speck" in h["path"]]
    x0, y0, x1, y1 = speck["region"]  # where the small square is, whole
    x, y, side = SPECK
    assert x0 <= x and y0 <= y and x + side <= x1 and y + side <= y1

    # The index keeps the setting: a plain `wherein index` cuts a new photo, nothing else.
    img = Image.open(photos / "speck.png").transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    img.save(photos / "flipped.png")
    report = json.loads(run("index", photos, "--index", tmp_path / "built", "--json").stdout)
    assert (report["embedded"], report["photos_cut"], report["regions"]) == (1, 0, 1)
    assert run("status", "--check", "--index", tmp_path / "built").exit_code == 0


def test_ray_engine_writes_the_same_region_shards(env, photos, tmp_path):
    import pyarrow.parquet as pq

    from wherein.indexer.scale.embed import embed

    stats = {}
    for engine in ("local", "ray"):
        stats[engine] = embed([str(photos)], tmp_path / engine, env["models"], engine=engine,
                              shard_size=3, regions=True)  # fmt: skip
        assert stats[engine].complete
    assert stats["ray"].regions == stats["local"].regions > 0
    for f in sorted((tmp_path / "local" / "shards").glob("shard-?????.parquet")):
        local, ray = pq.read_table(f), pq.read_table(tmp_path / "ray" / "shards" / f.name)
        assert local.drop(["embedding"]).equals(ray.drop(["embedding"])), f.name
        a, b = (np.stack(t.column("embedding").to_pylist()) for t in (local, ray))
        assert np.abs(a - b).max() < 1e-5, f.name


def test_an_index_with_regions_refuses_shards_without(env, photos, tmp_path):
    run("embed", photos, "--out", tmp_path / "plain", "-q")
    run("embed", photos, "--out", tmp_path / "cut", "--regions", "-q")
    # Into an index with regions: one line, nothing written.
    run("build-index", tmp_path / "cut", "--index", tmp_path / "idx", "-q")
    before = tiled(tmp_path / "idx")
    res = run("build-index", tmp_path / "plain", "--index", tmp_path / "idx", "--append", ok=False)
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert res.output.startswith("Error: ") and "--regions" in res.output
    assert tiled(tmp_path / "idx") == before
    # Beside shards with regions, into a new index: refused before the index is made.
    res = run("build-index", tmp_path / "cut", tmp_path / "plain", "--index", tmp_path / "new",
              ok=False)  # fmt: skip
    assert res.exit_code != 0 and "--regions" in res.output and not (tmp_path / "new").exists()
    # A resumed embed keeps its plan: regions asked of a plan made without them are refused.
    res = run("embed", photos, "--out", tmp_path / "plain", "--regions", ok=False)
    assert res.exit_code != 0 and "without --regions" in res.output


def test_region_shards_give_a_plain_index_regions(env, photos, tmp_path):
    run("embed", photos, "--out", tmp_path / "plain", "-q")
    run("embed", photos, "--out", tmp_path / "cut", "--regions", "-q")
    run("build-index", tmp_path / "plain", "--index", tmp_path / "idx", "-q")
    assert tiled(tmp_path / "idx") == (None, (0, 0), 0)
    # The newer shards replace every photo: the old rows leave FAISS, regions and all.
    res = run("build-index", tmp_path / "cut", "--index", tmp_path / "idx", "--append")
    assert "keeps regions of large photos from now on" in res.output
    name, (cut, regions), gap = tiled(tmp_path / "idx")
    assert name is not None and cut == 7 and regions > 0 and gap == 0
    run("index", photos, "-q", "--regions", "--index", tmp_path / "local")
    same_search(tmp_path / "local", tmp_path / "idx", F16)
    # And again (a newer run of the same photos): its rows replace the ones with regions.
    run("embed", photos, "--out", tmp_path / "again", "--regions", "-q")
    run("build-index", tmp_path / "again", "--index", tmp_path / "idx", "--append", "-q")
    assert tiled(tmp_path / "idx")[1:] == ((7, regions), 0)
    assert run("status", "--check", "--index", tmp_path / "idx").exit_code == 0
    same_search(tmp_path / "local", tmp_path / "idx", F16)
    # A later `wherein index` into it (vectors.f16 beside the catalog's) cuts a new photo.
    img = Image.open(photos / "speck.png").transpose(Image.Transpose.FLIP_TOP_BOTTOM)
    img.save(photos / "flipped.png")
    report = json.loads(run("index", photos, "--index", tmp_path / "idx", "--json").stdout)
    assert (report["embedded"], report["photos_cut"], report["regions"]) == (1, 0, 1)
    assert run("status", "--check", "--index", tmp_path / "idx").exit_code == 0
    assert any(k.startswith("flipped.png|[") for k in found(tmp_path / "idx", "red", "--frames"))


def test_a_resumed_embed_cuts_as_its_plan_says(env, photos, tmp_path):
    """A plan made when another tiling was the default (pyramid-v1) is resumed with that
    tiling, as an index keeps cutting with the tiling it names; one this wherein does not
    know is refused."""
    import shutil

    import pyarrow.parquet as pq

    from wherein.indexer.kinds.registry import named
    from wherein.indexer.models.modeldir import ModelDir
    from wherein.indexer.models.registry import entry_for
    from wherein.indexer.regions import DEFAULT_TILING, TILINGS

    emb = tmp_path / "emb"
    run("embed", photos, "--out", emb, "--regions", "-q")
    plan = json.loads((emb / "plan.json").read_text())
    assert plan["tiling"] == DEFAULT_TILING.name
    shutil.rmtree(emb / "shards")  # as if no shard was done yet, under an older plan
    (emb / "shards").mkdir()
    (emb / "plan.json").write_text(json.dumps({**plan, "tiling": "pyramid-v1"}))
    out = json.loads(run("embed", photos, "--out", emb, "--regions", "--json").stdout)
    assert out["tiling"] == "pyramid-v1"
    rows = pq.read_table(emb / "shards" / "shard-00000.parquet").to_pylist()
    got = {}
    for r in rows:
        got.setdefault(Path(r["uri"]).name, []).append(
            None if r["x0"] is None else (r["x0"], r["y0"], r["x1"], r["y1"])
        )
    spec = entry_for(ModelDir(env["models"])).spec.image

    def boxes(name: str, tiling) -> list:
        """The whole view, then its regions in the shards' order (by box)."""
        res = named("photo").prepare((photos / name).read_bytes(), spec, True, 0, tiling)
        return [None, *sorted(loc.box for loc, _ in res.items if loc.box is not None)]

    assert got == {name: boxes(name, TILINGS["pyramid-v1"]) for name in got}
    assert any(got[name] != boxes(name, DEFAULT_TILING) for name in got)
    # A tiling from a newer wherein: one line, nothing embedded.
    shutil.rmtree(emb / "shards")
    (emb / "shards").mkdir()
    (emb / "plan.json").write_text(json.dumps({**plan, "tiling": "pyramid-v99"}))
    res = run("embed", photos, "--out", emb, ok=False)
    assert res.exit_code != 0 and "newer wherein" in res.output and "Traceback" not in res.output
    assert not list((emb / "shards").iterdir())


def set_meta(index: Path, key: str, value: object) -> None:
    """Write one catalog setting behind wherein's back (an index of a newer wherein)."""
    import sqlite3

    with sqlite3.connect(index / "catalog.db") as conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = ?", (json.dumps(value), key))
    conn.close()


def folder_state(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_embed_for_an_index_cuts_its_photos_as_the_index_does(env, photos, tmp_path):
    """`embed --for-index I` without --regions: the shards carry regions with I's tiling, and
    build-index appends them to I (shards without regions it refuses); new photos get region
    hits. WHEREIN_INDEX does not stand in for --for-index."""
    idx = tmp_path / "idx"
    run("index", photos, "-q", "--regions", "--index", idx)
    draw_photos(tmp_path / "more")
    out = json.loads(run("embed", tmp_path / "more", "--out", tmp_path / "emb", "--for-index", idx,
                         "--json").stdout)  # fmt: skip
    res = run("embed", tmp_path / "more", "--out", tmp_path / "emb", "--for-index", idx)  # resumed
    assert f"--index {idx} --append" in res.output  # the next step names the index
    name, (cut, regions), _ = tiled(idx)
    assert out["tiling"] == name and out["regions"] == regions > 0
    run("build-index", tmp_path / "emb", "--index", idx, "--append", "-q")
    assert tiled(idx)[1] == (2 * cut, 2 * regions)
    assert run("status", "--check", "--index", idx).exit_code == 0
    (speck,) = [
        h for h in found(idx, "red").values() if Path(h["path"]) == tmp_path / "more" / "speck.png"
    ]
    x0, y0, x1, y1 = speck["region"]
    x, y, side = SPECK
    assert x0 <= x and y0 <= y and x + side <= x1 and y + side <= y1

    unasked = run("embed", tmp_path / "more", "--out", tmp_path / "emb0", "--json",
                  env={"WHEREIN_INDEX": str(idx)})  # fmt: skip
    assert json.loads(unasked.stdout)["tiling"] is None

    # The index's own tiling, not today's default: one an older wherein cut by.
    set_meta(idx, "regions", "pyramid-v1")
    out = json.loads(run("embed", tmp_path / "more", "--out", tmp_path / "emb1", "--for-index", idx,
                         "--json").stdout)  # fmt: skip
    assert out["tiling"] == "pyramid-v1"


def test_embed_for_an_index_reads_it_and_refuses_in_one_line(env, photos, tmp_path):
    """An index without regions gives none (--regions still asks for them); a folder that is
    no index, or an index cut by a tiling this wherein does not know, is refused before --out
    is made; a newer wherein's catalog is read for its setting and left as it was."""
    from wherein.indexer.regions import DEFAULT_TILING

    plain = tmp_path / "plain"
    run("index", photos, "-q", "--index", plain)
    out = json.loads(run("embed", photos, "--out", tmp_path / "e1", "--for-index", plain,
                         "--json").stdout)  # fmt: skip
    assert (out["tiling"], out["regions"]) == (None, 0)
    out = json.loads(run("embed", photos, "--out", tmp_path / "e2", "--for-index", plain,
                         "--regions", "--json").stdout)  # fmt: skip
    assert out["tiling"] is not None and out["regions"] > 0

    (tmp_path / "empty").mkdir()
    for index in (tmp_path / "empty", tmp_path / "nowhere"):
        res = run("embed", photos, "--out", tmp_path / "e3", "--for-index", index, ok=False)
        assert res.exit_code != 0 and "no wherein index" in res.output
        assert "Traceback" not in res.output
        assert res.output.startswith("Error: ") and len(res.output.strip().splitlines()) == 1
        assert not (tmp_path / "e3").exists() and not (tmp_path / "nowhere").exists()

    newer = tmp_path / "newer"
    run("index", photos, "-q", "--regions", "--index", newer)
    set_meta(newer, "schema_version", 99)
    before = folder_state(newer)
    out = json.loads(run("embed", photos, "--out", tmp_path / "e4", "--for-index", newer,
                         "--json").stdout)  # fmt: skip
    assert out["tiling"] == DEFAULT_TILING.name and out["regions"] > 0
    after = folder_state(newer)
    # Not a byte written: SQLite's own -shm (and an empty -wal) may appear beside a WAL
    # catalog opened read-only in a writable folder (mode=ro cannot remove them on close).
    assert {k: after[k] for k in before} == before
    assert set(after) - set(before) <= {"catalog.db-shm", "catalog.db-wal"}
    assert after.get("catalog.db-wal", b"") == b""

    set_meta(newer, "regions", "pyramid-v99")
    res = run("embed", photos, "--out", tmp_path / "e5", "--for-index", newer, ok=False)
    assert res.exit_code != 0 and "newer wherein" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "e5").exists()
