"""`wherein search` and wherein.search.service.search end to end with the stand-in models (a colour world)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import types
from pathlib import Path

import faiss
import jsonschema
import numpy as np
import pytest
from cli_run import run, search_json

from wherein.indexer.store import vectors as V
from wherein.schemas.errors import WhereinError
from wherein.schemas.records import HIT_SCHEMA_PATH, Hit
from wherein.search import output
from wherein.search.service.search import Query, QueryError, Searcher, open_index

from conftest import draw_shape

RED = {"red_square.jpg", "red_disc.png"}
BLUE = {"blue_square.png", "blue_wide.webp"}


def names(hits) -> list[str]:
    return [Path(h["path"] if isinstance(h, dict) else h.path).name for h in hits]


@pytest.fixture()
def indexed(env, shapes) -> Path:
    run("index", shapes, "-q")
    return shapes


@pytest.fixture()
def validator():
    schema = json.loads(HIT_SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


# -- ranking -------------------------------------------------------------------------
@pytest.mark.parametrize("colour, expected", [("red", RED), ("blue", BLUE)])
def test_colour_query_ranks_matching_images_first(indexed, colour, expected):
    hits = search_json(f"a {colour} shape")
    assert set(names(hits[:2])) == expected
    assert all(h["probability"] > 0.5 for h in hits[:2])
    assert all(h["probability"] < 0.1 for h in hits[2:])
    assert [h["rank"] for h in hits] == list(range(1, len(hits) + 1))


def test_probability_is_sigmoid_of_the_models_own_scale_and_bias(indexed):
    # stand-in calibration: p = sigmoid(16 cos - 4)
    for h in search_json("red"):
        assert h["probability"] == pytest.approx(1 / (1 + np.exp(-(16 * h["score"] - 4))), abs=1e-6)


def test_minus_removes_a_colour(indexed):
    both = search_json("red", "+", "blue", "-k", "4")
    assert set(names(both)) == RED | BLUE
    minus = search_json("red", "+", "blue", "-", "blue")
    assert set(names(minus[:2])) == RED
    blue_hits = [h for h in minus if Path(h["path"]).name in BLUE]
    assert all(h["probability"] < 0.5 for h in blue_hits)
    # --subtract is the same thing as an option
    assert names(search_json("red + blue", "--subtract", "blue")) == names(minus)


def test_weights_tilt_the_ranking(indexed):
    assert set(names(search_json("red:3 + blue", "-k", "2"))) == RED
    assert set(names(search_json("red + blue:3", "-k", "2"))) == BLUE


# -- selection -------------------------------------------------------------------------
@pytest.mark.parametrize("colour, expected", [("red", RED), ("blue", BLUE), ("purple", set())])
def test_min_probability_selects_exactly_the_matching_set(indexed, colour, expected):
    hits = search_json(colour, "--min-probability", "0.5")
    assert set(names(hits)) == expected
    assert len(hits) == len(expected)


def test_min_probability_returns_all_matches_not_just_top_k(env, shapes):
    for i in range(12):
        draw_shape(shapes / "more" / f"red_{i}.png", "red", box=(0.1 + i * 0.01, 0.1, 0.9, 0.9))
    run("index", shapes, "-q")
    assert len(search_json("red")) == 10  # the default k
    hits = search_json("red", "-p", "0.5")
    assert len(hits) == 14
    assert {n for n in names(hits)} >= RED
    assert len(search_json("red", "-p", "0.5", "-k", "3")) == 3


def test_min_score_is_a_cosine_cut(indexed):
    hits = search_json("green", "--min-score", "0.3")
    assert names(hits) == ["green.bmp"]


def test_each_thread_reads_its_own_searchs_warnings(indexed, env):
    """A server's request threads share one Searcher: a warning belongs to the search that
    caused it, not to whichever search ran last."""
    seen: dict[str, list[str]] = {}
    searched = threading.Barrier(2)
    with open_index(env["index"], env["models"]) as s:

        def ask(name: str, under: str | None) -> None:
            s.search("red", k=1, under=under)
            searched.wait(timeout=60)  # both searches done before either reads
            seen[name] = list(s.last_warnings)

        threads = [
            threading.Thread(target=ask, args=("elsewhere", "/nowhere/at/all")),
            threading.Thread(target=ask, args=("anywhere", None)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    assert seen["anywhere"] == []
    assert len(seen["elsewhere"]) == 1 and "/nowhere/at/all" in seen["elsewhere"][0]


def test_glob_matches_a_bracket_written_as_a_set(indexed):
    draw_shape(indexed / "red[1].png", "red")
    run("index", indexed, "-q")
    assert names(search_json("red", "--glob", "red[[]1].png")) == ["red[1].png"]
    assert names(search_json("red", "--glob", "*[]]*", "-k", "3")) == ["red[1].png"]


def test_under_and_glob_filters_still_return_k(indexed):
    nested = indexed / "nested"
    hits = search_json("red", "--under", nested, "-k", "2")
    # no red image lives under nested/: still 2 hits, all from there
    assert len(hits) == 2 and all(h["path"].startswith(str(nested) + os.sep) for h in hits)
    assert names(search_json("blue", "--under", nested, "-k", "1")) == ["blue_wide.webp"]
    png = search_json("red", "--glob", "*.PNG")
    assert names(png)[0] == "red_disc.png" and all(n.endswith(".png") for n in names(png))
    assert set(names(search_json("yellow", "--glob", "nested/*", "-k", "5"))) == {
        "blue_wide.webp",
        "yellow.gif",
    }
    assert names(search_json("red", "--glob", "*.gif", "-k", "1")) == ["yellow.gif"]
    assert search_json("red", "--glob", "*.tiff") == []
    # a filter combines with a threshold
    assert names(search_json("blue", "-p", "0.5", "--under", nested)) == ["blue_wide.webp"]


def test_filters_and_thresholds_on_an_ivf_index(env, shapes, monkeypatch):
    """An approximate index: exact re-scoring, range search, and nprobe widened for narrow filters."""
    for i in range(10):
        draw_shape(shapes / "more" / f"green_{i}.png", "green", box=(0.1, 0.1 + i * 0.02, 0.9, 0.9))
    monkeypatch.setattr(
        V, "choose_index", lambda n, dim, budget=None: V.IndexChoice("ivf-sq8", "IVF4,SQ8", 4, 1)
    )
    run("index", shapes, "-q")
    with open_index() as s:
        s.store.ensure_vectors(persist=False)
        assert s.index_kind == "ivf-sq8"
        assert set(names(s.search("red", k=2))) == RED
        assert set(names(s.search("blue", min_probability=0.5))) == BLUE
        assert len(s.search("green", min_probability=0.5)) == 11
        got = s.search("green", k=3, glob="*.gif")
        assert names(got) == ["yellow.gif"]
        got = s.search("red", k=3, under=shapes / "more")
        assert len(got) == 3
        exact = s.search("red", k=16)
        vec = s.embed_query("red").full
        ids, vecs = s.store.catalog.vectors_for([h.id for h in exact])
        assert sorted(h.score for h in exact) == pytest.approx(
            sorted((vecs / np.linalg.norm(vecs, axis=1)[:, None]) @ vec), abs=1e-5
        )


def test_min_probability_on_an_ivf_index_keeps_a_hit_exactly_at_the_threshold(
    env, shapes, monkeypatch
):
    """SQ8 scores are off by ~1e-3: the range search must look below the threshold, or a hit
    whose approximate score falls under it is lost although its exact probability meets it."""
    for i in range(10):
        draw_shape(shapes / "more" / f"red_{i}.png", "red", box=(0.1 + i * 0.03, 0.1, 0.9, 0.9))
    monkeypatch.setattr(
        V, "choose_index", lambda n, dim, budget=None: V.IndexChoice("ivf-sq8", "IVF4,SQ8", 4, 1)
    )
    run("index", shapes, "-q")
    with open_index() as s:
        everything = s.search("red", k=100)
        assert s.index_kind == "ivf-sq8" and len(everything) == 16
        text = s.embed_query("red").text
        every_list = faiss.SearchParametersIVF(nprobe=4)  # type: ignore[call-arg, unused-ignore]
        approx, ids = s.store.vectors.index.search(text[None], 16, params=every_list)
        under = {
            int(i): h.score - float(a)
            for i, a in zip(ids[0], approx[0], strict=True)
            for h in everything
            if h.id == i
        }
        # The hit the SQ8 codes under-rate most, among those with a probability inside (0, 1).
        edge = max((h for h in everything if 0 < h.probability < 1), key=lambda h: under[h.id])
        assert under[edge.id] > 1e-5  # else this index would not test the margin
        got = s.search("red", min_probability=edge.probability)
        # What the flat index gives: every hit whose exact probability is >= the threshold.
        assert {h.id for h in got} == {
            h.id for h in everything if h.probability >= edge.probability
        }
        assert edge.id in {h.id for h in got}


def _hold_in_reverse_id_order(s: Searcher) -> None:
    """Rebuild the searcher's FAISS copy with the vectors added largest id first: FAISS then
    meets tied vectors in the opposite of id order (as another insertion history would)."""
    s.store.ensure_vectors(persist=False)
    vectors = s.store.vectors
    assert vectors.choice is not None
    ids, vecs = s.store.catalog.vectors_for(V.index_ids(vectors.index))
    back = np.argsort(-ids)
    index = V.new_index(vectors.choice, vecs.shape[1])
    if not index.is_trained:
        index.train(np.ascontiguousarray(vecs, dtype=np.float32))
    index.add_with_ids(np.ascontiguousarray(vecs[back], dtype=np.float32), ids[back])
    V.apply_search_params(index, vectors.choice)
    vectors.index = index


@pytest.mark.parametrize("kind", ["flat", "ivf-sq8"])
def test_tied_hits_rank_by_id_whatever_order_faiss_holds_them_in(env, shapes, monkeypatch, kind):
    """Copies score alike to the last bit: they rank by id, the top-k cut included."""
    (shapes / "copies").mkdir()
    for i in range(6):
        shutil.copy(shapes / "red_square.jpg", shapes / "copies" / f"c{i}.jpg")
    if kind != "flat":
        monkeypatch.setattr(
            V, "choose_index", lambda n, dim, budget=None: V.IndexChoice(kind, "IVF2,SQ8", 2, 1)
        )
    run("index", shapes, "-q")
    with open_index() as s:
        _hold_in_reverse_id_order(s)
        assert s.index_kind == kind
        sha = s.search("red", glob="red_square.jpg")[0].sha256
        copies = sorted(h.id for h in s.search("red", k=20) if h.sha256 == sha)
        assert len(copies) == 7
        like = Query().like_id(copies[-1])
        assert [h.id for h in s.search(like, k=3)] == copies[:3]
        assert [h.id for h in s.search(like, k=2, under=shapes / "copies")] == copies[1:3]
        assert [h.id for h in s.search(like, min_score=0.999)] == copies


def test_sort_after_the_cut(env, shapes):
    for i, name in enumerate(sorted(p for p in shapes.rglob("*") if p.is_file())):
        os.utime(name, (1_600_000_000 + i * 1000, 1_600_000_000 + i * 1000))
    run("index", shapes, "-q")
    by_path = search_json("red", "-k", "4", "--sort", "path")
    assert [h["path"] for h in by_path] == sorted(h["path"] for h in by_path)
    assert {names(by_path)[i] for i in range(4)} == set(names(search_json("red", "-k", "4")))
    assert (
        set(names([h for h in by_path if h["rank"] <= 2])) == RED
    )  # rank stays the relevance rank
    by_size = search_json("red", "-k", "6", "--sort", "size")
    assert [h["size"] for h in by_size] == sorted((h["size"] for h in by_size), reverse=True)
    by_date = search_json("red", "-k", "6", "--sort", "date")
    assert [h["mtime"] for h in by_date] == sorted((h["mtime"] for h in by_date), reverse=True)
    assert (
        names(search_json("red", "-k", "6", "--sort", "date", "--reverse")) == names(by_date)[::-1]
    )


# -- image queries ---------------------------------------------------------------------
def test_like_ranks_same_colour_images_first(indexed):
    assert set(names(search_json("--like", indexed / "blue_square.png", "-k", "2"))) == BLUE
    # a photo that is not in the index goes through the LiteRT image tower
    outside = indexed.parent / "query" / "another_red.png"
    draw_shape(outside, "red", size=(256, 256), shape="ellipse")
    hits = search_json("--like", outside)
    assert set(names(hits[:2])) == RED
    assert hits[0]["probability"] is None  # image-only queries are not calibrated


def test_like_mixes_with_text(indexed):
    hits = search_json("blue", "--like", indexed / "red_square.jpg", "-k", "4")
    assert set(names(hits)) == RED | BLUE
    # probability comes from the text part: only the blue ones are likely
    assert {n for n, h in zip(names(hits), hits, strict=True) if h["probability"] > 0.5} == BLUE
    assert (
        set(names(search_json("blue", "--like", indexed / "red_square.jpg", "-p", "0.5"))) == BLUE
    )


def test_like_an_indexed_id_uses_its_stored_vector(indexed, env):
    from wherein.search.service.search import Query, QueryError, open_index

    with open_index(env["index"], env["models"]) as s:
        red_id = next(h.id for h in s.search("red", k=1))
        (indexed / "red_square.jpg").unlink()  # the file is not needed: the vector is stored
        (indexed / "red_disc.png").unlink()
        hits = s.search(Query().like_id(red_id), k=2)
        assert {Path(h.path).name for h in hits} == RED
        with pytest.raises(QueryError, match="not in the index"):
            s.search(Query().like_id(10_000))


def test_min_probability_needs_text(indexed):
    r = run("search", "--like", indexed / "red_square.jpg", "-p", "0.5", ok=False)
    assert r.exit_code == 2 and "needs a text term" in r.output  # options that do not go together


# -- outputs ----------------------------------------------------------------------------
def test_every_output_format_validates_against_the_schema(indexed, validator):
    as_json = search_json("red", "-k", "4")
    assert len(as_json) == 4
    for h in as_json:
        validator.validate(h)
    nl = [json.loads(line) for line in run("search", "red", "-k", "4", "--nl").stdout.splitlines()]
    csv_rows = output.read_csv(run("search", "red", "-k", "4", "--csv").stdout)
    for rows in (nl, csv_rows):
        assert len(rows) == 4
        for h in rows:
            validator.validate(h)
        assert [h["path"] for h in rows] == [h["path"] for h in as_json]
        assert [h["score"] for h in rows] == pytest.approx([h["score"] for h in as_json])
    assert run("search", "red", "-k", "4", "--paths").stdout.splitlines() == [
        h["path"] for h in as_json
    ]
    assert run("search", "red", "-k", "4", "--paths0").stdout.split("\0")[:-1] == [
        h["path"] for h in as_json
    ]
    table = run("search", "red", "-k", "4").stdout
    lines = table.splitlines()
    assert lines[0].split() == ["rank", "prob", "score", "pixels", "path"]
    assert len(lines) == 2 + 4 and Path(lines[2].split()[-1]).name in RED


def test_schema_rejects_broken_hits_and_allows_mask_fields(validator):
    hit = Hit(rank=1, path="/a.jpg", score=0.3, probability=0.9, width=10, height=20, id=1)
    validator.validate(hit.to_dict())
    masked = hit.replace(
        mask_path="/m.png",
        overlay_path="/o.png",
        bbox={"largest": [0, 0, 5, 5], "union": None},
        mask_area=0.25,
        mask_score=0.8,
        extra={"future_field": 1},
    )
    validator.validate(masked.to_dict())
    assert output.read_csv(output.to_csv([masked]))[0]["bbox"] == {
        "largest": [0, 0, 5, 5],
        "union": None,
    }
    for broken in ({"probability": 1.5}, {"rank": 0}, {"exists": "yes"}, {"path": ""}):
        with pytest.raises(jsonschema.ValidationError):
            validator.validate({**hit.to_dict(), **broken})
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({k: v for k, v in hit.to_dict().items() if k != "score"})


# -- stale entries and mismatches ----------------------------------------------------------
def test_stale_entries_are_reported_not_fatal(indexed):
    (indexed / "red_square.jpg").unlink()
    hits = search_json("red", "-k", "2")
    assert {h["path"].endswith("red_square.jpg"): h["exists"] for h in hits} == {
        True: False,
        False: True,
    }
    r = run("search", "red", "-k", "2")
    assert "[missing]" in r.stdout
    assert "1 hit(s) point to files that no longer exist" in r.stderr


def test_space_mismatch_is_a_clear_error(indexed, env, tmp_path):
    other = tmp_path / "other-models"
    shutil.copytree(env["models"], other)
    marker = other / "STANDIN.json"
    info = json.loads(marker.read_text())
    marker.write_text(json.dumps({**info, "space": "another-space"}))
    r = run("search", "red", "--models", other, ok=False)
    assert r.exit_code == 1
    assert "embedding space" in r.stderr and "another-space" in r.stderr
    assert "Traceback" not in r.output


def test_dimension_mismatch_is_a_clear_error(indexed, monkeypatch):
    class Tiny:
        dim = 512

        def encode(self, texts):
            return np.ones((len(texts), 512), np.float32)

    monkeypatch.setattr(Searcher, "text_tower", property(lambda self: Tiny()))
    with open_index() as s, pytest.raises(WhereinError, match="512-dimensional.*768-dimensional"):
        s.search("red")


def test_text_terms_reach_the_text_tower_in_siglips_prompt_unless_raw(indexed, monkeypatch):
    seen: list[list[str]] = []
    real = Searcher.text_tower

    class Spy:
        def __init__(self, tower) -> None:
            self.tower = tower

        def encode(self, texts):
            seen.append(list(texts))
            return self.tower.encode(texts)

        def __getattr__(self, name):
            return getattr(self.tower, name)

    monkeypatch.setattr(Searcher, "text_tower", property(lambda self: Spy(real.fget(self))))
    run("search", "a red car.", "+", "blue", "--json")
    assert seen == [["This is a photo of a red car.", "This is a photo of blue."]]
    seen.clear()
    run("search", "a red car.", "+", "blue", "--raw", "--json")
    assert seen == [["a red car.", "blue"]]


def test_bad_queries_are_one_line_errors(indexed):
    for args, msg in [
        ((), "empty query"),
        (("-", "red"), "positive"),
        (("red", "-"), "ends with an operator"),
        (("--like", "/nonexistent.jpg"), "no such image"),
    ]:
        r = run("search", *args, ok=False)
        assert r.exit_code != 0 and msg in r.output, r.output


def test_missing_index_is_a_clear_error(env):
    r = run("search", "red", ok=False)
    assert r.exit_code == 1 and "no wherein index here" in r.stderr


# -- masks hook -----------------------------------------------------------------------------
def test_mask_hook_calls_the_masking_module(indexed, monkeypatch, tmp_path, validator):
    calls = []

    def add_masks_to_hits(hits, prompt, out_dir, models_root, min_mask_area=None, **_options):
        calls.append((prompt, out_dir, models_root, min_mask_area))
        return [h.replace(mask_path=str(out_dir / f"{h.id}.png"), mask_area=0.5) for h in hits[:1]]

    monkeypatch.setitem(
        sys.modules,
        "wherein.search.localize.masking",
        types.SimpleNamespace(add_masks_to_hits=add_masks_to_hits),
    )
    hits = search_json(
        "red", "-", "blue", "--mask", "--out", tmp_path / "m", "--min-mask-area", "0.1"
    )
    assert calls == [("red", tmp_path / "m", Path(os.environ["WHEREIN_MODELS"]), 0.1)]
    assert len(hits) == 1 and hits[0]["mask_area"] == 0.5
    validator.validate(hits[0])
    run("search", "red", "--mask", "--mask-prompt", "a red disc")
    assert calls[-1][0] == "a red disc"


# -- Python API -------------------------------------------------------------------------------
def test_a_searcher_encodes_a_text_it_saw_lately_once(indexed, monkeypatch):
    """A long-lived Searcher (the web app's) sees the same text on every page turn and filter
    change: the text tower runs for what is new, and the hits are a fresh search's."""
    with open_index() as fresh:
        expected = [h.path for h in fresh.search(Query.parse("red + green"), k=4)]
    with open_index() as s:
        tower = s.text_tower
        real, asked = tower.encode, []

        def encode(texts):
            asked.append(list(texts))
            return real(texts)

        monkeypatch.setattr(tower, "encode", encode)
        s.search(Query.parse("red"), k=2)
        s.search(Query.parse("red"), k=3)
        hits = s.search(Query.parse("red + green"), k=4)
    assert [len(a) for a in asked] == [1, 1]  # "red" once, then "green" alone
    assert "green" in asked[1][0] and [h.path for h in hits] == expected


def test_python_api(indexed):
    with open_index() as s:
        hits = s.search(Query.parse("red").minus("blue"), k=3)
        assert all(isinstance(h, Hit) for h in hits)
        assert {h.path for h in hits[:2]} == {str(indexed / n) for n in RED}
        assert hits[0].width == 400 and hits[0].height == 300
        assert set(s.last_timings) == {"sync_ms", "encode_ms", "ann_ms", "join_ms", "total_ms"}
        assert s.space == s.models.space and s.dim == 768 and s.count == 6
        with pytest.raises(QueryError):
            s.search("red", sort="colour")
