"""Dataset curation (`wherein select | label | dupes | unique`) on the stand-in models (a colour world)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_run import run
from PIL import Image

from wherein.indexer.store import vectors as V
from wherein.indexer.store.index_store import IndexStore
from wherein.schemas.models import SIGLIP2
from wherein.search.curate import dupes as D
from wherein.search.curate import labels as L
from wherein.search.curate import select as S
from wherein.search.curate.unique import unique_hits
from wherein.search.export.hits import read_export
from wherein.search.export.rows import PYARROW_MISSING
from wherein.search.service.search import open_index

from conftest import draw_shape

RED = {"red_square.jpg", "red_disc.png"}
BLUE = {"blue_square.png", "blue_wide.webp"}


def names(hits) -> list[str]:
    return [Path(h["path"] if isinstance(h, dict) else h.path).name for h in hits]


def as_json(*args) -> list[dict]:
    return json.loads(run(*args, "--json").stdout)


@pytest.fixture()
def indexed(env, shapes) -> Path:
    run("index", shapes, "-q")
    return shapes


# -- select ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "colour, expected", [("red", RED), ("blue", BLUE), ("green", {"green.bmp"})]
)
def test_select_is_exactly_the_images_of_a_colour(indexed, colour, expected):
    hits = as_json("select", colour, "--min-probability", "0.5")
    assert set(names(hits)) == expected
    assert all(h["probability"] >= 0.5 for h in hits)
    # every image of that colour and nothing else: the rest of the index is far below
    others = [
        h for h in as_json("search", colour, "-k", "6") if Path(h["path"]).name not in expected
    ]
    assert all(h["probability"] < 0.1 for h in others)


def test_select_max_keeps_the_most_likely(indexed):
    full = as_json("select", "red", "-p", "0.5")
    top = as_json("select", "red", "-p", "0.5", "--max", "1")
    assert len(full) == 2 and names(top) == names(full)[:1]


def test_select_requires_a_threshold_and_text(indexed, tmp_path):
    assert "min-probability" in run("select", "red", ok=False).output
    ref = indexed / "red_square.jpg"
    res = run("select", "--like", ref, "-p", "0.5", ok=False)
    assert res.exit_code != 0


def test_copy_to_writes_the_selection_and_never_overwrites(indexed, tmp_path):
    dest = tmp_path / "red-set"
    res = run("select", "red", "-p", "0.5", "--copy-to", dest, "--paths")
    assert {Path(p).name for p in res.stdout.split()} == RED
    copied = sorted(p.name for p in dest.rglob("*") if p.is_file())
    assert copied == sorted(RED)
    for name in RED:
        assert (dest / name).read_bytes() == (indexed / name).read_bytes()
        assert not (dest / name).is_symlink()
    # a second run refuses, with a one-line error, and leaves the copies alone
    (dest / "red_disc.png").write_bytes(b"mine")
    again = run("select", "red", "-p", "0.5", "--copy-to", dest, ok=False)
    assert (
        again.exit_code == 1
        and "already exist" in again.output
        and "nothing was copied" in again.output
    )
    assert (dest / "red_disc.png").read_bytes() == b"mine"


def test_a_conflict_leaves_nothing_half_done(indexed, tmp_path):
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "red_square.jpg").write_bytes(b"already here")
    res = run("select", "red", "-p", "0.5", "--copy-to", dest, ok=False)
    assert res.exit_code == 1 and "red_square.jpg" in res.output
    assert sorted(p.name for p in dest.iterdir()) == [
        "red_square.jpg"
    ]  # red_disc.png was not copied either
    # a broken symlink is an existing target too
    dest2 = tmp_path / "out2"
    dest2.mkdir()
    os.symlink(tmp_path / "nowhere", dest2 / "red_disc.png")
    assert run("select", "red", "-p", "0.5", "--link-to", dest2, ok=False).exit_code == 1
    assert sorted(p.name for p in dest2.iterdir()) == ["red_disc.png"]


def test_link_to_makes_symlinks(indexed, tmp_path):
    dest = tmp_path / "links"
    run("select", "blue", "-p", "0.5", "--link-to", dest)
    links = {p.relative_to(dest).as_posix(): p for p in dest.rglob("*") if p.is_symlink()}
    # blue_square.png is at the top of photos/, blue_wide.webp in photos/nested: the tree is kept
    assert set(links) == {"blue_square.png", "nested/blue_wide.webp"}
    for rel, link in links.items():
        assert os.readlink(link) == str(indexed / rel)
        assert link.read_bytes() == (indexed / rel).read_bytes()


def test_same_basename_in_two_folders(env, tmp_path):
    photos = tmp_path / "photos"
    draw_shape(photos / "2023" / "x.png", "red")
    draw_shape(photos / "2024" / "x.png", "red", box=(0.1, 0.2, 0.8, 0.9))
    draw_shape(photos / "2024" / "y.png", "blue")
    run("index", photos, "-q")
    tree = tmp_path / "tree"
    run("select", "red", "-p", "0.5", "--copy-to", tree)
    assert sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*.png")) == [
        "2023/x.png",
        "2024/x.png",
    ]
    flat = tmp_path / "flat"
    hits = as_json("select", "red", "-p", "0.5", "--copy-to", flat, "--flat")
    want = sorted(f"x-{h['id']}.png" for h in hits)
    assert sorted(p.name for p in flat.iterdir()) == want
    for h in hits:
        assert (flat / f"x-{h['id']}.png").read_bytes() == Path(h["path"]).read_bytes()


def test_plan_refuses_missing_sources(indexed, tmp_path):
    with open_index() as s:
        hits = S.select(s, "red", 0.5)
    os.remove(hits[0].path)
    with pytest.raises(S.MaterialiseError, match="no longer exist"):
        S.plan(hits, tmp_path / "dest")
    assert not (tmp_path / "dest").exists()


@pytest.mark.parametrize("ext", ["csv", "jsonl", "parquet"])
def test_select_export_round_trips(indexed, tmp_path, ext):
    if ext == "parquet":
        pytest.importorskip("pyarrow")  # the [scale] extra
    out = tmp_path / f"sel.{ext}"
    printed = as_json("select", "red", "-p", "0.5", "--export", out)
    back = read_export(out)
    assert back == printed


def test_format_overrides_the_extension(indexed, tmp_path):
    out = tmp_path / "sel.txt"
    assert (
        "cannot tell the export format"
        in run("select", "red", "-p", "0.5", "--export", out, ok=False).output
    )
    run("select", "red", "-p", "0.5", "--export", out, "--format", "jsonl")
    assert set(names(read_export(out, "jsonl"))) == RED


def test_parquet_without_pyarrow_is_a_one_line_error(indexed, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow -> ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    out = tmp_path / "sel.parquet"
    res = run("select", "red", "-p", "0.5", "--export", out, ok=False)
    assert res.exit_code == 1
    assert res.stderr.strip().splitlines() == [
        f"Error: {PYARROW_MISSING}"
    ]  # checked before any work
    assert "wherein[scale]" in res.output and not out.exists()


def test_select_with_masks(indexed, tmp_path):
    out = tmp_path / "masks"
    export = tmp_path / "sel.jsonl"
    hits = as_json("select", "red", "-p", "0.5", "--mask", "--out", out, "--export", export)
    assert set(names(hits)) == RED
    for h in hits:
        assert Path(h["mask_path"]).parent == out and Path(h["mask_path"]).is_file()
        assert 0.3 < h["mask_area"] < 0.7  # the red shape covers about half of each image
    assert read_export(export) == hits


# -- labels ---------------------------------------------------------------------------------
def test_labels_are_the_models_probabilities_and_are_stored(indexed, tmp_path):
    out = tmp_path / "labels.csv"
    hits = as_json("label", "--labels", "red, blue,green", "--export", out)
    assert len(hits) == 6
    by_name = {Path(h["path"]).name: h for h in hits}
    assert (
        by_name["red_disc.png"]["label"] == "red" and by_name["blue_wide.webp"]["label"] == "blue"
    )
    assert (
        by_name["red_disc.png"]["labels"]["red"] > 0.5 > by_name["red_disc.png"]["labels"]["blue"]
    )
    # independent sigmoids: yellow matches none of the labels, so its probabilities sum to far below 1
    assert sum(by_name["yellow.gif"]["labels"].values()) < 0.2
    with open_index() as s:
        tower = s.text_tower
        text = tower.encode([f"This is a photo of {c}." for c in ("red", "blue", "green")])
        text = text / np.linalg.norm(text, axis=1, keepdims=True)
        ids, vecs = s.store.catalog.vectors_for([h["id"] for h in hits[:4]])
        vecs = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
        want = tower.probability(vecs @ text.T)
        got = np.array(
            [
                [by_id["labels"][c] for c in ("red", "blue", "green")]
                for by_id in ({h["id"]: h for h in hits}[int(i)] for i in ids)
            ]
        )
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
        model_id = s.store.catalog.get_meta("model_id")
        stored = L.read_labels(s.store.catalog)
    assert len(stored) == 18
    assert {r["template"] for r in stored} == {"This is a photo of {}."}
    assert {r["model_id"] for r in stored} == {model_id}
    db = {(Path(r["path"]).name, r["label"]): r["probability"] for r in stored}
    assert db[("red_disc.png", "red")] == pytest.approx(by_name["red_disc.png"]["labels"]["red"])
    assert read_export(out) == hits
    # the new table does not upset the consistency check
    assert json.loads(run("status", "--check", "--json").stdout)["check"]["ok"]


def test_labels_rerun_replaces_and_no_store_writes_nothing(indexed):
    run("label", "-l", "red", "--no-store")
    with IndexStore.open(os.environ["WHEREIN_INDEX"]) as store:
        assert L.read_labels(store.catalog) == []
    run("label", "-l", "red")
    run("label", "-l", "red")
    run("label", "-l", "red", "--raw")
    with IndexStore.open(os.environ["WHEREIN_INDEX"]) as store:
        rows = L.read_labels(store.catalog)
    assert len(rows) == 12  # 6 images x (template + raw), the repeated run replaced its rows
    assert {r["template"] for r in rows} == {"This is a photo of {}.", "{}"}


def test_label_rows_go_with_their_image(indexed):
    run("label", "-l", "red,blue")
    (indexed / "green.bmp").unlink()
    run("index", indexed, "-q")
    conn = sqlite3.connect(Path(os.environ["WHEREIN_INDEX"]) / "catalog.db")
    orphans = conn.execute(
        "SELECT count(*) FROM labels l LEFT JOIN images i ON i.id = l.image_id WHERE i.id IS NULL"
    ).fetchone()[0]
    conn.close()
    assert orphans == 0
    with IndexStore.open(os.environ["WHEREIN_INDEX"]) as store:
        assert len(L.read_labels(store.catalog)) == 10


def test_label_rank_is_the_relevance_rank_not_the_path_order(indexed):
    # The rows are listed by path; rank said their position in that list.
    hits = as_json("label", "-l", "red,blue", "--no-store")
    assert [h["path"] for h in hits] == sorted(h["path"] for h in hits)
    by_rank = sorted(hits, key=lambda h: h["rank"])
    assert [h["rank"] for h in by_rank] == list(range(1, len(hits) + 1))
    p = [h["probability"] for h in by_rank]
    assert all(a >= b - 1e-6 for a, b in zip(p, p[1:], strict=False))  # ties: at rank precision
    assert by_rank[0]["label"] in ("red", "blue") and by_rank[0]["probability"] > 0.5


@pytest.mark.parametrize("ext", ["csv", "jsonl", "parquet"])
def test_label_exports_round_trip(indexed, tmp_path, ext):
    if ext == "parquet":
        pytest.importorskip("pyarrow")  # the [scale] extra
    out = tmp_path / f"labels.{ext}"
    printed = as_json("label", "-l", "red,light blue", "--no-store", "--export", out)
    assert read_export(out) == printed
    assert set(printed[0]["labels"]) == {"red", "light blue"}


def test_label_arguments_are_checked():
    assert L.parse_labels(["cat, dog", "car,cat", " "]) == ["cat", "dog", "car"]
    with pytest.raises(L.LabelError):
        L.parse_labels(" , ")
    with pytest.raises(L.LabelError):
        L.check_template("a photo")
    with pytest.raises(L.LabelError):
        L.check_template("a {} of {}")
    with pytest.raises(L.LabelError):
        L.check_template("a {name}")
    assert L.prompt_for("This is a photo of {}.", " cat. ") == "This is a photo of cat."


# -- duplicates -----------------------------------------------------------------------------
@pytest.fixture()
def dupe_photos(tmp_path) -> Path:
    """Two families of copies among distinct images of the same colours."""
    root = tmp_path / "dupes"
    original = root / "red_original.jpg"
    draw_shape(original, "red", size=(640, 480), quality=95)
    img = Image.open(original)
    (root / "copies").mkdir()
    img.save(root / "copies" / "red_q60.jpg", quality=60)
    img.resize((320, 240), Image.BICUBIC).save(root / "copies" / "red_half.jpg", quality=90)
    shutil.copyfile(original, root / "copies" / "red_exact.jpg")
    os.utime(
        root / "copies" / "red_exact.jpg", (2_000_000_000, 2_000_000_000)
    )  # newer than the original
    draw_shape(root / "blue_disc.png", "blue", size=(300, 300), shape="ellipse")
    Image.open(root / "blue_disc.png").convert("RGB").save(root / "blue_disc.jpg", quality=85)
    # distinct: other colours, and the same colours in other layouts
    draw_shape(
        root / "red_disc.png", "red", size=(400, 300), shape="ellipse", box=(0.1, 0.1, 0.9, 0.9)
    )
    draw_shape(root / "red_corner.png", "red", box=(0.0, 0.0, 0.5, 1.0))
    draw_shape(root / "blue_square.png", "blue", size=(300, 300))
    draw_shape(root / "green.png", "green")
    return root


RED_FAMILY = {"red_original.jpg", "red_q60.jpg", "red_half.jpg", "red_exact.jpg"}
BLUE_FAMILY = {"blue_disc.png", "blue_disc.jpg"}


def groups_of(hits) -> list[set[str]]:
    out: dict[int, set[str]] = {}
    for h in hits:
        out.setdefault(h["group"], set()).add(Path(h["path"]).name)
    return sorted(out.values(), key=len, reverse=True)


def test_near_duplicates_are_copies_not_lookalikes(env, dupe_photos, tmp_path):
    run("index", dupe_photos, "-q")
    hits = as_json("dupes")
    assert groups_of(hits) == [RED_FAMILY, BLUE_FAMILY]
    red = [h for h in hits if Path(h["path"]).name in RED_FAMILY]
    assert all(h["group_size"] == 4 for h in red)
    keeper = [h for h in red if h["keeper"]]
    # largest resolution; the byte-identical copy ties on pixels and size, the older file wins
    assert names(keeper) == ["red_original.jpg"] and keeper[0]["match"] == "keeper"
    match = {Path(h["path"]).name: h["match"] for h in red}
    assert match["red_exact.jpg"] == "exact" and match["red_half.jpg"] == "near"
    assert all(h["score"] >= D.default_threshold(None, "wherein-standin-colour-v1") for h in hits)
    blue_keeper = [h for h in hits if h["keeper"] and Path(h["path"]).name in BLUE_FAMILY]
    assert len(blue_keeper) == 1
    assert hits[0]["keeper"]  # the keeper is listed first in its group
    # exact only: the byte-identical pair
    assert groups_of(as_json("dupes", "--exact")) == [{"red_original.jpg", "red_exact.jpg"}]
    # a lower threshold is the user's call: the red disc (cos ~0.993) joins the red family
    assert "red_disc.png" in groups_of(as_json("dupes", "--threshold", "0.99"))[0]


def test_redundant_refuses_on_standins_but_exact_copies_are_safe(env, dupe_photos):
    """The stand-ins see only colours: a list of files to delete built on them would hold
    photos that merely share a colour (`dupes --redundant | xargs gio trash`)."""
    run("index", dupe_photos, "-q")
    for out in ("--paths0", "--json"):
        r = run("dupes", "--redundant", out, ok=False)
        errors = [ln for ln in r.stderr.splitlines() if ln.startswith("Error:")]
        assert r.exit_code == 1 and r.stdout == "", r.output
        assert len(errors) == 1 and "stand-in models" in errors[0] and "--exact" in errors[0]
        assert "Traceback" not in r.output
    # byte-identical files are copies whatever the model: the copy is listed, the original kept
    exact = as_json("dupes", "--exact", "--redundant")
    assert names(exact) == ["red_exact.jpg"]


def _as_if_real_models(index: Path) -> None:
    """Mark a stand-in index as made by the real models (the space dupes reads): the
    vectors stay colour vectors, so the tests below pass the stand-ins' threshold."""
    from wherein.indexer.models.modeldir import REAL_SPACE

    with IndexStore.open(index, write=True) as store, store.catalog.transaction():
        store.catalog.set_meta("space", REAL_SPACE)


