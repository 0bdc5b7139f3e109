"""The web app's lanes (search/service/lanes.py): a search for a text already encoded answers
while the text tower is busy with new ones, and thumbnail and mask work yields the CPU to
searches."""

from __future__ import annotations

import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from wherein.search.cli import cli
from wherein.search.service.lanes import BACKGROUND_NICE, MAX_NICE, thread_nice
from wherein.search.web.app import WORK_THREADS, create_app

from conftest import draw_shape

BASE = "http://127.0.0.1"


@pytest.fixture(scope="module")
def index(standin_models, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lanes")
    for i, colour in enumerate(["red", "blue", "green", "yellow"]):
        draw_shape(root / "photos" / f"{i}-{colour}.png", colour, size=(320, 240))
    r = CliRunner().invoke(
        cli,
        ["index", str(root / "photos"), "--index", str(root / "index")]
        + ["--models", str(standin_models), "-q"],
    )
    assert r.exit_code == 0, r.output
    return root / "index"


def test_a_known_text_is_answered_while_new_texts_are_being_encoded(index, standin_models):
    """More new texts than there are search threads, each stuck in the text tower: a search
    for a text encoded before still answers, with the same hits as before."""
    app = create_app(index, standin_models, prefetch_masks=0)
    tower = app.state.wherein.searcher.text_tower
    real_encode = tower.encode
    release = threading.Event()
    entered = threading.Semaphore(0)
    new = ["purple", "orange", "black", "white"][: WORK_THREADS + 1]

    def encode(texts):
        if any(word in t for t in texts for word in new):
            entered.release()
            assert release.wait(60), "never released"
        return real_encode(texts)

    with TestClient(app, base_url=BASE) as client:
        before = client.get("/api/search", params={"q": "red"}).json()["hits"]
        tower.encode = encode
        try:
            with ThreadPoolExecutor(len(new) + 1) as pool:
                stuck = [pool.submit(client.get, "/api/search", params={"q": w}) for w in new]
                assert entered.acquire(timeout=60)  # the tower is busy with a new text
                known = pool.submit(client.get, "/api/search", params={"q": "red"})
                try:
                    r = known.result(timeout=30)
                finally:
                    release.set()
                assert r.status_code == 200
                assert [h["id"] for h in r.json()["hits"]] == [h["id"] for h in before]
                assert [f.result(timeout=60).status_code for f in stuck] == [200] * len(new)
        finally:
            release.set()
            tower.encode = real_encode


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")
def test_thumbnails_and_masks_run_below_searches(index, standin_models):
    """The decode and mask threads run at a lower CPU priority than the search threads (a
    busy machine gives a search the CPU first), and a search scans on one thread."""
    app = create_app(index, standin_models, prefetch_masks=0)
    state = app.state.wherein
    seen: dict[str, tuple[int | None, int]] = {}

    def where(kind: str):
        import faiss

        seen[kind] = (thread_nice(), faiss.omp_get_max_threads())

    with TestClient(app, base_url=BASE) as client:
        hits = client.get("/api/search", params={"q": "red"}).json()["hits"]
        assert client.get(f"/api/thumb/{hits[0]['id']}").status_code == 200
        assert client.get(f"/api/mask/{hits[0]['id']}", params={"prompt": "red"}).status_code == 200
        state.searching.submit(where, "search").result()
        state.decoding.submit(where, "decode").result()
        state.masks._runner.submit(lambda: where("mask")).result()
    base = thread_nice()
    assert base is not None
    lowered = min(MAX_NICE, base + BACKGROUND_NICE)
    assert seen["search"] == (base, 1)
    assert seen["decode"][0] == lowered and seen["mask"][0] == lowered


def test_a_repeated_search_reuses_its_answer_until_the_index_or_a_file_changes(
    standin_models, tmp_path
):
    """A page turn, or the same query again, answers from the search already made, with its
    files looked at again; once another process commits to the index, it searches anew."""
    for i, colour in enumerate(["red", "red", "blue", "red"]):
        draw_shape(tmp_path / "photos" / f"{i}-{colour}.png", colour, size=(320, 240))

    def index() -> None:
        r = CliRunner().invoke(
            cli,
            ["index", str(tmp_path / "photos"), "--index", str(tmp_path / "index")]
            + ["--models", str(standin_models), "-q"],
        )
        assert r.exit_code == 0, r.output

    index()
    app = create_app(tmp_path / "index", standin_models, prefetch_masks=0)
    searcher = app.state.wherein.searcher
    real_search, runs = searcher.ranked, []  # the web's way in: hits built a page at a time

    def counted(*args, **kwargs):
        runs.append(1)
        return real_search(*args, **kwargs)

    searcher.ranked = counted
    with TestClient(app, base_url=BASE) as client:

        def page(n: int, per_page: int = 2) -> list[dict]:
            r = client.get("/api/search", params={"q": "red", "page": n, "per_page": per_page})
            assert r.status_code == 200
            return r.json()["hits"]

        first, second = page(1), page(2)
        assert len(runs) == 1  # the second page is cut from the same answer
        assert {h["id"] for h in first}.isdisjoint(h["id"] for h in second)
        assert all(h["exists"] for h in first + second)

        gone = first[0]["path"]
        Path(gone).unlink()
        again = page(1)
        assert len(runs) == 1
        assert [h["id"] for h in again] == [h["id"] for h in first]
        assert [h["exists"] for h in again] == [False, True]

        draw_shape(tmp_path / "photos" / "4-red.png", "red", size=(330, 240))
        index()  # another connection commits: the next search sees the new photo
        after = page(1, per_page=10)
        assert len(runs) == 2
        assert str(tmp_path / "photos" / "4-red.png") in [h["path"] for h in after]
