"""Pages of a web search built lazily: the web ranks a block of hits and builds only the page
it shows from the catalog (Searcher.ranked, wherein.search.ranked). The hits must be the
search's own, in every fold (a photo's regions, a video's frames) and every sort; pages cut
from one block must walk it once, none twice, none skipped; and a page must build no more
than itself.

One library for the module: coloured-shape photos, two large photos cut into regions
(`--regions`) and two videos, indexed with the stand-in models (they rank colours).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cli_run import run
from fastapi.testclient import TestClient
from PIL import Image, ImageDraw
from video_files import BLUE, GREEN, RED, solid, write_video

from wherein.indexer.models.standins.palette import COLOURS
from wherein.search.selection import Selection
from wherein.search.service.search import open_index
from wherein.search.web.app import create_app

from conftest import draw_shape

BASE = "http://127.0.0.1"
SHAPES = ["red", "blue", "green", "yellow", "orange", "purple"]


def _rgb(name: str) -> tuple[int, int, int]:
    return tuple(round(c * 255) for c in COLOURS[name])  # type: ignore[return-value]


def draw_library(root: Path) -> None:
    for n in range(18):
        colour = SHAPES[n % len(SHAPES)]
        box = (0.1 + 0.02 * n, 0.15, 0.6 + 0.02 * n, 0.85)
        shape = "ellipse" if n % 4 == 0 else "rect"
        draw_shape(root / f"p{n:02d}_{colour}.png", colour, box=box, shape=shape)
    # Large enough to be cut into regions: a small red square in white, and a blue field.
    big = Image.new("RGB", (2016, 1512), _rgb("white"))
    ImageDraw.Draw(big).rectangle((1400, 300, 1549, 449), fill=_rgb("red"))
    big.save(root / "speck.png")
    big = Image.new("RGB", (2016, 1512), _rgb("blue"))
    ImageDraw.Draw(big).rectangle((500, 900, 599, 999), fill=_rgb("yellow"))
    big.save(root / "sea.png")
    # A video's rank is its best frame's, over all its frames: red in the middle of one.
    timeline = [(0, 4, BLUE), (4, 6, RED), (6, 10, GREEN)]
    write_video(
        root / "clips" / "clip.mp4",
        lambda t: solid(next(c for a, b, c in timeline if a <= t < b)),
        seconds=10,
    )
    write_video(root / "clips" / "green.mp4", lambda t: solid(GREEN), seconds=4)


@pytest.fixture(scope="module")
def library(standin_models, tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("pages")
    photos, index = root / "photos", root / "index"
    photos.mkdir()
    draw_library(photos)
    run("index", photos, "-q", "--regions", "--index", index, "--models", standin_models)
    return index, standin_models


@pytest.fixture(scope="module")
def searcher(library):
    with open_index(*library) as s:
        yield s


@pytest.fixture(scope="module")
def client(library):
    with TestClient(create_app(*library, prefetch_masks=0), base_url=BASE) as c:
        yield c


def _key(h) -> tuple:
    """What tells two hits apart: the file, the item shown, where in it."""
    return (h.id, h.item_id, h.time, None if h.region is None else tuple(h.region))


SELECTIONS = [
    Selection("red", k=10),
    Selection("red", k=200),
    Selection("blue - red", k=7),
    Selection("green:2 + yellow", k=200, reverse=True),
    Selection("red", k=200, sort="date"),
    Selection("blue", k=200, sort="path", reverse=True),
    Selection("yellow", k=200, sort="size"),
    Selection("green", k=200, sort="taken"),
    Selection("red", min_probability=0.02),
    Selection("green", k=5, kind="video"),
    Selection("red", k=30, frames=True),
]


@pytest.mark.parametrize("sel", SELECTIONS, ids=lambda s: repr(s.query))
def test_ranked_hits_are_the_searchs_in_every_fold_and_sort(searcher, sel):
    eager = searcher.search(sel)
    lazy = searcher.ranked(sel)
    assert len(lazy) == len(eager) > 0
    assert lazy[2:5] == eager[2:5]  # a slice read first: built alone
    assert lazy[-1] == eager[-1]
    assert list(lazy) == eager


def test_the_library_exercises_every_fold(searcher):
    """The cases above are only as good as the library: regions and videos rank in it."""
    red = searcher.search("red", k=200)
    assert any(h.region is not None for h in red), "a photo's region"
    clip = [h for h in red if Path(h.path).name == "clip.mp4"]
    assert clip and clip[0].moments and 4 <= clip[0].time < 6, "a video at its red frames"
    # The video's rank is its best frame's over all its frames (a re-ranking fold).
    assert red.index(clip[0]) < len(red) - 1


def _walk(client: TestClient, per_page: int, **params) -> tuple[list[dict], list[dict]]:
    """Every page of a web search, in order: (the hits, the pages' bodies)."""
    hits, bodies, page = [], [], 1
    while True:
        body = client.get("/api/search", params={**params, "per_page": per_page, "page": page})
        assert body.status_code == 200, body.text
        body = body.json()
        bodies.append(body)
        hits += body["hits"]
        if not body["has_more"]:
            return hits, bodies
        assert len(body["hits"]) == per_page
        page += 1


@pytest.mark.parametrize(
    "params",
    [
        {"q": "red"},
        {"q": "blue - red:0.5"},
        {"q": "green", "sort": "date"},
        {"q": "yellow", "sort": "size"},
        {"q": "red", "sort": "path"},
        {"q": "red", "min_probability": 0.02},
    ],
    ids=str,
)
def test_pages_walk_the_searchs_hits_once_each(client, searcher, params):
    hits, bodies = _walk(client, 3, **params)
    want = searcher.search(
        Selection(
            params["q"],
            k=None if "min_probability" in params else 200,
            min_probability=params.get("min_probability"),
            sort=params.get("sort", "score"),
        )
    )
    assert len(bodies) >= 2
    got = [(h["id"], h["item_id"], h["time"], h["region"]) for h in hits]
    assert got == [(h.id, h.item_id, h.time, h.region) for h in want]
    assert len(set(map(repr, got))) == len(got)  # none on two pages
    assert [h["rank"] for h in hits] == [h.rank for h in want]
    if "min_probability" in params:
        assert {b["total"] for b in bodies} == {len(want)}


def test_a_page_builds_only_its_own_hits(client, searcher, monkeypatch):
    """The hits of a page are built from the catalog, not the whole block's: a page turn
    to the kept answer builds its own page alone, and a page read again builds nothing."""
    built: list[int] = []
    state = client.app.state.wherein  # the app's own Searcher (another connection)
    app_rows = state.searcher.store.catalog.hit_rows

    def counted(ids):
        ids = list(ids)
        built.append(len(ids))
        return app_rows(ids)

    monkeypatch.setattr(state.searcher.store.catalog, "hit_rows", counted)
    params = {"q": "purple:1.5 + orange", "per_page": 3}
    first = client.get("/api/search", params={**params, "page": 1}).json()
    assert built == [3] and first["has_more"]
    second = client.get("/api/search", params={**params, "page": 2}).json()
    assert built == [3, 3] and second["timings"].get("reused") == 1.0
    again = client.get("/api/search", params={**params, "page": 1}).json()
    assert built == [3, 3] and again["hits"] == first["hits"]
    # The block ranked more than was built: what the pages did not show stays unbuilt.
    want = searcher.search(Selection(params["q"], k=200))
    assert len(want) > 6
    assert [h["id"] for h in first["hits"] + second["hits"]] == [h.id for h in want[:6]]


def test_exact_scores_rank_the_block_before_any_page_is_built(searcher):
    """The order of a lazily built block is fixed when it is ranked: its pages read in any
    order give the hits of the search's order."""
    sel = Selection("red:1.2 + blue:0.7", k=200)
    lazy = searcher.ranked(sel)
    n = len(lazy)
    pages = [lazy[i : i + 4] for i in reversed(range(0, n, 4))]
    got = [h for page in reversed(pages) for h in page]
    assert list(map(_key, got)) == list(map(_key, searcher.search(sel)))
    assert np.all(np.diff([h.rank for h in got]) == 1)