def test_redundant_always_keeps_one_of_every_group(env, dupe_photos):
    run("index", dupe_photos, "-q")
    _as_if_real_models(env["index"])
    # the original is gone since indexing: another member has to be the one kept
    (dupe_photos / "red_original.jpg").unlink()
    for args in (["--threshold", "0.998"], ["--threshold", "0.99"], ["--exact"]):
        every = as_json("dupes", *args)
        redundant = as_json("dupes", "--redundant", *args)
        assert every and redundant
        listed = {h["path"] for h in redundant}
        for members in groups_of(every):
            paths = {h["path"] for h in every if Path(h["path"]).name in members}
            kept = paths - listed
            assert len(kept) == 1, (args, members)  # one of each group stays
            (keeper,) = kept
            assert Path(keeper).exists()
        assert len(redundant) == len(every) - len(groups_of(every))
        assert not any(h["keeper"] for h in redundant)


def test_dupes_on_an_approximate_index_agree(env, dupe_photos, monkeypatch):
    monkeypatch.setattr(
        V, "choose_index", lambda n, dim, budget=None: V.IndexChoice("ivf-sq8", "IVF2,SQ8", 2, 1)
    )
    run("index", dupe_photos, "-q")
    with IndexStore.open(os.environ["WHEREIN_INDEX"]) as store:
        store.ensure_vectors(persist=False)
        assert store.vectors.choice.kind == "ivf-sq8"
        report = D.find_duplicates(store)
    assert groups_of([h.to_dict() for h in report.hits]) == [RED_FAMILY, BLUE_FAMILY]
    assert report.redundant == 4


def test_default_threshold_is_the_index_familys():
    from wherein.indexer.models import registry

    # An index from before families were recorded: by its space.
    assert D.default_threshold(None, "siglip2-vit-b16-webli") == 0.95
    assert D.default_threshold(None, None) == 0.95
    assert D.default_threshold(None, "wherein-standin-colour-v1") == 0.998
    # A recorded family says it, whatever the space is called.
    assert D.default_threshold("standin", "anything") == 0.998
    tight = registry.ModelEntry(
        dataclasses.replace(SIGLIP2, key="tight"),
        lambda md, t: None,  # type: ignore[arg-type, return-value]
        lambda md: None,  # type: ignore[arg-type, return-value]
        lambda md: ("tight:1", "-"),
        thresholds=registry.Thresholds(near_duplicate=0.9),
    )
    registry.register(tight)
    try:
        assert D.default_threshold("tight", "siglip2-vit-b16-webli") == 0.9
    finally:
        registry.unregister("tight")
    assert D.default_threshold("tight", None) == 0.95  # no longer installed: the usual cut-off


def test_keeper_rule():
    def row(path, w, h, size, mtime):
        return {"path": path, "width": w, "height": h, "size": size, "mtime_ns": mtime}

    rows = [
        row("/b.jpg", 100, 100, 900_000, 1),
        row("/a.png", 200, 100, 10, 5),
        row("/c.jpg", 200, 100, 20, 9),
        row("/d.jpg", 200, 100, 20, 3),
    ]
    ordered = sorted(rows, key=lambda r: D._keeper_key(r, True))
    assert [r["path"] for r in ordered] == ["/d.jpg", "/c.jpg", "/a.png", "/b.jpg"]
    # a missing file is never the keeper
    assert D._keeper_key(rows[3], False) > D._keeper_key(rows[1], True)


def test_union_find_chains_pairs():
    uf = D.UnionFind()
    for a, b in [(1, 2), (3, 4), (2, 5), (6, 6)]:
        uf.union(a, b)
    assert sorted(uf.groups()) == [[1, 2, 5], [3, 4]]


@pytest.mark.parametrize("ext", ["csv", "jsonl", "parquet"])
def test_dupes_export_round_trips(env, dupe_photos, tmp_path, ext):
    if ext == "parquet":
        pytest.importorskip("pyarrow")  # the [scale] extra
    run("index", dupe_photos, "-q")
    out = tmp_path / f"dupes.{ext}"
    printed = as_json("dupes", "--export", out)
    assert read_export(out) == printed


def test_dupes_in_the_shapes_fixture(indexed):
    # blue_wide.webp is blue_square.png's drawing stretched to 480x200: after SigLIP's squash
    # to 224x224 they are the same picture. The two reds (square vs disc) are not copies.
    hits = as_json("dupes")
    assert groups_of(hits) == [BLUE]
    # the keeper has the most pixels (480x200 > 320x240) although its file is the smaller one
    keeper = [h for h in hits if h["keeper"]]
    assert names(keeper) == ["blue_wide.webp"] and keeper[0]["size"] < hits[1]["size"]
    table = run("dupes")
    assert (
        "KEEP" in table.stdout
        and "1 group(s) (cosine >= 0.998); 1 redundant file(s)" in table.stderr
    )


def test_no_duplicates_among_distinct_images(env, tmp_path):
    photos = tmp_path / "photos"
    for colour in ("red", "green", "blue"):
        draw_shape(photos / f"{colour}_square.png", colour)
        draw_shape(photos / f"{colour}_disc.png", colour, shape="ellipse", box=(0.1, 0.1, 0.9, 0.9))
        draw_shape(photos / f"{colour}_left.png", colour, box=(0.0, 0.0, 0.5, 1.0))
    run("index", photos, "-q")
    res = run("dupes")
    assert res.stdout == "" and "0 group(s)" in res.stderr


# -- uniqueness -----------------------------------------------------------------------------
def test_the_odd_image_is_the_most_unique(env, tmp_path):
    photos = tmp_path / "photos"
    for i in range(6):
        draw_shape(photos / f"red_{i}.png", "red", box=(0.1 + 0.03 * i, 0.1, 0.8, 0.9))
        draw_shape(photos / f"blue_{i}.png", "blue", box=(0.1, 0.1 + 0.03 * i, 0.9, 0.8))
    draw_shape(photos / "odd_purple.png", "purple")
    run("index", photos, "-q")
    hits = as_json("unique", "--neighbours", "3", "-k", "5")
    assert len(hits) == 5
    assert names(hits)[0] == "odd_purple.png"
    u = [h["uniqueness"] for h in hits]
    assert u == sorted(u, reverse=True) and u[0] > u[1] + 0.1
    assert all(h["k"] == 3 for h in hits)
    assert all(h["score"] == pytest.approx(1 - h["uniqueness"], abs=1e-5) for h in hits)
    paths = run("unique", "--neighbours", "3", "--top", "1", "--paths").stdout
    assert paths == str(photos / "odd_purple.png") + "\n"


def test_uniqueness_is_the_mean_distance_to_the_k_nearest(indexed, tmp_path):
    with IndexStore.open(os.environ["WHEREIN_INDEX"]) as store:
        hits = unique_hits(store, k=2, top=None)
        ids, vecs = store.catalog.vectors_for([h.id for h in hits])
    vecs = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    cos = vecs @ vecs.T
    np.fill_diagonal(cos, -np.inf)
    want = {int(i): float(np.mean(1 - np.sort(row)[-2:])) for i, row in zip(ids, cos)}
    for h in hits:
        assert h.extra["uniqueness"] == pytest.approx(want[h.id], abs=1e-5)
    assert len(hits) == 6
    # k larger than the index shrinks to n - 1
    out = tmp_path / "u.csv"
    back = as_json("unique", "--neighbours", "50", "--all", "--export", out)
    assert {h["k"] for h in back} == {5} and read_export(out) == back


def test_every_command_prints_schema_valid_hits(indexed):
    import jsonschema

    from wherein.schemas.records import HIT_SCHEMA_PATH

    validator = jsonschema.Draft202012Validator(json.loads(HIT_SCHEMA_PATH.read_text()))
    for cmd in (
        ["select", "red", "-p", "0.5"],
        ["label", "-l", "red,blue"],
        ["dupes"],
        ["unique", "--all"],
    ):
        hits = as_json(*cmd)
        assert hits, cmd
        for h in hits:
            validator.validate(h)
    assert "--format only applies" in run("unique", "--format", "csv", ok=False).output


def test_commands_share_the_output_formats(indexed):
    for cmd in (
        ["select", "red", "-p", "0.5"],
        ["label", "-l", "red"],
        ["dupes", "--threshold", "0.9"],
        ["unique", "--neighbours", "2"],
    ):
        js = as_json(*cmd)
        nl = [json.loads(line) for line in run(*cmd, "--nl").stdout.splitlines()]
        assert nl == js, cmd
        assert run(*cmd, "--paths").stdout == "".join(h["path"] + "\n" for h in js)
        header = run(*cmd, "--csv").stdout.splitlines()[0].split(",")
        assert header[:3] == ["rank", "path", "score"]


def test_curation_commands_do_not_write_faiss_or_break_the_index(indexed):
    index = Path(os.environ["WHEREIN_INDEX"])
    before = (index / "vectors.faiss").stat().st_mtime_ns
    run("dupes")
    run("unique")
    run("label", "-l", "red")
    assert (index / "vectors.faiss").stat().st_mtime_ns == before
    conn = sqlite3.connect(index / "catalog.db")
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
